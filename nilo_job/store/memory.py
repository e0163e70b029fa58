"""`job.Memory`: the store contract in this process, for tests and for queues that may be lost.

It keeps exactly the promises the SQL stores keep (the unique key, the lease, the claim order,
a kind's concurrency limit, dead rows kept), so a test on Memory tests the program. It is a
queue and not a cache: full is `QueueFull`, never an eviction. Its `max_payload` is the queue's
to check, at push.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .._base.bounds import PAYLOAD_BYTES, whole
from .._base.errors import QueueFull, Refusal, is_int
from .._base.values import Stats
from .contract import (
    ATTEMPTS_KEPT,
    DEATHS_KEPT_US,
    NEWEST_FIRST,
    Attempt,
    Claimed,
    DeadRow,
    Died,
    Done,
    End,
    HeldBack,
    NewRow,
    Rebuilt,
    Released,
    Retrying,
    RowView,
    Snoozed,
    Where,
    WorkerEntry,
    check_state,
    limited,
    listed,
    outcome_of,
)

_HISTORY_MOST = 10_000  # the most done rows a Memory keeps (the oldest go first)


class Memory:
    """Rows in a dict of this process, bounded by `bytes` of payload.

    Done rows kept as history (the queue's `retention_ms`) do not count against `bytes`: it
    keeps the newest 10,000 of them, and the oldest go first.

    Args:
        bytes: the most payload bytes the queue holds at once (queued, running and dead rows).
        max_payload: the largest payload, in bytes of JSON, one row may carry (4 KiB by
            default; from 1 to 1,000,000,000). A push over it is refused with
            `PayloadTooLarge` by the queue, before this store is called.

    Raises:
        Refusal: `bytes` is not a positive int, or `max_payload` is out of its range.
    """

    def __init__(self, *, bytes: int = 1 << 20, max_payload: int = 4096) -> None:
        if not is_int(bytes, 1):
            raise Refusal(f"job.Memory(bytes={bytes!r}) takes a positive number of bytes")
        whole(max_payload, PAYLOAD_BYTES, "job.Memory(max_payload={})", "max_payload")
        self.capacity = bytes
        self.max_payload = max_payload
        self._rows: dict[int, _Row] = {}
        self._unique: dict[tuple[str, str], int] = {}
        # What the claim reads, ordered: (run_at, id) of queued rows, (lease_until, id) of
        # running ones. Lazy: stale entries are skipped when popped.
        self._due: list[tuple[int, int]] = []
        self._leases: list[tuple[int, int]] = []
        self._used = 0
        self._last_id = 0
        self._lock = threading.Lock()
        self._history: dict[int, _Row] = {}  # done rows, in the order they finished
        self._paused: dict[str, int] = {}
        self._entries: dict[str, WorkerEntry] = {}  # the registry: this process's serves
        self._attempts: dict[int, list[Attempt]] = {}  # what each row's ends recorded
        self._deaths: dict[tuple[str, int], int] = {}  # deaths by (kind, minute)

    def __repr__(self) -> str:
        return f"job.Memory(bytes={self.capacity}, max_payload={self.max_payload})"

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    async def now_us(self) -> int | None:
        return None  # one host: its clock is the queue's

    async def watch(self, wake: Callable[[int | None], None]) -> None:
        return None  # no signal between processes: other processes' rows are found by polling

    async def create_missing(self) -> None:
        return None

    async def check(self) -> None:
        return None

    async def push(self, rows: Sequence[NewRow]) -> list[int | None]:
        with self._lock:
            need = sum(len(row.payload) for row in rows)
            if self._used + need > self.capacity:
                raise QueueFull(
                    f"job.Memory holds {self._used} of its {self.capacity} bytes and "
                    f"{need} more do not fit; nothing was pushed"
                )
            return [self._insert(row) for row in rows]

    def _insert(self, row: NewRow) -> int | None:
        """One row in; the caller holds the lock and has checked the room."""
        if row.unique_key is not None and (row.kind, row.unique_key) in self._unique:
            return None
        self._last_id += 1
        stored = _Row(
            self._last_id,
            row.kind,
            row.payload,
            "queued",
            row.run_at,
            unique_key=row.unique_key,
            pushed_at=row.pushed_at,
            trace=row.trace,
        )
        self._rows[self._last_id] = stored
        if row.unique_key is not None:
            self._unique[(row.kind, row.unique_key)] = self._last_id
        self._used += len(row.payload)
        if row.lease_until is None:
            heapq.heappush(self._due, (row.run_at, self._last_id))
        else:  # claimed by its pusher
            stored.state, stored.attempts, stored.lease_until = "running", 1, row.lease_until
            stored.started_at, stored.worker = row.pushed_at, row.worker
            heapq.heappush(self._leases, (row.lease_until, self._last_id))
        return self._last_id

    async def push_in(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        return self.push_in_now(tx, rows)

    def push_in_now(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        """Refused: Memory has no transaction to commit with.

        Raises:
            Refusal: always.
        """
        raise Refusal(
            "push_in writes through your database transaction, and job.Memory has none to "
            "commit with: use push, or a job.Table store"
        )

    async def claim(
        self,
        kinds: Sequence[str],
        now_us: int,
        lease_until_us: int,
        limit: int,
        worker: str | None = None,
        limits: Mapping[str, int] | None = None,
        due_from_us: int | None = None,
    ) -> list[Claimed]:
        with self._lock:
            if not limits:
                taken = self._claim(set(kinds), now_us, lease_until_us, limit, worker, due_from_us)
            else:
                free, capped = limited(kinds, limits)
                taken = []
                for kind, most in capped:  # under the lock: no other claim counts meanwhile
                    room = min(limit - len(taken), most - self._running(kind, now_us))
                    if room > 0:
                        taken += self._claim({kind}, now_us, lease_until_us, room, worker)
                if free and len(taken) < limit:
                    left = limit - len(taken)
                    taken += self._claim(set(free), now_us, lease_until_us, left, worker)
                taken.sort(key=lambda pair: (pair[0].run_at, pair[0].id))
            return [
                Claimed(
                    row.id, row.kind, row.payload, row.attempts, row.run_at, row.unique_key,
                    None, row.snoozes, row.trace, held,
                )
                for row, held in taken
            ]  # fmt: skip

    def _claim(
        self,
        kinds: set[str],
        now_us: int,
        lease_until_us: int,
        limit: int,
        worker: str | None,
        due_from_us: int | None = None,
    ) -> list[tuple[_Row, str | None]]:
        """(under the lock) `claim` of up to `limit` rows of `kinds`, none limited: each row
        taken with the worker that held it when it was running under a lease that ran out
        ("" when unknown), or None when it was queued. With `due_from_us`, queued rows due
        from then on only."""
        queued = self._take(self._due, now_us, limit, kinds, "queued", due_from_us)
        if due_from_us is None:
            expired = self._take(self._leases, now_us, limit, kinds, "running")
        else:
            expired = []
        both = sorted(queued + expired, key=lambda row: (row.run_at, row.id))
        taken, left = both[:limit], both[limit:]
        for row in left:  # due but past the limit: back in their heaps, unchanged
            self._index(row)
        held = [(row, (row.worker or "") if row.state == "running" else None) for row in taken]
        for row in taken:
            row.state = "running"
            row.lease_until = lease_until_us
            row.attempts += 1
            row.started_at, row.worker = now_us, worker
            heapq.heappush(self._leases, (lease_until_us, row.id))
        return held

    def _running(self, kind: str, now_us: int) -> int:
        """(under the lock) How many rows of `kind` run under a live lease at `now_us`."""
        return sum(
            1
            for row in self._rows.values()
            if row.kind == kind and row.state == "running" and (row.lease_until or 0) > now_us
        )

    def _take(
        self,
        heap: list[tuple[int, int]],
        now_us: int,
        limit: int,
        kinds: set[str],
        state: str,
        from_us: int | None = None,
    ) -> list[_Row]:
        """Pop up to `limit` live rows of `kinds` in `state` whose heap time is due by `now_us`
        (and, with `from_us`, not before it).

        The heaps are lazy: an entry whose row has since moved on (claimed, finished, cancelled,
        due at another time) is dropped here. Rows of other kinds, and those due before
        `from_us`, go back untouched.
        """
        found: list[_Row] = []
        others: list[tuple[int, int]] = []
        seen: set[int] = set()
        while heap and heap[0][0] <= now_us and len(found) < limit:
            entry = heapq.heappop(heap)
            row = self._rows.get(entry[1])
            if row is None or row.state != state or row.id in seen:
                continue
            if entry[0] != (row.run_at if state == "queued" else row.lease_until):
                continue
            if row.kind not in kinds or (from_us is not None and entry[0] < from_us):
                others.append(entry)
                continue
            seen.add(row.id)
            found.append(row)
        for entry in others:
            heapq.heappush(heap, entry)
        return found

    def _index(self, row: _Row) -> None:
        """Put a queued or running row in the heap the claim reads it from."""
        if row.state == "queued":
            heapq.heappush(self._due, (row.run_at, row.id))
        elif row.state == "running":
            heapq.heappush(self._leases, (row.lease_until, row.id))

    def _drop(self, row: _Row) -> None:
        del self._rows[row.id]
        self._used -= len(row.payload)
        self._free_key(row)
        self._attempts.pop(row.id, None)  # a done row kept as history gets them back (`finish`)

    def _tried(self, row: _Row, end: End) -> None:
        """Record what `end` records of `row`'s attempts (see `End`), keeping the newest
        `ATTEMPTS_KEPT`; the caller holds the lock, before the end changes the row."""
        if end.ended_at is None:
            return
        tried = self._attempts.setdefault(row.id, [])
        if end.lost_from is not None:
            ended = row.started_at if row.started_at is not None else row.lease_until
            tried.append(Attempt(row.attempts - 1, "lost", None, ended, end.lost_from or None))
        if not isinstance(end, Done):
            failed = end if isinstance(end, Retrying | Died) else None
            tried.append(
                Attempt(
                    row.attempts,
                    outcome_of(end),
                    row.started_at,
                    end.ended_at,
                    row.worker,
                    None if failed is None else failed.error,
                    None if failed is None else failed.detail,
                    None if failed is None else failed.traceback or None,
                )
            )
        del tried[:-ATTEMPTS_KEPT]
        if not tried:
            del self._attempts[row.id]
        if isinstance(end, Died):
            minute = end.died_at - end.died_at % 60_000_000
            self._deaths[row.kind, minute] = self._deaths.get((row.kind, minute), 0) + 1
            for old in [
                k for k in self._deaths if k[0] == row.kind and k[1] < minute - DEATHS_KEPT_US
            ]:
                del self._deaths[old]

    def _free_key(self, row: _Row) -> None:
        if row.unique_key is not None:
            self._unique.pop((row.kind, row.unique_key), None)
            row.unique_key = None

    async def finish(self, ends: Sequence[End]) -> list[bool]:
        answers = []
        with self._lock:
            for end in ends:
                row = self._rows.get(end.id)
                if row is None or row.state != "running" or row.attempts != end.attempts:
                    answers.append(False)
                    continue
                self._tried(row, end)
                if isinstance(end, Done):
                    key = row.unique_key
                    tried = self._attempts.get(row.id)
                    self._drop(row)  # the key is released at once, the attempts forgotten
                    if end.finished_at is not None:
                        row.unique_key = key  # kept in the history, holding nothing
                        self._keep(row, end)
                        if tried is not None:
                            self._attempts[row.id] = tried
                elif isinstance(end, Retrying):
                    row.state, row.run_at = "queued", end.run_at
                    row.error, row.detail, row.traceback = end.error, end.detail, end.traceback
                    if end.release_key:
                        self._free_key(row)
                    self._index(row)
                elif isinstance(end, Died):
                    row.state, row.died_at = "dead", end.died_at
                    row.error, row.detail, row.traceback = end.error, end.detail, end.traceback
                    self._free_key(row)
                elif isinstance(end, Released):
                    row.state, row.run_at, row.attempts = "queued", end.run_at, row.attempts - 1
                    row.started_at = row.worker = None  # given back unrun
                    self._index(row)
                elif isinstance(end, Snoozed):
                    row.state, row.run_at, row.attempts = "queued", end.run_at, row.attempts - 1
                    row.snoozes += 1
                    if end.release_key:
                        self._free_key(row)
                    self._index(row)
                if end.then is not None:
                    # A schedule's next tick may go over the byte budget: losing it would stop
                    # the schedule in silence, which is worse than a full queue.
                    self._insert(end.then)
                answers.append(True)
        return answers

    def _keep(self, row: _Row, end: Done) -> None:
        """Keep a done row as history; the caller holds the lock."""
        row.state, row.finished_at, row.result = "done", end.finished_at, end.result
        row.lease_until = 0
        if end.started_at is not None:
            row.started_at = end.started_at
        self._history[row.id] = row
        while len(self._history) > _HISTORY_MOST:
            oldest = next(iter(self._history))
            del self._history[oldest]
            self._attempts.pop(oldest, None)

    async def hand_on(self, row_id: int, attempts: int, then: NewRow) -> bool:
        with self._lock:
            row = self._rows.get(row_id)
            if row is None or row.state != "running" or row.attempts != attempts:
                return False
            if row.unique_key is None:
                return False
            self._free_key(row)
            self._insert(then)
            return True

    async def cancel(self, row_id: int) -> bool:
        with self._lock:
            row = self._rows.get(row_id)
            if row is None or row.state != "queued":
                return False
            self._drop(row)
            return True

    async def retry_many(self, ids: Sequence[int], now_us: int) -> list[int]:
        return [row_id for row_id in ids if await self.retry_dead(row_id, now_us)]

    async def cancel_many(self, ids: Sequence[int]) -> list[int]:
        return [row_id for row_id in ids if await self.cancel(row_id)]

    async def delete_many(self, ids: Sequence[int]) -> list[int]:
        gone = []
        with self._lock:
            for row_id in ids:
                if self._history.pop(row_id, None) is not None:
                    self._attempts.pop(row_id, None)
                    gone.append(row_id)
                elif (row := self._rows.get(row_id)) is not None and row.state == "dead":
                    self._drop(row)
                    gone.append(row_id)
        return gone

    async def prune(self, before_us: int, limit: int) -> int:
        with self._lock:
            old = sorted(
                (row.finished_at or 0, row.id)
                for row in self._history.values()
                if (row.finished_at or 0) < before_us
            )[:limit]
            for _at, row_id in old:
                del self._history[row_id]
                self._attempts.pop(row_id, None)
        return len(old)

    async def pause(self, kind: str, at_us: int) -> bool:
        with self._lock:
            if kind in self._paused:
                return False
            self._paused[kind] = at_us
            return True

    async def resume(self, kind: str) -> bool:
        with self._lock:
            return self._paused.pop(kind, None) is not None

    async def retry_dead(self, row_id: int, now_us: int) -> bool:
        with self._lock:
            row = self._rows.get(row_id)
            if row is None or row.state != "dead":
                return False
            row.state, row.run_at, row.attempts = "queued", now_us, 0
            row.error = row.detail = row.traceback = row.died_at = None
            row.started_at = row.worker = None
            row.snoozes = 0
            self._index(row)
            return True

    _rows: dict[int, _Row]
    _history: dict[int, _Row]
    _unique: dict[tuple[str, str], int]
    _paused: dict[str, int]
    _lock: threading.Lock

    async def stats(self) -> Stats:
        counts = {"queued": 0, "running": 0, "dead": 0}
        with self._lock:
            for row in self._rows.values():
                counts[row.state] += 1
            done = len(self._history)
        return Stats(counts["queued"], counts["running"], counts["dead"], done)

    async def dead_ones(self, limit: int) -> list[DeadRow]:
        with self._lock:
            dead = [row for row in self._rows.values() if row.state == "dead"]
        dead.sort(key=lambda row: (row.died_at or 0, row.id), reverse=True)
        return [
            DeadRow(
                row.id,
                row.kind,
                row.error or "",
                row.attempts,
                listed(row.payload),
                row.died_at or 0,
                row.detail or "",
                row.traceback or "",
            )
            for row in dead[:limit]
        ]

    async def rows(self, state: str, limit: int) -> list[RowView]:
        return await self.find(Where(state=check_state(state)), None, limit)

    async def row(self, row_id: int) -> RowView | None:
        with self._lock:
            found = self._rows.get(row_id) or self._history.get(row_id)
            if found is None:
                return None
            return _view(found).with_attempts(self._attempts.get(row_id, ()))

    def _matching(self, where: Where) -> list[_Row]:
        """The rows that match `where`, in its state's order; the caller holds the lock."""
        state = check_state(where.state or "")
        pool = self._history.values() if state == "done" else self._rows.values()
        found = [
            row
            for row in pool
            if where.matches(row.state, row.kind, row.error, row.unique_key, row.id)
        ]
        found.sort(key=lambda row: _view(row).sort_key(), reverse=state in NEWEST_FIRST)
        return found

    async def find(self, where: Where, after: tuple[int, int] | None, limit: int) -> list[RowView]:
        newest_first = check_state(where.state or "") in NEWEST_FIRST
        with self._lock:
            views = [_view(row, in_list=True) for row in self._matching(where)]
        if after is not None:
            views = [
                view
                for view in views
                if (view.sort_key() < after if newest_first else view.sort_key() > after)
            ]
        return views[:limit]

    async def count(self, where: Where) -> int:
        with self._lock:
            return len(self._matching(where))

    async def paused(self) -> dict[str, int]:
        with self._lock:
            return dict(self._paused)

    async def ended(self, since_us: int) -> list[tuple[str, str, int, int]]:
        counts: dict[tuple[str, str, int], int] = {}
        with self._lock:
            for row in self._history.values():
                at = row.finished_at
                if at is not None and at >= since_us:
                    key = (row.kind, "done", at - at % 60_000_000)
                    counts[key] = counts.get(key, 0) + 1
            for (kind, minute), n in self._deaths.items():  # deaths are events
                if minute >= since_us:
                    counts[kind, "dead", minute] = n
        return [(kind, state, minute, n) for (kind, state, minute), n in sorted(counts.items())]

    async def durations(self, kind: str, since_us: int, limit: int) -> list[int]:
        with self._lock:
            done = [
                row
                for row in self._history.values()
                if row.kind == kind and (row.finished_at or 0) >= since_us
            ]
        done.sort(key=lambda row: (row.finished_at or 0, row.id), reverse=True)
        return [
            (row.finished_at or 0) - (row.started_at or 0)
            for row in done[:limit]
            if row.started_at is not None
        ]

    async def oldest_due(self, now_us: int) -> dict[str, int]:
        oldest: dict[str, int] = {}
        with self._lock:
            for row in self._rows.values():
                if row.state == "queued" and row.run_at <= now_us:
                    oldest[row.kind] = min(oldest.get(row.kind, row.run_at), row.run_at)
        return oldest

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]:
        with self._lock:
            return [
                _view(self._rows[row_id])
                for kind in sorted(set(kinds))
                if (row_id := self._unique.get((kind, key))) is not None
            ]

    async def counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for row in (*self._rows.values(), *self._history.values()):
                counts[(row.kind, row.state)] = counts.get((row.kind, row.state), 0) + 1
        return counts

    # ---------------------------------------------------------------- the worker registry

    async def register(self, entry: WorkerEntry) -> None:
        with self._lock:
            self._entries[entry.id] = entry

    async def beat(
        self,
        entry_id: str,
        now_us: int,
        running: Sequence[int],
        renew_until_us: int | None,
        worker: str,
        forget_before_us: int,
    ) -> bool:
        with self._lock:
            if renew_until_us is not None:
                for row_id in running:
                    row = self._rows.get(row_id)
                    if (
                        row is not None
                        and row.state == "running"
                        and row.worker == worker
                        and renew_until_us > row.lease_until
                    ):
                        row.lease_until = renew_until_us
                        heapq.heappush(self._leases, (renew_until_us, row.id))
            for other in [e for e in self._entries.values() if e.id != entry_id]:
                if other.beat_at < forget_before_us:
                    del self._entries[other.id]
            entry = self._entries.get(entry_id)
            if entry is None:
                return False
            self._entries[entry_id] = dataclasses.replace(
                entry, beat_at=now_us, running=tuple(running)
            )
            return True

    async def unregister(self, entry_id: str) -> None:
        with self._lock:
            self._entries.pop(entry_id, None)

    async def workers(self) -> list[WorkerEntry]:
        with self._lock:
            return sorted(self._entries.values(), key=lambda e: (e.started_at, e.id))

    async def index_sizes(self) -> dict[str, int]:
        return {}

    async def rebuild_swollen(self, before: Mapping[str, int] | None = None) -> list[Rebuilt]:
        return []  # (nothing to rebuild in this process)

    async def held_back(self) -> HeldBack | None:
        return None  # nothing outside this process holds a Memory's rows


@dataclass(slots=True)
class _Row:
    id: int
    kind: str
    payload: bytes
    state: str
    run_at: int
    attempts: int = 0
    lease_until: int = 0
    unique_key: str | None = None
    error: str | None = None
    detail: str | None = None
    traceback: str | None = None
    died_at: int | None = None
    pushed_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    worker: str | None = None
    result: bytes | None = None
    snoozes: int = 0
    trace: str | None = None


def _view(row: _Row, *, in_list: bool = False) -> RowView:
    """`row` as the operator reads it: with its whole payload, or `in_list` the start of it a
    list needs (`listed`)."""
    lease = row.lease_until if row.state == "running" else None
    payload = listed(row.payload) if in_list else row.payload
    return RowView(
        row.id, row.kind, row.state, payload, row.run_at, row.attempts, row.unique_key,
        lease, row.error, row.died_at, row.detail, row.traceback, None, row.pushed_at,
        row.started_at, row.finished_at, row.worker, row.result,
        None if row.state == "done" else row.snoozes,
    )  # fmt: skip
