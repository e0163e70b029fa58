"""The store contract: what the queue asks of a place that keeps rows, and nothing more.

A store only stores. Every decision (is this a retry or dead, when is the next attempt, what is the
lease) is made by the queue above it and handed down as a value; a store applies it in one
statement (or one transaction) and answers. The async calls below that touch rows are the
whole of it; `open`/`close`/`ping` are its lifecycle. A store of your own is this Protocol,
every method of it.

Times are microseconds since the epoch, always handed in by the caller: a store never reads the
clock. Payloads are the JSON bytes the queue encoded.

A store may also have `max_payload`, an int: the largest payload (bytes of JSON) one row may
carry. The queue refuses a larger one at push (`PayloadTooLarge`) before the store is called, so
a store never checks it; a store without it takes payloads of any size. The shipped stores have
it: `job.Memory` 4 KiB by default, `job.Table` `MAX_PAYLOAD`.

A list (`find`, `rows`, `dead_ones`) needs only the start of each payload: a store may answer
just the first `LISTED_CHARS + 1` characters of it (`listed`), and the queue shows at most
`LISTED_CHARS` of them, saying that a longer payload was cut. `row` reads the whole payload.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .._base.bounds import INT64_MAX, INT64_MIN
from .._base.values import ATTEMPTS_KEPT, Attempt, Stats, Where

__all__ = [
    "ATTEMPTS_KEPT",
    "DEATHS_KEPT_US",
    "INT64_MAX",
    "INT64_MIN",
    "LISTED_CHARS",
    "MAX_PAYLOAD",
    "ROW_STATES",
    "Attempt",
    "Claimed",
    "DeadRow",
    "Died",
    "Done",
    "End",
    "HeldBack",
    "NewRow",
    "Released",
    "Retrying",
    "RowView",
    "Snoozed",
    "Store",
    "Where",
    "WorkerEntry",
    "check_state",
    "limited",
    "listed",
    "outcome_of",
]

DEATHS_KEPT_US = 86_400_000_000
"""How long a store counts deaths by the minute (`Store.ended`): a day, in µs."""

MAX_PAYLOAD = 1_048_576
"""The largest payload a `job.Table` row carries unless its `max_payload` says otherwise: 1 MiB
of JSON."""

LISTED_CHARS = 4_096
"""How many characters of a payload's JSON a list (`find`, `rows`, `dead_ones`) shows; a longer
payload is cut there, and read whole only by `row`."""


def listed(payload: bytes) -> bytes:
    """The start of `payload` a list needs: its first `LISTED_CHARS + 1` characters (one more
    than a list shows, so that a cut payload can be told from one that is exactly as long), or
    all of it when shorter. Bytes that are not UTF-8 are kept as they are."""
    if len(payload) <= LISTED_CHARS:
        return payload  # no longer in characters than in bytes
    head = payload[: 4 * (LISTED_CHARS + 1)]  # a character is at most 4 bytes of UTF-8
    return head.decode("utf-8", "surrogateescape")[: LISTED_CHARS + 1].encode(
        "utf-8", "surrogateescape"
    )


@dataclass(frozen=True, slots=True)
class NewRow:
    """A row to insert as `queued`: its kind, JSON payload, when it is due (µs) and its unique key.

    A row with a `unique_key` is inserted only when no queued or running row of the same kind holds
    that key; the store's unique index over ``(kind, unique_key)`` gives the verdict.

    A row with `lease_until` (µs) is inserted already claimed: `running`, its first attempt
    counted (`attempts` 1), leased until then, started at `pushed_at` by `worker`. The queue does
    this for a push that an idle worker of the pushing process will run at once, saving that
    worker's claim. `pushed_at` (µs) is when the push happened (None: not known).

    `trace` is the W3C trace context current at the push, as JSON (`{"traceparent": …}`, with
    `"tracestate"` when there is one), or None: the run's span continues that trace.
    """

    kind: str
    payload: bytes
    run_at: int
    unique_key: str | None = None
    lease_until: int | None = None
    pushed_at: int | None = None
    worker: str | None = None
    trace: str | None = None


@dataclass(frozen=True, slots=True)
class Claimed:
    """A row a claim took: `attempts` already counts this claim (1 the first time); `snoozes`
    is how many times its runs have snoozed so far (`Snoozed`); `trace` is the trace context
    its push recorded (`NewRow.trace`), or None.

    `retaken_from` is None for a row the claim found queued. For a row it took back from another
    claim whose lease had run out (state `running`, `lease_until` at or before the claim's now),
    it is the worker ("host:pid") that held that claim, or "" when the row does not say.

    `unreadable` says why, when the store could not read the row as nilo-job writes it (a
    payload stored as a BLOB, a column of the wrong type: a row some other program wrote). The
    queue then kills the row as `BadPayload` without running it, and every other row runs.
    """

    id: int
    kind: str
    payload: bytes
    attempts: int
    run_at: int
    unique_key: str | None
    unreadable: str | None = None
    snoozes: int = 0
    trace: str | None = None
    retaken_from: str | None = None


@dataclass(frozen=True, slots=True)
class Done:
    """The run of claim (`id`, `attempts`) finished: the row goes, and its unique key with it.

    `then` (every end has it) is a row inserted in the same transaction when the end applies:
    a schedule's next tick, handed on atomically with the end of the one before.

    With `finished_at` (µs) the row is kept as history (state `done`, its unique key released
    all the same) until `prune` deletes it, with `started_at` (µs, when the run began) and the
    JSON bytes of what the run returned (`result`, None when it returned nothing JSON carries).
    Without it the row is deleted.
    """

    id: int
    attempts: int
    then: NewRow | None = None
    finished_at: int | None = None
    started_at: int | None = None
    result: bytes | None = None
    ended_at: int | None = None
    lost_from: str | None = None


@dataclass(frozen=True, slots=True)
class Retrying:
    """The run of claim (`id`, `attempts`) failed and will be tried again at `run_at` (µs).

    The row goes back to `queued` and keeps its unique key unless `release_key` (a schedule's
    tick is retried as a row of its own, its key handed on in `then`); `error` is the
    exception's class name, `detail` its message and `traceback` its traceback, for operators.
    """

    id: int
    attempts: int
    run_at: int
    error: str
    detail: str
    release_key: bool = False
    then: NewRow | None = None
    traceback: str = ""
    ended_at: int | None = None
    lost_from: str | None = None


@dataclass(frozen=True, slots=True)
class Died:
    """The run of claim (`id`, `attempts`) failed for the last time at `died_at` (µs).

    The row stays as `dead` with its error's name, message (`detail`) and traceback; its unique
    key is set to NULL.
    """

    id: int
    attempts: int
    died_at: int
    error: str
    detail: str
    then: NewRow | None = None
    traceback: str = ""
    ended_at: int | None = None
    lost_from: str | None = None


@dataclass(frozen=True, slots=True)
class Released:
    """Claim (`id`, `attempts`) is given back unrun (a worker shutting down): `queued` again, due
    at `run_at` (µs), with the claim's attempt uncounted."""

    id: int
    attempts: int
    run_at: int
    then: NewRow | None = None
    ended_at: int | None = None
    lost_from: str | None = None


@dataclass(frozen=True, slots=True)
class Snoozed:
    """The run of claim (`id`, `attempts`) snoozed: `queued` again, due at `run_at` (µs), with
    the claim's attempt uncounted and the row's `snoozes` one higher.

    The row keeps its unique key unless `release_key` (a schedule's tick, whose key went on
    with `then`), and its last failure's error, message and traceback, if it has one.
    """

    id: int
    attempts: int
    run_at: int
    release_key: bool = False
    then: NewRow | None = None
    ended_at: int | None = None
    lost_from: str | None = None


End = Done | Retrying | Died | Released | Snoozed
"""Every end has `ended_at` (µs): when the attempt ended, and `lost_from`: for a row taken back
after its lease ran out, the worker that held it ("" when the row did not say), else None.

The store records, in the same transaction as the end: the attempt the other worker lost
(`lost_from`, outcome "lost", ended when this claim took the row back), the attempt this end
closes unless it is `Done` (outcome "retrying", "dead", "released" or "snoozed"; a done
attempt is read from the done row itself), keeping a row's newest `ATTEMPTS_KEPT`, and for
`Died` one death in its minute (`Store.ended`). Without `ended_at` (a row given back before it
started, a schedule's dropped tick) no attempt is recorded. A row deleted (its `Done` not kept
as history, a cancel, `delete_many`, `prune`) takes its attempts with it; its deaths stay
counted."""


def outcome_of(end: End) -> str:
    """The `Attempt.outcome` of the attempt an end closes: "done", "retrying", "dead",
    "released" or "snoozed"."""
    if isinstance(end, Done):
        return "done"
    if isinstance(end, Retrying):
        return "retrying"
    if isinstance(end, Died):
        return "dead"
    if isinstance(end, Released):
        return "released"
    return "snoozed"


@dataclass(frozen=True, slots=True)
class DeadRow:
    """A dead row as stored: the payload is still the JSON bytes; `detail` is the error's
    message and `traceback` its traceback ("" when the row has none)."""

    id: int
    kind: str
    error: str
    attempts: int
    payload: bytes
    died_at: int
    detail: str = ""
    traceback: str = ""


@dataclass(frozen=True, slots=True)
class RowView:
    """A row as an operator sees it (the dashboard, `nilo-job` commands): every column.

    Times are µs since the epoch: `pushed_at` (None for a row pushed by an older version),
    `run_at` (due), `started_at` (the last attempt's claim, or its run's start once done),
    `finished_at` (done rows), `died_at` (dead rows). `worker` is "host:pid" of the process
    that claimed the last attempt; `result` the JSON bytes a done row's run returned.
    """

    id: int
    kind: str
    state: str
    payload: bytes
    run_at: int
    attempts: int
    unique_key: str | None
    lease_until: int | None
    error: str | None
    died_at: int | None
    detail: str | None = None
    traceback: str | None = None
    unreadable: str | None = None
    """Why the row could not be read as nilo-job writes it (a column of the wrong type, a
    payload that is not text); None for a row that reads as it should."""
    pushed_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    worker: str | None = None
    result: bytes | None = None
    snoozes: int | None = None
    """How many times its runs snoozed; None for a done row (the history does not keep it)."""
    attempts_log: tuple[Attempt, ...] = ()
    """Its attempts, oldest first, the newest `ATTEMPTS_KEPT`: read by `row`, empty in a list."""

    def sort_key(self) -> tuple[int, int]:
        """(value, id) of this row in its state's order: what a keyset page continues after."""
        if self.state == "dead":
            return (self.died_at or 0, self.id)
        if self.state == "done":
            return (self.finished_at or 0, self.id)
        return (self.run_at, self.id)

    def with_attempts(self, recorded: Sequence[Attempt]) -> RowView:
        """This row with its attempts: those its ends recorded (oldest first), then, for a done
        row, the attempt that ended done, read from the row itself; the newest
        `ATTEMPTS_KEPT` of them."""
        log = list(recorded)
        if self.state == "done" and self.finished_at is not None:
            done = Attempt(self.attempts, "done", self.started_at, self.finished_at, self.worker)
            log.append(done)
        return dataclasses.replace(self, attempts_log=tuple(log[-ATTEMPTS_KEPT:]))


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """An index of the queue table that `Store.rebuild_swollen` rebuilt: its name, and its size
    before and after, in bytes."""

    index: str
    before_bytes: int
    after_bytes: int


@dataclass(frozen=True, slots=True)
class HeldBack:
    """What holds back the cleanup of the queue's tables, as `Store.held_back` sees it.

    On PostgreSQL, the oldest transaction of another session of the database that holds a
    snapshot (`backend_xmin`): while it lasts, no row deleted or updated since it began can be
    removed from `nilo_jobs` or its indexes. On MySQL and MariaDB, the oldest transaction of
    another session whose read view holds back InnoDB's purge. `pid` is its session's id on the
    server (PostgreSQL's backend process id, MySQL's connection id), `age_s` how long its
    transaction has lasted (s), `state` its state ("idle in transaction", "active", …), `query`
    the start of its last statement, `user` and `application` its user and application name
    (None where the store's own user may not see them), `end_it` the statement that ends it
    from another session (`SELECT pg_terminate_backend(…)`, `KILL …`).

    On SQLite, a reader whose open transaction keeps a checkpoint from completing: the WAL can
    neither be copied back nor restarted, and grows with every write. `pid`, `state`, `query`,
    `user` and `application` are None (SQLite cannot tell who), `age_s` is how long checkpoints
    have not completed, as far as this store has looked (`held_back` is called every few
    seconds by a serving process), and `wal_bytes` the WAL's size.
    """

    age_s: float
    pid: int | None = None
    state: str | None = None
    query: str | None = None
    user: str | None = None
    application: str | None = None
    wal_bytes: int | None = None
    end_it: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """A serving process as the registry (`nilo_jobs_workers`) keeps it.

    `id` is "host:pid:started_at", unique per run of serve; `version` is nilo-job's version in
    that process; `kinds` the kinds it serves; `workers` how many rows it runs at once;
    `beat_ms` how often it beats (milliseconds); `started_at` when its serve started and
    `beat_at` its last beat (µs since the epoch); `running` the ids of the rows it held then.
    """

    id: str
    host: str
    pid: int
    version: str
    kinds: tuple[str, ...]
    workers: int
    beat_ms: int
    started_at: int
    beat_at: int
    running: tuple[int, ...] = ()


ROW_STATES = ("queued", "running", "dead", "done")
"""The states a stored row can be in; `done` rows are kept only for the queue's retention."""

NEWEST_FIRST = frozenset({"dead", "done"})
"""The states listed newest first (by `died_at` or `finished_at`, then id, descending); queued
and running rows are listed by `run_at`, then id, ascending."""


def check_state(state: str) -> str:
    """`state`, if a stored row can be in it.

    Raises:
        Refusal: it cannot.
    """
    if state not in ROW_STATES:
        from .._base.errors import Refusal

        raise Refusal(f"state={state!r}: a row is 'queued', 'running', 'dead' or 'done'")
    return state


def limited(
    kinds: Sequence[str], limits: Mapping[str, int]
) -> tuple[list[str], list[tuple[str, int]]]:
    """`kinds` as a claim with `limits` takes them: those without a limit, in their order, and
    those with one, each with its limit, in the order of their names (the order in which
    claims take their kinds' locks, so that two claims never wait for each other)."""
    free = [kind for kind in kinds if kind not in limits]
    capped = sorted((kind, limits[kind]) for kind in set(kinds) if kind in limits)
    return free, capped


@runtime_checkable
class Store(Protocol):
    """What every store (Memory, SQLite, PostgreSQL) does. All methods are coroutines.

    The claim is the heart of it: one atomic step that turns due rows into running rows under a
    lease, so that two workers never both take a row while its lease holds.
    """

    async def open(self) -> None:
        """Connect, if the store needs to. Idempotent; every other method opens on first use."""

    async def close(self) -> None:
        """Release connections and threads. The store can be opened again."""

    async def ping(self) -> None:
        """Answer when the store can be reached.

        Raises:
            StoreUnavailable: it cannot.
        """

    async def now_us(self) -> int | None:
        """The database's own clock (µs since the epoch) when it is shared by several hosts, so
        that every worker claims by one clock; None when the host's clock is the only one."""

    async def watch(self, wake: Callable[[int | None], None]) -> None:
        """Call `wake(run_at)` whenever another process pushes a row, until cancelled: `run_at`
        is when the row is due (µs, by the pushing process's clock), or None when unknown
        (wake now). Return at once when the store has no such signal (the queue then relies on
        `poll_ms`)."""

    async def create_missing(self) -> None:
        """Create the `nilo_jobs` table and its indexes where they are missing."""

    async def check(self) -> None:
        """Answer when the table exists with the columns this version writes.

        Raises:
            StoreUnavailable: the table is missing or is not nilo-job's, or the user may not read
                it, with a sentence saying so.
        """

    async def push(self, rows: Sequence[NewRow]) -> list[int | None]:
        """Insert `rows` in one transaction; each answer is the new id, or None where a queued or
        running row of the same kind already holds the unique key.

        A store never checks a payload's size: the queue refused a payload over the store's
        `max_payload` before this call.

        Raises:
            QueueFull: (Memory) nothing of the call is written.
        """

    async def push_in(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        """`push` through the caller's own open transaction `tx`; the rows exist once it commits.

        A store that can write through a synchronous connection also has
        `push_in_now(tx, rows) -> list[int | None]`, the same in the caller's thread without an
        event loop, which `jobs.sync.push_in` calls; without it, `jobs.sync.push_in` is refused
        with a sentence.

        Raises:
            Refusal: this store cannot write through `tx` (the message lists what it accepts).
        """

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
        """Take up to `limit` rows of `kinds`, in `run_at` order: queued rows due at `now_us`, and
        running rows whose lease ran out by `now_us`. Each becomes `running` until
        `lease_until_us` with `attempts` one higher, started at `now_us` by `worker` ("host:pid"),
        and is answered with its `snoozes`, `trace` and, for a running row taken back, the
        worker that held it (`Claimed.retaken_from`). Rows of other kinds are never touched.

        With `due_from_us`, only queued rows due from that moment on (`run_at >= due_from_us`)
        are taken, and no running row: serve's claims read from where its last ones reached,
        so that a claim never reads the index entries of rows claimed long before, which a
        transaction holding an old snapshot keeps from cleanup. Not passed with `limits`.

        `limits` holds the kinds with a concurrency limit, each with its limit (a kind of it
        not among `kinds` is not claimed). The queue passes it only when it has such kinds.
        Those among `kinds` are claimed first, one kind at a time (`limited`): each with at
        most its limit less its rows running under a live lease (`lease_until` after
        `now_us`), counted and claimed atomically against every other claim of that kind, in
        every process, so that no more than its limit ever hold a live lease at once. The
        other kinds are then claimed as without `limits`, up to what is left of `limit`."""

    async def finish(self, ends: Sequence[End]) -> list[bool]:
        """Apply each end to its row, if the row is still `running` under that claim's `attempts`.

        Answers, per end, whether it applied: False means the lease was lost to another worker.
        """

    async def hand_on(self, row_id: int, attempts: int, then: NewRow) -> bool:
        """In one transaction: take the unique key off the running row (`row_id`, `attempts`)
        and insert `then`, which carries it. False (nothing written) when the row no longer holds
        that claim or no key."""

    async def cancel(self, row_id: int) -> bool:
        """Delete the row if it is `queued` (including a retry's wait); True if it was."""

    async def stats(self) -> Stats:
        """Count the rows by state (`done` too: the rows kept as history)."""

    async def dead_ones(self, limit: int) -> list[DeadRow]:
        """The dead rows, newest first (by `died_at`, then id), at most `limit`; each payload
        may be only its start (`listed`)."""

    async def rows(self, state: str, limit: int) -> list[RowView]:
        """At most `limit` rows in `state`, in its order (`NEWEST_FIRST`); each payload may be
        only its start (`listed`)."""

    async def counts(self) -> dict[tuple[str, str], int]:
        """How many rows there are of each (kind, state) that has any."""

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]:
        """The rows of `kinds` that hold the unique key `key` (at most one per kind, by the
        unique index), ordered by kind: for a schedule, its next tick."""

    async def retry_dead(self, row_id: int, now_us: int) -> bool:
        """Queue a dead row again, due at `now_us`, from attempt one with no error and no
        snoozes; True if it was dead."""

    # ------------------------------------------------------------------ the operator's calls

    async def row(self, row_id: int) -> RowView | None:
        """The row with id `row_id` in whichever state it is (a done row from the history), its
        whole payload and its attempts (`RowView.attempts_log`), or None when there is none."""

    async def find(self, where: Where, after: tuple[int, int] | None, limit: int) -> list[RowView]:
        """At most `limit` rows that match `where` (its `state` is set), in that state's order
        (`NEWEST_FIRST`), starting after the row whose `sort_key()` is `after` (None: from the
        first): a keyset page, as cheap deep in the table as at its start. Each payload may be
        only its start (`listed`): a page reads a bounded amount whatever the rows carry."""

    async def count(self, where: Where) -> int:
        """How many rows match `where` (its `state` is set)."""

    async def retry_many(self, ids: Sequence[int], now_us: int) -> list[int]:
        """`retry_dead` for each of `ids` in one transaction; the ids that were dead."""

    async def cancel_many(self, ids: Sequence[int]) -> list[int]:
        """`cancel` for each of `ids` in one transaction; the ids that were queued."""

    async def delete_many(self, ids: Sequence[int]) -> list[int]:
        """Delete the dead and done rows among `ids` in one transaction; the ids deleted (a
        queued or running row is never deleted here: cancel takes back a queued one)."""

    async def prune(self, before_us: int, limit: int) -> int:
        """Delete at most `limit` done rows finished before `before_us`, oldest first; how
        many went."""

    async def pause(self, kind: str, at_us: int) -> bool:
        """Record that `kind` is paused since `at_us`; False when it already was."""

    async def resume(self, kind: str) -> bool:
        """Forget that `kind` is paused; False when it was not."""

    async def paused(self) -> dict[str, int]:
        """The paused kinds, each with when it was paused (µs)."""

    async def ended(self, since_us: int) -> list[tuple[str, str, int, int]]:
        """Rows that ended since `since_us`, counted by (kind, "done" or "dead", minute): each
        answer is (kind, state, minute, count), the minute as µs since the epoch at its start
        (a multiple of 60,000,000). Done rows count only while they are kept. Deaths are
        events, counted as each `Died` end is written, also after the row was retried or
        deleted, for `DEATHS_KEPT_US` (a day: the longest window `flow()` reads)."""

    async def durations(self, kind: str, since_us: int, limit: int) -> list[int]:
        """How long (µs) the runs of the last `limit` done rows of `kind` that finished since
        `since_us` took, newest first."""

    async def oldest_due(self, now_us: int) -> dict[str, int]:
        """For each kind with queued rows due by `now_us`, the `run_at` of its oldest one."""

    # ---------------------------------------------------------------- the worker registry

    async def register(self, entry: WorkerEntry) -> None:
        """Record `entry`, a serving process, in the registry (an entry of the same id is
        written over: its beat and running rows)."""

    async def beat(
        self,
        entry_id: str,
        now_us: int,
        running: Sequence[int],
        renew_until_us: int | None,
        worker: str,
        forget_before_us: int,
    ) -> bool:
        """A beat of entry `entry_id`: its `beat_at` becomes `now_us` and its `running` the
        ids given. With `renew_until_us`, the leases of those of `running` that are still
        `running` rows claimed by `worker` ("host:pid") are renewed to it (never shortened),
        in one statement whatever their number. Entries other than this one whose last beat is
        before `forget_before_us` are deleted. False when there was no entry `entry_id` (it was
        forgotten: the caller registers again)."""

    async def unregister(self, entry_id: str) -> None:
        """Delete entry `entry_id` (a clean stop); nothing when there is none."""

    async def workers(self) -> list[WorkerEntry]:
        """Every entry of the registry, by `started_at` then id. Memory knows this process's
        alone."""

    async def index_sizes(self) -> dict[str, int]:
        """Each index of the queue table that `rebuild_swollen` may rebuild, with its size in
        bytes now; empty on the stores that rebuild nothing.

        Raises:
            StoreUnavailable: the database cannot be reached."""

    async def rebuild_swollen(self, before: Mapping[str, int] | None = None) -> list[Rebuilt]:
        """Rebuild the indexes of the queue table that have swollen far past what their live
        entries need (a transaction that held an old snapshot, a backlog run down: an index's
        file never shrinks by itself), without blocking pushes, claims or ends; the indexes
        rebuilt. An index that `before` (sizes in bytes, as `index_sizes` gave them before a
        hold began) names is swollen only beyond twice its size there: under heavy traffic an
        index's working size is larger than its live entries need, and an index another
        process has already rebuilt is not rebuilt again. PostgreSQL: `REINDEX INDEX
        CONCURRENTLY`, by one process at a time, not while something holds back the cleanup,
        and not behind a pooler without a direct URL. The other stores: nothing (SQLite and
        InnoDB reuse the room in their files)."""

    async def held_back(self) -> HeldBack | None:
        """What holds back the cleanup of the queue's tables now (see `HeldBack`), however
        short; None when nothing does (Memory: never). On SQLite this runs a passive
        checkpoint, as SQLite's own automatic checkpoints do."""
