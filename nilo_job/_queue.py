"""`job.Jobs`: the queue. Push, cancel, stats, status, drain, serve: the worker loop and the clock.

The queue holds every policy the seed describes and hands the store only values: the rows to write,
the kinds it may claim, the clock reading, and the end of each run decided by `_policy`. The clock
is read here and nowhere below: `drain_at(now_us)` replaces it for a whole drain.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import heapq
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, overload

import msgspec

from . import _policy
from ._calling import Execution, Grouped, call_async, call_in_thread
from ._clock import datetime_to_us, now_us
from ._errors import BadPayload, LeaseLost, Refusal, StoreUnavailable
from ._kinds import MAX_NAME_BYTES, Kind, check_unique_names, read_deps, read_kind
from ._observe import Observer, Outcome, around
from ._spaces import Space
from ._sync import SyncJobs
from ._values import Dead, Missed, Overlap, Run, State, Stats, Status, Tick
from .store.contract import Claimed, Died, Done, End, NewRow, Released, Retrying, Store

log = logging.getLogger("nilo_job")

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_NO_OBSERVER: contextlib.AbstractContextManager[None] = contextlib.nullcontext()  # reusable
_BUSY_AGAIN_US = 1_000_000  # a row whose earlier thread still runs here is due again after this
_CLOCK_EVERY_US = 60_000_000  # how often serve re-reads a store's own clock
_DUE_KNOWN_MOST = 4_096  # later due times serve keeps a wake-up for; past that, the poll finds rows
_AHEAD_S = 0.02  # serve claims ahead what its workers would start within this many seconds
_AHEAD_MAX = 8  # and at most this many rows per worker


def _nothing() -> None:
    return None


def _settle(future: asyncio.Future[None], *_done: object) -> None:
    """Resolve `future` unless it is already (a callback for free() and for a task's end)."""
    if not future.done():
        future.set_result(None)


SCHEDULE_KEY = "schedule"
"""The unique key of a schedule's next tick: one row of a scheduled kind holds it (seed)."""

_STATUS = msgspec.json.Encoder()
_STATUS_DECODER = msgspec.json.Decoder(Status)


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise Refusal(f"job.Jobs({name}={value!r}) takes a positive int")
    return value


class Jobs:
    """The queue: the jobs it can run, the store it runs on, and the services a run may ask for.

    Args:
        kinds: the job classes (dataclasses with `nilo_job`, `retry` and `run`).
        store: `job.Table(...)` or `job.Memory(...)`.
        deps: an object whose annotated attributes answer `run` parameters by type; optional
            when no run asks for a service.
        status: a Space (`job.MemorySpace`, `job.RedisSpace`) for `status` and `progress`.
        workers: rows running at once in this process (default 4).
        poll_ms: how long an idle worker waits before asking the store again when nothing
            wakes it, in milliseconds (default 1,000).
        timeout_ms: how long one run may take, in milliseconds, for a kind that names no
            `timeout_ms` of its own (default 60,000).

    The lease is the longest timeout across the kinds and the queue, plus one second (seed).

    Raises:
        Refusal: a kind or a setting cannot work; the message names the class, the field and
            what to write.
    """

    def __init__(
        self,
        *,
        kinds: Sequence[type],
        store: Store,
        deps: object = None,
        status: Space | None = None,
        workers: int = 4,
        poll_ms: int = 1_000,
        timeout_ms: int = 60_000,
    ) -> None:
        if isinstance(kinds, type) or not isinstance(kinds, Sequence) or not kinds:
            raise Refusal("job.Jobs(kinds=[...]) takes a non-empty list of job classes")
        if not isinstance(store, Store):
            lacks = [name for name in _STORE_METHODS if not callable(getattr(store, name, None))]
            raise Refusal(
                f"job.Jobs(store={store!r}): pass job.Table('sqlite:///app.db'), "
                "job.Table('postgresql://…') or job.Memory(bytes=1 << 20); a store of your own "
                f"must have every method of nilo_job.store.contract.Store, and this one lacks "
                f"{', '.join(lacks)}"
            )
        if status is not None and not isinstance(status, Space):
            raise Refusal(
                f"job.Jobs(status={status!r}): pass job.MemorySpace(ttl_s=600) or "
                "job.RedisSpace(client, name=..., ttl_s=600)"
            )
        self.workers = _positive("workers", workers)
        self.poll_ms = _positive("poll_ms", poll_ms)
        self.timeout_ms = _positive("timeout_ms", timeout_ms)
        self.store = store
        self.deps = deps
        self.space = status
        deps_types = read_deps(deps)
        read = [read_kind(cls, deps_types, Jobs) for cls in kinds]
        check_unique_names(read)
        self._kinds: dict[str, Kind] = {kind.name: kind for kind in read}
        self._by_class: dict[type, Kind] = {kind.cls: kind for kind in read}
        self._names = tuple(self._kinds)
        # A scheduled kind's payload: every field at its default (nobody pushes it).
        self._tick_payloads = {
            kind.name: kind.codec.encode(kind.cls()) for kind in read if kind.schedule is not None
        }
        self.lease_ms = max([self.timeout_ms, *(k.timeout_ms or 0 for k in read)]) + 1_000
        self._clock: Callable[[], int] = now_us
        self._clock_read_at = 0
        # The serving loop, and what wakes it; set while serve() runs.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serve_pid = 0
        self._wakeup: asyncio.Event | None = None
        self._serve_task: asyncio.Task[None] | None = None
        self._feed: _Feed | None = None
        # When rows this process knows of fall due later (µs, a heap): pushed with a delay, a
        # retry's wait, a schedule's next tick, another process's NOTIFY. serve wakes for the
        # earliest instead of waiting for its poll (see _wake_at).
        self._due: list[int] = []
        # Writes serve's stop left to finish: pushed rows given back, ends recorded late.
        self._background: set[asyncio.Task[Any]] = set()
        # Rows this process holds, by id, until their execution (thread included) has ended.
        self._busy: dict[int, Execution] = {}
        self._progress: dict[int, int] = {}
        self._observers: tuple[Observer, ...] = ()
        self._batcher: Grouped[End, bool] | None = None
        # Concurrent pushes of this queue share a transaction (see Grouped).
        self._push_one: Grouped[NewRow, int | None] = Grouped(self._push_rows)
        self._run_s: float | None = None  # recent seconds per run (moving average), for _ahead

    async def _push_rows(self, rows: list[NewRow]) -> list[int | None]:
        return await self.store.push(rows)

    async def _finish_ends(self, ends: list[End]) -> list[bool]:
        return await self.store.finish(ends)

    def __repr__(self) -> str:
        return f"job.Jobs(kinds={list(self._names)}, store={self.store!r}, workers={self.workers})"

    @functools.cached_property
    def sync(self) -> SyncJobs:
        """The blocking face of this queue, for code that does not run asyncio (Flask, Django,
        scripts): `jobs.sync.push(value)`, `jobs.sync.push_in(conn, value)`, `jobs.sync.cancel(id)`,
        `jobs.sync.stats()`, and the operator calls."""
        return SyncJobs(self)

    @property
    def kinds(self) -> tuple[Kind, ...]:
        """The kinds this queue runs, as read from their classes."""
        return tuple(self._kinds.values())

    # ----------------------------------------------------------------------------------- push

    def _new_row(
        self, value: object, after_ms: int | None, at: int | datetime | None, unique: str | None
    ) -> tuple[Kind, NewRow]:
        kind = self._by_class.get(type(value))
        if kind is None:
            known = ", ".join(cls.__name__ for cls in self._by_class)
            raise Refusal(
                f"{type(value).__name__} is not a kind of this queue ({known}): add it to "
                "job.Jobs(kinds=[...])"
            )
        if after_ms is not None and at is not None:
            raise Refusal("push takes after_ms or at, not both: one says when the row is due")
        now = self._clock()
        if after_ms is not None:
            if isinstance(after_ms, bool) or not isinstance(after_ms, int) or after_ms < 0:
                raise Refusal(f"after_ms={after_ms!r}: a whole number of milliseconds, 0 or more")
            run_at = now + after_ms * 1_000
        elif at is not None:
            if isinstance(at, datetime):
                run_at = datetime_to_us(at)
            elif isinstance(at, bool) or not isinstance(at, int):
                raise Refusal(f"at={at!r}: microseconds since the epoch (int) or an aware datetime")
            else:
                run_at = at
        else:
            run_at = now
        if not _INT64_MIN <= run_at <= _INT64_MAX:
            raise Refusal(
                f"the row would be due at {run_at} µs since the epoch, which no store can hold "
                "(64-bit microseconds reach the year 294,247): pass a nearer time"
            )
        if unique is not None:
            if not isinstance(unique, str) or not unique:
                raise Refusal(f"unique={unique!r}: a non-empty str key")
            if len(unique.encode()) > MAX_NAME_BYTES:
                raise Refusal(
                    f"unique is {len(unique.encode())} bytes; a key is at most {MAX_NAME_BYTES}"
                    " bytes: hash or shorten it"
                )
        return kind, NewRow(kind.name, kind.codec.encode(value), run_at, unique)

    @overload
    async def push(
        self,
        value: object,
        *,
        after_ms: int | None = None,
        at: int | datetime | None = None,
        unique: None = None,
        within: None = None,
    ) -> int: ...

    @overload
    async def push(
        self,
        value: object,
        *,
        after_ms: int | None = None,
        at: int | datetime | None = None,
        unique: str,
        within: Space | None = None,
    ) -> int | None: ...

    @overload
    async def push(
        self,
        value: object,
        *,
        after_ms: int | None = None,
        at: int | datetime | None = None,
        unique: str | None = None,
        within: Space | None = None,
    ) -> int | None: ...

    async def push(
        self,
        value: object,
        *,
        after_ms: int | None = None,
        at: int | datetime | None = None,
        unique: str | None = None,
        within: Space | None = None,
    ) -> int | None:
        """Queue `value` (an instance of one of the kinds) and wake a worker of this process.

        Args:
            value: the payload; encoded to JSON now, so later changes to it are not seen.
            after_ms: run no sooner than this many milliseconds from now.
            at: run no sooner than this moment: microseconds since the epoch, or an aware
                datetime. One of `after_ms` and `at`, not both.
            unique: a key (at most 64 bytes) that at most one queued or running row of this
                kind may carry; the answer is None when a row already carries it.
            within: a Space put in front of `unique`: a second push of the key inside the
                Space's time to live is answered None by the Space and never reaches the table.

        Returns:
            The new row's id, or None when `unique`/`within` found the key taken.

        Raises:
            Refusal: bad options or a payload that cannot round-trip; nothing is written.
            QueueFull, PayloadTooLarge: the store has no room (Memory); nothing is written.
        """
        if within is not None and unique is None:
            raise Refusal("push(within=...) needs unique=...: the window has to remember a key")
        if within is not None and not isinstance(within, Space):
            raise Refusal(f"within={within!r}: pass a job.MemorySpace or job.RedisSpace")
        kind, row = self._new_row(value, after_ms, at, unique)
        mark = f"within:{kind.name}:{unique}" if within is not None else ""
        if within is not None and not await within.add(mark, b"1"):
            return None
        feed = self._idle_feed(row)
        claimed_at = 0
        if feed is not None:  # a worker of this process is idle: the row is claimed for it
            claimed_at = self._clock()
            row = dataclasses.replace(row, lease_until=claimed_at + self.lease_ms * 1_000)
        try:
            with self._pushing(kind.name):
                if feed is None:
                    row_id = await self._push_one(row)
                else:
                    row_id = await self._push_claimed(feed, kind, row, claimed_at)
                self._pushed([row], [row_id])
        except BaseException:
            if within is not None:
                await within.delete(mark)
            raise
        if row_id is None:
            return None
        try:
            await self._put_status(row_id, State.QUEUED, 0)  # before the run's own statuses
        finally:
            if feed is None:
                self._wake_at(row.run_at)
            else:
                self._hand_over(feed, kind, row, row_id, claimed_at)
        if self._background:  # serve stopped meanwhile: its row is being queued again
            await asyncio.wait(set(self._background))
        return row_id

    async def _push_claimed(
        self, feed: _Feed, kind: Kind, row: NewRow, claimed_at: int
    ) -> int | None:
        """Push `row`, inserted already claimed for `feed`'s idle worker; the caller hands it
        over (`_hand_over`) once it has written the row's status.

        Meanwhile that worker is promised the row, so that the claim loop does not claim for it
        too. A push cancelled before its row was sent writes nothing; one cancelled after lets
        the write finish and hands the row over itself, never leaving it running and unrun for
        a lease.
        """
        feed.promised += 1
        write = asyncio.ensure_future(self._push_one(row))
        try:
            return await asyncio.shield(write)
        except asyncio.CancelledError:
            if not write.done() and not self._push_one.in_flight(row):
                write.cancel()  # not sent: nothing is written (a group drops it)
            else:
                write.add_done_callback(
                    functools.partial(self._hand_over_written, feed, kind, row, claimed_at)
                )
            raise
        finally:
            feed.promised -= 1
            if not write.done() or write.cancelled() or write.exception() is not None:
                self.wake()  # the promised worker is idle still: the claim loop claims for it

    def _hand_over_written(
        self,
        feed: _Feed,
        kind: Kind,
        row: NewRow,
        claimed_at: int,
        write: asyncio.Future[int | None],
    ) -> None:
        """`_hand_over` for a push whose caller was cancelled while its row was written."""
        if not write.cancelled() and write.exception() is None:
            row_id = write.result()
            if row_id is not None:
                self._hand_over(feed, kind, row, row_id, claimed_at)
            else:
                self.wake()  # its key was taken: the promised worker is idle still

    def _idle_feed(self, row: NewRow) -> _Feed | None:
        """serve's feed, when `row` is due now and a worker of serve is idle on this event loop
        with no row promised to it: the push then claims the row itself, and the worker starts
        it as soon as it has committed (no claim, no wait for the claim loop)."""
        feed = self._feed
        if feed is None or feed.closed or len(feed.idle) <= feed.promised:
            return None
        if self._serving_loop() is not asyncio.get_running_loop():
            return None
        return feed if row.run_at <= self._clock() else None

    def _hand_over(
        self, feed: _Feed, kind: Kind, row: NewRow, row_id: int, claimed_at: int
    ) -> None:
        """Give the row a push claimed for `feed` to serve's workers; if serve has stopped
        meanwhile, queue it again unrun."""
        claimed = Claimed(row_id, row.kind, row.payload, 1, row.run_at, row.unique_key)
        if not feed.closed:
            feed.put([claimed], claimed_at)
            return
        self._in_background(self._write_end(kind, claimed, _released(claimed)))

    def _in_background(self, work: Coroutine[Any, Any, object]) -> None:
        """Run `work` in a task that serve's stop and later pushes wait for."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def push_many(
        self,
        values: Sequence[object],
        *,
        after_ms: int | None = None,
        at: int | datetime | None = None,
    ) -> list[int]:
        """Queue many values (of any of the kinds) in one transaction, for bulk loads.

        All or nothing: every value is encoded and checked before anything is written, and the
        rows are inserted together (one statement on PostgreSQL). Unique keys are not taken
        here; push each keyed row with `push`.

        Args:
            values: the payloads, in order.
            after_ms, at: as for `push`, the same for every row.

        Returns:
            The new rows' ids, in the order of `values`.

        Raises:
            Refusal: a value cannot be pushed (nothing is written).
            QueueFull, PayloadTooLarge: the store has no room (Memory); nothing is written.
        """
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise Refusal("push_many takes a list of values (instances of the queue's kinds)")
        made = [self._new_row(value, after_ms, at, None) for value in values]
        if not made:
            return []
        rows = [row for _kind, row in made]
        with self._pushing(rows[0].kind):
            ids = await self.store.push(rows)
            self._pushed(rows, ids)
        self._wake_at(min(row.run_at for row in rows))
        return [row_id for row_id in ids if row_id is not None]

    async def push_in(
        self,
        tx: object,
        value: object,
        *,
        after_ms: int | None = None,
        at: int | datetime | None = None,
        unique: str | None = None,
    ) -> int | None:
        """Queue `value` through your own open transaction `tx`: the row exists once it commits.

        The outbox pattern with no outbox (seed: "In a transaction"). A push_in cannot wake a
        worker, because the row is not there until the commit: call `jobs.wake()` after it.

        Args:
            tx: a `sqlite3.Connection` with an open transaction on the store's database file; a
                psycopg `Connection`/`AsyncConnection` in a transaction; a SQLAlchemy
                `Session`/`AsyncSession`/`Connection`/`AsyncConnection`; Django's
                `connection` inside `transaction.atomic()`.
            after_ms, at, unique: as for `push`. `within` is refused: a cache cannot roll back.

        Returns:
            The new row's id (visible to others after the commit), or None when `unique` found
            the key taken.

        Raises:
            Refusal: `tx` is not one the store can write through (the message lists them), the
                store is a `job.Memory`, or the options cannot go together.
        """
        kind, row = self._new_row(value, after_ms, at, unique)
        with self._pushing(kind.name):
            (row_id,) = await self.store.push_in(tx, [row])
            self._pushed([row], [row_id])
        return row_id

    def observe(self, observer: Observer) -> None:
        """Tell `observer` about every push, claim, run and end from now on (metrics, tracing).

        Raises:
            Refusal: `observer` lacks a method of `nilo_job._observe.Observer`.
        """
        if not isinstance(observer, Observer):
            raise Refusal(
                f"observe({observer!r}): an observer has pushing, pushed, claimed, running and "
                "ended; see nilo_job.metrics for one"
            )
        self._observers = (*self._observers, observer)

    def _pushing(self, kind: str) -> contextlib.AbstractContextManager[None]:
        if not self._observers:
            return _NO_OBSERVER
        return around([observer.pushing(kind) for observer in self._observers])

    def _pushed(self, rows: Sequence[NewRow], ids: Sequence[int | None]) -> None:
        for observer in self._observers:
            for row, row_id in zip(rows, ids, strict=True):
                observer.pushed(row.kind, row_id)

    def _claimed(self, rows: Sequence[Claimed], now_us: int, began: float) -> None:
        seconds = time.monotonic() - began
        for observer in self._observers:
            observer.claimed(rows, now_us, seconds)

    def _serving_loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop `serve` runs on in this process, if it runs here (not in a parent we forked
        from)."""
        if self._loop is None or self._serve_pid != os.getpid() or self._loop.is_closed():
            return None
        return self._loop

    def wake(self) -> None:
        """Wake an idle worker of this process now, instead of at its next poll.

        Safe to call from any thread, and a no-op when `serve` is not running.
        """
        self._wake_at(None)

    def _wake_at(self, run_at: int | None) -> None:
        """Wake serve's claim loop for a row due at `run_at` (µs, this queue's clock; None for
        now): at once when the row is due, else when it falls due, rather than at the next
        poll. Safe to call from any thread; a no-op when serve is not running here.

        A row due later comes from a push with a delay, a retry's wait, a schedule's next tick,
        or another process's push (its NOTIFY carries the row's due time): that process's
        clock may run a few milliseconds ahead of this one, and a row due "now" there is then
        found here at that time, not a poll later.
        """
        loop = self._loop
        if loop is None or self._serve_pid != os.getpid():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._note_due(run_at)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
            loop.call_soon_threadsafe(self._note_due, run_at)

    def _note_due(self, run_at: int | None) -> None:
        wakeup = self._wakeup
        if wakeup is None:
            return
        if run_at is None or run_at <= self._clock():
            wakeup.set()
            return
        due = self._due
        if len(due) >= _DUE_KNOWN_MOST:
            # Times already past wake nobody (the claim loop claims what is due whenever a
            # worker is free); past the cap, the latest go, and the poll finds their rows.
            now = self._clock()
            # (nsmallest's list is sorted, so it is a heap already)
            due[:] = heapq.nsmallest(_DUE_KNOWN_MOST // 2, (at for at in due if at > now))
        earliest = not due or run_at < due[0]
        heapq.heappush(due, run_at)
        if earliest:
            wakeup.set()  # the claim loop sleeps until this earlier time instead

    def _sleep_s(self, poll_s: float, claimed_at: int) -> float:
        """How long the claim loop sleeps when nothing more is due: `poll_s`, or less when a
        row this process knows of falls due sooner. Due times up to `claimed_at` (µs, the
        reading the last claim used) were covered by that claim."""
        due = self._due
        while due and due[0] <= claimed_at:
            heapq.heappop(due)
        if not due:
            return poll_s
        return min(poll_s, max(0.0, (due[0] - self._clock()) / 1_000_000))

    # ------------------------------------------------------------------------- reading rows

    async def cancel(self, row_id: int) -> bool:
        """Take back a queued row (including one waiting for a retry) before it runs.

        One statement: a worker claiming in the same instant either got the row or did not.
        The unique key goes with the row.

        Returns:
            True if the row was queued and is now gone; False once a worker holds it (the run
            finishes), or if there is no such row.
        """
        if not _is_row_id(row_id):
            return False
        gone = await self.store.cancel(row_id)
        if gone and self.space is not None:
            await self.space.delete(_status_key(row_id))
        return gone

    async def stats(self) -> Stats:
        """How many rows in the table are `queued`, `running` and `dead`."""
        return await self.store.stats()

    async def dead_ones(self, limit: int = 1_000) -> list[Dead]:
        """The rows that failed for the last time, newest first, at most `limit`.

        Each keeps its error's class name; its payload is the stored JSON as plain values.
        """
        rows = await self.store.dead_ones(limit)
        return [
            Dead(
                id=row.id,
                kind=row.kind,
                error=row.error,
                attempts=row.attempts,
                payload=_plain(row.payload),
                died_at=row.died_at,
            )
            for row in rows
        ]

    async def retry_dead(self, row_id: int) -> bool:
        """Queue a dead row again, due now, from its first attempt with the full retry budget.

        Returns:
            True if the row was dead; False if there is no dead row with that id.
        """
        if not _is_row_id(row_id):
            return False
        again = await self.store.retry_dead(row_id, self._clock())
        if again:
            await self._put_status(row_id, State.QUEUED, 0)
            self.wake()
        return again

    async def status(self, row_id: int) -> Status | None:
        """What the status Space remembers of the row, or None once it has forgotten it (or
        when the queue has no status Space). Rows pushed with `push_in` appear once claimed."""
        if self.space is None or not _is_row_id(row_id):
            return None
        data = await self.space.get(_status_key(row_id))
        return None if data is None else _STATUS_DECODER.decode(data)

    async def progress(self, row_id: int, n: int) -> None:
        """Record how far the run of `row_id` has got (the kind decides what `n` means).

        It goes into the status Space beside the state and touches the table not at all; it
        starts over with every attempt and is kept on done. A no-op without a status Space, and
        for a row that is not running in this process (progress is the run's own figure).

        Raises:
            Refusal: `n` is not an int.
        """
        if isinstance(n, bool) or not isinstance(n, int):
            raise Refusal(f"progress(row, n={n!r}): n is an int the kind gives a meaning to")
        if self.space is None or row_id not in self._busy:
            return
        self._progress[row_id] = n
        current = await self.status(row_id)
        state, attempts = (
            (State.RUNNING, 0) if current is None else (current.state, current.attempts)
        )
        await self._put_status(row_id, state, attempts, n)

    async def _put_status(
        self, row_id: int, state: State, attempts: int, progress: int | None = None
    ) -> None:
        """Record a row's state in the status Space. The Space is a side record: a write that
        fails (Redis down, say) is logged and fails neither the push that committed the row nor
        its run."""
        if self.space is None:
            return
        status = Status(state, attempts, progress)
        try:
            await self.space.put(_status_key(row_id), _STATUS.encode(status))
        except Exception as error:
            log.warning(
                "row %d: its status (%s) could not be recorded in %r: %s",
                row_id, state.value, self.space, error, extra={"row": row_id},
            )  # fmt: skip

    async def ready(self) -> bool:
        """False when the store cannot be reached or has no usable table (the store says so), or
        when `serve` was started and its worker loop is no longer alive; True otherwise (seed:
        `nilo_ready`)."""
        try:
            await self.store.check()
        except Exception:
            return False
        task = self._serve_task
        return task is None or not task.done()

    # ---------------------------------------------------------------------------- schedules

    async def seed(self) -> None:
        """Queue every schedule's next tick, as `serve` does at start (seed: `seed`)."""
        await self.seed_at(self._clock())

    async def seed_at(self, now_us: int) -> None:
        """Queue every schedule's first tick after `now_us` (µs since the epoch), for a test.

        Each tick row carries the unique key "schedule", so seeding from any number of
        processes at once leaves one row per scheduled kind; a kind already seeded is left as
        it is.
        """
        rows = [
            NewRow(
                kind.name, self._tick_payloads[kind.name], kind.schedule.next(now_us), SCHEDULE_KEY
            )
            for kind in self._kinds.values()
            if kind.schedule is not None
        ]
        if rows:
            with self._pushing(rows[0].kind):
                ids = await self.store.push(rows)
                self._pushed(rows, ids)
            for row in rows:
                self._wake_at(row.run_at)

    # ------------------------------------------------------------------------------ running

    async def drain(self) -> int:
        """Run everything due now, here, one row at a time; the clock is read once.

        Returns:
            How many runs were called (a row killed without running is not counted).
        """
        return await self.drain_at(self._clock())

    async def drain_at(self, now_us: int) -> int:
        """Run everything that would be due if it were `now_us` (microseconds since the epoch).

        Every read of the clock inside a tick (whether a row is due, when a failed run is tried
        again) reads `now_us`, so a test walks tomorrow, a backoff or a lease with a call rather
        than a sleep. Rows pushed by the runs are run too when due at `now_us`.

        Returns:
            How many runs were called.
        """
        count = 0
        while await self.run_one_at(now_us):
            count += 1
        return count

    async def run_one(self) -> bool:
        """Run one row that is due now; False when none is."""
        return await self.run_one_at(self._clock())

    async def run_one_at(self, now_us: int) -> bool:
        """Run one row that would be due at `now_us`; False when none is.

        A row whose payload no longer fits its class is killed as `BadPayload` without running
        and the next due row is taken instead.
        """
        if isinstance(now_us, bool) or not isinstance(now_us, int):
            raise Refusal(f"drain_at({now_us!r}): microseconds since the epoch, as an int")
        if not _INT64_MIN <= now_us <= _INT64_MAX - self.lease_ms * 1_000:
            raise Refusal(f"drain_at({now_us}): a moment no store can hold; pass a nearer one")
        while True:
            began = time.monotonic()
            rows = await self.store.claim(self._names, now_us, now_us + self.lease_ms * 1_000, 1)
            if self._observers:
                self._claimed(rows, now_us, began)
            if not rows:
                return False
            if await self._execute(rows[0], lambda: now_us):
                return True

    def _tick_row(self, kind: Kind, due_us: int, now_us: int) -> NewRow:
        """The row of a schedule's next tick after the one due at `due_us`, carrying the key."""
        run_at = _policy.next_tick_at(kind, due_us, now_us)
        return NewRow(kind.name, self._tick_payloads[kind.name], run_at, SCHEDULE_KEY)

    async def _execute(
        self, row: Claimed, clock: Callable[[], int], free: Callable[[], None] = _nothing
    ) -> bool:
        """Run one claimed row to its end and write the end. True if `run` was called.

        `free()` is called once the row no longer needs its worker: an async run's as soon as
        its run has returned, before its end is written (serve's worker takes its next row
        meanwhile); otherwise when everything here is over.
        """
        kind = self._kinds[row.kind]
        then: NewRow | None = None
        if kind.schedule is not None and row.unique_key == SCHEDULE_KEY:
            now = clock()
            if _policy.tick_is_missed(kind, row.run_at, now) and kind.missed is Missed.DROP:
                log.info(
                    "%s row %d: tick due at %d is later than its successor; dropped",
                    kind.name, row.id, row.run_at, extra={"kind": kind.name, "row": row.id},
                )  # fmt: skip
                next_tick = self._tick_row(kind, row.run_at, now)
                await self._end(kind, row, Done(row.id, row.attempts, next_tick), dropped=True)
                return False
            if kind.overlap is Overlap.QUEUE:
                # The next tick may start while this one runs: hand the key on now.
                next_tick = self._tick_row(kind, row.run_at, now)
                if await self.store.hand_on(row.id, row.attempts, next_tick):
                    self._wake_at(next_tick.run_at)
            else:
                then = self._tick_row(kind, row.run_at, now)  # recomputed when the run ends
        try:
            value = kind.codec.decode(row.payload)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            log.warning(
                "%s row %d is dead: its payload no longer fits %s (%s)",
                kind.name, row.id, kind.cls.__name__, error,
                extra={"kind": kind.name, "row": row.id, "error": "BadPayload"},
            )  # fmt: skip
            end = Died(row.id, row.attempts, clock(), BadPayload.__name__, str(error), then)
            await self._end(kind, row, end)
            return False
        # Two executions of one row never overlap in this process: while a timed-out sync run's
        # thread is still going, a new claim of its row is given back, due a second later.
        previous = self._busy.get(row.id)
        if previous is not None and not previous.done:
            log.info(
                "%s row %d: an earlier run's thread is still going here; the row is queued "
                "again for a second from now",
                kind.name, row.id, extra={"kind": kind.name, "row": row.id},
            )  # fmt: skip
            again = Released(row.id, row.attempts, clock() + _BUSY_AGAIN_US)
            await self._write_end(kind, row, again)
            return False
        execution = Execution(lambda: self._forget(row.id, execution))
        self._busy[row.id] = execution
        try:
            return await self._run(kind, row, value, clock, execution, then is not None, free)
        finally:
            if kind.is_async or not execution.thread_started:
                execution.end()

    def _forget(self, row_id: int, execution: Execution) -> None:
        if self._busy.get(row_id) is execution:
            del self._busy[row_id]

    async def _run(
        self,
        kind: Kind,
        row: Claimed,
        value: object,
        clock: Callable[[], int],
        execution: Execution,
        hand_on_at_end: bool,
        free: Callable[[], None],
    ) -> bool:
        started = clock()
        tick = Tick(row.id, row.attempts, row.run_at, _policy.is_last(kind, row.attempts))
        self._progress.pop(row.id, None)
        kwargs: dict[str, Any] = {}
        for param in kind.params:
            if param.source == "tick":
                kwargs[param.name] = tick
            elif param.source == "run":
                bound = logging.LoggerAdapter(log, {"kind": kind.name, "row": row.id})
                kwargs[param.name] = Run(now_us=started, tick=tick, log=bound)
            elif param.source == "jobs":
                kwargs[param.name] = self
            else:
                kwargs[param.name] = getattr(self.deps, param.attr)
        timeout_s = (kind.timeout_ms or self.timeout_ms) / 1_000
        error: BaseException | None = None
        watch = (
            around([observer.running(kind.name, tick) for observer in self._observers])
            if self._observers
            else _NO_OBSERVER
        )
        began = time.monotonic()
        try:
            # Inside the try: a stop while the status is written gives the row back too.
            await self._put_status(row.id, State.RUNNING, row.attempts)
            with watch:
                if kind.is_async:
                    await call_async(kind, value, kwargs, timeout_s)
                else:
                    await call_in_thread(kind, value, kwargs, timeout_s, execution)
        except asyncio.CancelledError as cancelled:
            task = asyncio.current_task()
            if task is None or not task.cancelling():
                error = cancelled  # raised by the run itself: a failure like any other
            elif kind.is_async or not execution.thread_started or execution.done:
                # The worker is shutting down past its grace: give the row back unrun.
                released = Released(row.id, row.attempts, clock())
                await asyncio.shield(self._end(kind, row, released, time.monotonic() - began))
                raise
            else:
                # A thread cannot be stopped: the row stays running under its lease, so that
                # nobody starts it again while the thread may still be at it.
                raise
        except KeyboardInterrupt:
            if kind.is_async:
                raise  # a Ctrl-C of this process, not the run's doing
            error = KeyboardInterrupt("the run raised KeyboardInterrupt")
        except BaseException as failure:
            error = failure  # SystemExit and the like from a run end the attempt, not the worker
        seconds = time.monotonic() - began
        self._run_s = seconds if self._run_s is None else 0.8 * self._run_s + 0.2 * seconds
        ended = clock()
        # Overlap.SKIP: the next tick is computed from the clock when the run ends.
        then = self._tick_row(kind, row.run_at, ended) if hand_on_at_end else None
        end = _policy.decide(kind, row, error, ended, then)
        if kind.is_async:
            free()
        # Not shielded: a cancel here (a stop past its grace) leaves the end with serve's
        # batcher, which writes it whatever happens to this task; only this process's
        # bookkeeping of it (observers, status) is skipped.
        try:
            await self._end(kind, row, end, seconds)
        finally:
            task = asyncio.current_task()
            if not kind.is_async and not (task is not None and task.cancelling()):
                # A timed-out thread still running keeps its worker slot until it returns,
                # even when recording its end failed.
                await execution.wait()
        return True

    async def _write_end(
        self,
        kind: Kind,
        row: Claimed,
        end: End,
        late: Callable[[bool], None] | None = None,
    ) -> bool | None:
        """`store.finish([end])`, tried again while the store is unreachable, for as long as the
        row's lease lasts: past it another worker may take the row, and this end no longer
        matters. None when it could not be written (the row is then taken again after its
        lease: at least once).

        Under serve the end goes to its batcher, which writes it even if this task is cancelled
        meanwhile (a stop past the grace); `late` is then called with its answer.
        """
        deadline = time.monotonic() + self.lease_ms / 1_000
        pause = 0.05
        while True:
            try:
                batcher = self._batcher
                if batcher is None:
                    (applied,) = await self.store.finish([end])
                else:
                    applied = await batcher.submit(end, late)
            except StoreUnavailable as error:
                if time.monotonic() + pause > deadline:
                    log.error(
                        "%s row %d: its end could not be written (%s); the row runs again "
                        "once its lease has passed",
                        kind.name, row.id, error, extra={"kind": kind.name, "row": row.id},
                    )  # fmt: skip
                    return None
                log.warning(
                    "%s row %d: writing its end failed (%s); trying again in %.2f s",
                    kind.name, row.id, error, pause, extra={"kind": kind.name, "row": row.id},
                )  # fmt: skip
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
            else:
                return applied

    async def _end(
        self, kind: Kind, row: Claimed, end: End, seconds: float = 0.0, *, dropped: bool = False
    ) -> None:
        """Write `end`, then tell the observers, the log and the status Space how it went."""
        late = functools.partial(self._recorded_late, kind, row, end, seconds, dropped)
        applied = await self._write_end(kind, row, end, late)
        await self._record_end(kind, row, end, seconds, dropped, applied)

    def _recorded_late(
        self,
        kind: Kind,
        row: Claimed,
        end: End,
        seconds: float,
        dropped: bool,
        applied: bool,
    ) -> None:
        """An end written after its row's task was cancelled: record it in a task of its own
        (which serve's stop waits for)."""
        self._in_background(self._record_end(kind, row, end, seconds, dropped, applied))

    async def _record_end(
        self,
        kind: Kind,
        row: Claimed,
        end: End,
        seconds: float,
        dropped: bool,
        applied: bool | None,
    ) -> None:
        fields = {"kind": kind.name, "row": row.id, "attempt": row.attempts}
        if applied is None:
            return
        outcome: Outcome = "lost" if not applied else "dropped" if dropped else _outcome(end)
        for observer in self._observers:
            observer.ended(kind.name, outcome, _error_of(end), seconds)
        if not applied:
            log.warning(
                "%s row %d: the lease ran out and another worker took the row; this attempt's "
                "end was not written",
                kind.name, row.id, extra={**fields, "error": LeaseLost.__name__},
            )  # fmt: skip
            return
        if isinstance(end, Retrying | Released):
            self._wake_at(end.run_at)  # a retry's wait, or a row given back
        if end.then is not None:
            self._wake_at(end.then.run_at)  # a schedule's next tick
        progress = self._progress.pop(row.id, None)
        if isinstance(end, Done):
            await self._put_status(row.id, State.DONE, row.attempts, progress)
        elif isinstance(end, Retrying):
            wait_ms = kind.retry.wait_ms(row.attempts)
            log.warning(
                "%s row %d failed with %s on attempt %d; retrying in %.1f s",
                kind.name, row.id, end.error, row.attempts, wait_ms / 1_000,
                extra={**fields, "error": end.error, "wait_ms": wait_ms},
            )  # fmt: skip
            await self._put_status(row.id, State.QUEUED, row.attempts)
        elif isinstance(end, Died):
            log.warning(
                "%s row %d failed with %s on attempt %d and is dead",
                kind.name, row.id, end.error, row.attempts,
                extra={**fields, "error": end.error},
            )  # fmt: skip
            await self._put_status(row.id, State.DEAD, row.attempts, progress)
        else:
            await self._put_status(row.id, State.QUEUED, row.attempts - 1)

    # -------------------------------------------------------------------------------- serve

    async def serve(self, *, grace_ms: int = 30_000) -> None:
        """Run `workers` rows at once until cancelled: the worker loop (seed: `Jobs.serve`).

        It claims as many rows as it has free workers in one call, sleeps `poll_ms` when there
        is nothing due, and wakes at once on a push from this process. A claim that cannot
        reach the store is logged as an error and asked again after `poll_ms`.

        When cancelled it stops claiming, lets running rows finish for up to `grace_ms`
        milliseconds, then cancels them and gives their rows back as queued, unrun; then the
        CancelledError propagates.

        Raises:
            StoreUnavailable: at start, the table is missing or not nilo-job's.
            Refusal: serve is already running on this queue.
        """
        await self._serve(grace_ms, None)

    async def _serve(self, grace_ms: int, ready: asyncio.Event | None) -> None:
        """`serve`; `ready` is set once pushes from this loop reach it (its wake-up exists)."""
        if self._serve_task is not None and not self._serve_task.done():
            raise Refusal("this job.Jobs is already serving: call serve() once per queue")
        await self.store.open()
        await self.store.check()
        await self._follow_store_clock()
        self._loop = asyncio.get_running_loop()
        self._serve_pid = os.getpid()
        self._wakeup = asyncio.Event()
        self._due = []
        if ready is not None:
            ready.set()
        try:
            await self.seed()  # its ticks' due times go to self._due
        except BaseException:
            self._loop = self._wakeup = None
            raise
        self._serve_task = asyncio.current_task()
        feed = self._feed = _Feed(self._wakeup)
        self._batcher = Grouped(self._finish_ends, detached=True)
        workers = [asyncio.create_task(self._worker(feed)) for _ in range(self.workers)]
        watching = asyncio.create_task(self.store.watch(self._wake_at))
        log.info("serving %s with %d workers", ", ".join(self._names), self.workers)
        try:
            await self._claim_loop(feed)
        finally:
            watching.cancel()
            try:
                await self._stop(feed, workers, grace_ms)
            finally:
                self._batcher = self._feed = None
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watching
                self._loop = self._wakeup = None

    async def _follow_store_clock(self) -> None:
        """Read the time from the store's clock when it has one of its own (PostgreSQL), so
        that workers on hosts whose clocks drift claim, lease and retry by one clock.

        The offset to this host's clock is measured here (at serve's start, then every minute)
        rather than asked for at each claim, so it costs one query a minute.
        """
        before = now_us()
        theirs = await self.store.now_us()
        after = now_us()
        if theirs is None:
            return
        offset = theirs - (before + after) // 2
        self._clock = lambda: now_us() + offset
        self._clock_read_at = after

    async def _claim_loop(self, feed: _Feed) -> None:
        """Claim for the workers waiting on `feed`, hand the rows over, repeat.

        While runs are fast it claims ahead (`_ahead`), and claims the next batch once half of
        what waits is taken, so that workers seldom wait for a claim's round trip. With nothing
        due it sleeps `poll_ms`, or until a push (`wake`).
        """
        assert self._wakeup is not None
        wakeup = self._wakeup
        poll_s = self.poll_ms / 1_000
        while True:
            wakeup.clear()
            ahead = self._ahead()
            waiting = len(feed.rows)
            feed.low = ahead // 2
            idle = len(feed.idle) - feed.promised  # a push may be claiming for the others
            limit = idle + ahead - waiting
            if limit <= 0 or (idle <= 0 and waiting > feed.low):
                # Until a worker goes idle or takes rows (or, to be safe, the poll).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll_s):
                        await wakeup.wait()
                continue
            if now_us() - self._clock_read_at > _CLOCK_EVERY_US:
                with contextlib.suppress(Exception):
                    await self._follow_store_clock()
            now = self._clock()
            try:
                rows = await self._claim_shielded(now, limit)
            except Exception as error:
                log.error(
                    "claim failed with %s: %s; asking again in %.1f s",
                    type(error).__name__, error, poll_s,
                    extra={"error": type(error).__name__},
                )  # fmt: skip
                await asyncio.sleep(poll_s)
                continue
            feed.put(rows, now)
            if len(rows) < limit:
                # Nothing more is due now: sleep until a push, a worker asks, a row this
                # process knows of falls due, or the poll. (asyncio.timeout, not wait_for: on
                # 3.11 wait_for swallows a cancel that arrives as the wait ends, and serve
                # would not stop.)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._sleep_s(poll_s, now)):
                        await wakeup.wait()

    async def _worker(self, feed: _Feed) -> None:
        """One of serve's `workers`: take a claimed row from `feed`, run it to its end, repeat,
        until the feed is closed."""
        while True:
            taken = await feed.get()
            if taken is None:
                return
            row, claimed_at = taken
            if not self._still_leased(row, claimed_at):
                with contextlib.suppress(Exception):
                    await self._write_end(self._kinds[row.kind], row, _released(row))
                continue
            freed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            # A task of its own, so that each run has its own context (contextvars); it goes
            # on writing the end after freeing its worker, which takes the next row.
            task = asyncio.create_task(self._execute_logged(row, functools.partial(_settle, freed)))
            feed.tasks.add(task)
            task.add_done_callback(feed.tasks.discard)
            task.add_done_callback(functools.partial(_settle, freed))
            await freed

    async def _execute_logged(self, row: Claimed, free: Callable[[], None]) -> None:
        try:
            await self._execute(row, self._clock, free)
        except Exception:
            # A status space or store failing outside what _execute handles: the row is left
            # to its lease (it runs again), and serve goes on.
            log.exception(
                "%s row %d: its run could not be recorded; it runs again after its lease",
                row.kind, row.id, extra={"kind": row.kind, "row": row.id},
            )  # fmt: skip

    def _ahead(self) -> int:
        """How many rows to claim beyond the free workers: as many as the workers would start
        within `_AHEAD_S` at the runs' recent pace, at most `_AHEAD_MAX` per worker, and none
        while runs are slow (a slow row waiting here is a row another process could run)."""
        pace = self._run_s
        if pace is None:
            return 0
        return min(self.workers * _AHEAD_MAX, int(self.workers * _AHEAD_S / max(pace, 1e-6)))

    def _still_leased(self, row: Claimed, claimed_at: int) -> bool:
        """Whether a row claimed ahead can still run under its lease: its wait plus its kind's
        timeout must fit in the lease, or another worker may take it while it runs."""
        kind = self._kinds[row.kind]
        timeout_us = (kind.timeout_ms or self.timeout_ms) * 1_000
        return self._clock() - claimed_at < self.lease_ms * 1_000 - timeout_us

    async def _claim_shielded(self, now: int, limit: int) -> list[Claimed]:
        """A claim that, when serve is cancelled mid-claim, gives the rows it took back.

        The store may finish the claim in its own thread after the cancel arrives; without this
        those rows would sit as running until their lease ran out.
        """
        claim = asyncio.ensure_future(
            self.store.claim(self._names, now, now + self.lease_ms * 1_000, limit)
        )
        began = time.monotonic()
        try:
            rows = await asyncio.shield(claim)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                rows = await claim
                if rows:
                    await self.store.finish([_released(row) for row in rows])
            raise
        if self._observers:
            self._claimed(rows, now, began)
        return rows

    async def _stop(self, feed: _Feed, workers: list[asyncio.Task[None]], grace_ms: int) -> None:
        """Stop: rows claimed ahead go back unrun; running rows may finish (and write their
        ends) for `grace_ms`, then are cancelled (their rows are released).

        A second cancel during the grace period ends it at once.
        """
        feed.close()
        await self._release(feed)
        if feed.tasks:
            log.info(
                "stopping: %d rows still running, waiting up to %d ms", len(feed.tasks), grace_ms
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_ms / 1_000
        interrupted = False
        try:
            # Workers leave once their row's run is over (a row handed over as the feed closed
            # included); then the rows' tasks finish writing their ends.
            await asyncio.wait(workers, timeout=grace_ms / 1_000)
            if feed.tasks:
                await asyncio.wait(set(feed.tasks), timeout=max(0.0, deadline - loop.time()))
        except asyncio.CancelledError:
            interrupted = True
        late = set(feed.tasks)
        if late:
            log.warning("cancelled %d runs past the grace period; their rows are queued again",
                        len(late))  # fmt: skip
        for task in (*late, *workers):
            task.cancel()
        await asyncio.wait({*late, *workers})
        await self._release(feed)  # a row a cancelled worker had just been handed
        if self._batcher is not None:
            with contextlib.suppress(Exception):
                await self._batcher.idle()  # it shields the write itself
        if self._background:  # the observers and status of ends written just now
            await asyncio.wait(set(self._background))
        if interrupted:
            raise asyncio.CancelledError

    async def _release(self, feed: _Feed) -> None:
        """Give back, queued and unrun, the rows waiting in `feed`."""
        ends = [_released(row) for row, _claimed_at in feed.take_all()]
        if ends:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.store.finish(ends))

    @contextlib.asynccontextmanager
    async def serving(self, *, grace_ms: int = 30_000) -> AsyncIterator[Jobs]:
        """`serve` in the background for the body of an `async with`, for an ASGI lifespan.

        Leaving the block cancels it and waits for its shutdown (`grace_ms` as for `serve`).
        """
        # A store that cannot be reached, or a missing table, is raised here rather than lost
        # in the background task.
        await self.store.open()
        await self.store.check()
        ready = asyncio.Event()
        task = asyncio.create_task(self._serve(grace_ms, ready))
        try:
            # Into the block once serve hears this loop's pushes: a row pushed for later at
            # once is then woken for when due, not found a poll later.
            started = asyncio.ensure_future(ready.wait())
            try:
                await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                started.cancel()
            if task.done():
                task.result()  # serve failed as it started: its error, here
            yield self
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # this block itself was cancelled (a timeout around it, say)


class _Feed:
    """What serve's claim loop hands its workers: rows claimed and not yet started (each with
    the clock reading of its claim), and the workers waiting for one.

    A row goes to a waiting worker directly, or waits in `rows` for the next worker that asks;
    a worker taking a row costs no future while rows wait. `want` (serve's wake-up event) is
    set when a worker finds nothing, or leaves `low` rows or fewer behind it.
    """

    def __init__(self, want: asyncio.Event) -> None:
        self.rows: collections.deque[tuple[Claimed, int]] = collections.deque()
        self.idle: collections.deque[asyncio.Future[tuple[Claimed, int] | None]] = (
            collections.deque()
        )
        self.want = want
        self.low = 0
        self.tasks: set[asyncio.Task[None]] = set()  # rows started and not yet ended
        self.promised = 0  # idle workers a push in flight is claiming a row for
        self.closed = False

    async def get(self) -> tuple[Claimed, int] | None:
        """The next row for a worker, waiting for one; None once the feed is closed."""
        if self.closed:
            return None
        if self.rows:
            taken = self.rows.popleft()
            if len(self.rows) <= self.low:
                self.want.set()
            return taken
        waiter: asyncio.Future[tuple[Claimed, int] | None] = (
            asyncio.get_running_loop().create_future()
        )
        self.idle.append(waiter)
        self.want.set()
        try:
            return await waiter
        except asyncio.CancelledError:
            handed = waiter.result() if waiter.done() and not waiter.cancelled() else None
            if handed is not None:
                self.rows.appendleft(handed)  # handed over as the worker was cancelled
            raise
        finally:
            with contextlib.suppress(ValueError):
                self.idle.remove(waiter)

    def put(self, rows: Sequence[Claimed], claimed_at: int) -> None:
        """Hand `rows` to waiting workers, first come first served; the rest wait here."""
        for row in rows:
            while self.idle:
                waiter = self.idle.popleft()
                if not waiter.done():
                    waiter.set_result((row, claimed_at))
                    break
            else:
                self.rows.append((row, claimed_at))

    def close(self) -> None:
        """No more rows: waiting workers get None, and so does every later `get`."""
        self.closed = True
        while self.idle:
            waiter = self.idle.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def take_all(self) -> list[tuple[Claimed, int]]:
        taken = list(self.rows)
        self.rows.clear()
        return taken


_STORE_METHODS = tuple(
    name for name in vars(Store) if not name.startswith("_") and callable(getattr(Store, name))
)


def _released(row: Claimed) -> Released:
    return Released(row.id, row.attempts, row.run_at)


def _outcome(end: End) -> Outcome:
    if isinstance(end, Done):
        return "done"
    if isinstance(end, Retrying):
        return "retrying"
    if isinstance(end, Died):
        return "dead"
    return "released"


def _error_of(end: End) -> str | None:
    return end.error if isinstance(end, Retrying | Died) else None


def _is_row_id(row_id: object) -> bool:
    """Whether `row_id` could name a row; a non-int is refused with a sentence.

    Raises:
        Refusal: `row_id` is not an int.
    """
    if isinstance(row_id, bool) or not isinstance(row_id, int):
        raise Refusal(f"a row id is the int that push returned, not {row_id!r}")
    return 0 < row_id <= _INT64_MAX


def _status_key(row_id: int) -> str:
    return f"nilo_job:status:{row_id}"


def _plain(payload: bytes) -> Any:
    try:
        return msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return payload.decode(errors="replace")
