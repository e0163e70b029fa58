"""`Jobs`: the queue, the one public class, a façade over the parts that do the work.

    push, push_many, push_in    producer.Producer           options, payload, the row written
    (a claimed row)             _worker.runner.Runner       decode, run, decide, write the end
    serve, serving              _worker.server.Server       the claim loop, the workers, stopping
    drain, run_one              _worker.drain.Drain         due rows here and now, on a test's clock
    seed                        _worker.ticks.Ticks         a schedule's next tick, as a row
    wake                        _worker.wakeups.Wakeups     serve hears of work before its poll
    row, find, *_many, pause,   operator.Operator           the operator's calls over many rows
      flow
    (history)                   _worker.pruner.Pruner       done rows kept, then pruned

`Jobs` reads the kinds, checks the settings, builds those parts and hands each the same clock
(`_base.clock.Clock`); the operator calls (cancel, stats, status, dead_ones, retry_dead) are a store
call each. Nothing below this module calls back into it: a run that asks for `Jobs` is handed
this object as a value. Most of this module is the docstrings a user reads (units, what is
raised); every method is a few lines handing its arguments to a part.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import overload

from .._base.bounds import FIGURE, LAST_US, MS, POSITIVE_MS, WORKERS, Span, moment, whole
from .._base.bounds import row_id as check_row_id
from .._base.errors import Refusal, refuse_within
from .._base.spaces import Space
from .._base.values import Dead, Flow, Found, Row, Stats, Status, Where
from .._kinds.kind import Kind, check_unique_names, read_deps, read_kind
from .._watch.observers import Observer
from .._worker.drain import Drain
from .._worker.parts import Parts
from .._worker.pruner import Pruner
from .._worker.runner import Runner
from .._worker.server import Server
from ..store._target import shown
from ..store.contract import Store
from .operator import Operator
from .producer import Producer
from .sync import SyncJobs

SEED_MOST_US = LAST_US
"""The latest moment `seed_at` takes (µs): the year 9000, as every call that takes a moment."""

RETENTION_MS = 3_600_000
"""How long a done row is kept by default, in milliseconds: an hour."""

HEARTBEAT_MS = Span(100, 3_600_000, "whole milliseconds", "a tenth of a second to an hour")
"""`job.Jobs(heartbeat_ms=...)`: how often a serving process beats and renews its leases."""


_STORE_METHODS = tuple(
    name for name in vars(Store) if not name.startswith("_") and callable(getattr(Store, name))
)


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
        retention_ms: how long a done row is kept, with what its run returned, in milliseconds
            (default 3,600,000: an hour, what the flow charts show); then a serving process
            prunes it. 0 deletes a row as it finishes. Dead rows are kept until you retry or
            delete them.
        heartbeat_ms: leases kept by heartbeat, in milliseconds (from 100 to 3,600,000; default
            None). Every serving process beats at this interval and renews the leases of the
            rows it holds; a claim's lease is three beats, so the rows of a process that dies
            are taken again within three beats whatever the kinds' timeouts (a run still ends
            at its own `timeout_ms`). None: serve beats every 5,000 ms for the worker registry
            only, and the lease is the longest timeout across the kinds and the queue, plus one
            second.

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
        retention_ms: int = RETENTION_MS,
        heartbeat_ms: int | None = None,
    ) -> None:
        if isinstance(kinds, type) or not isinstance(kinds, Sequence) or not kinds:
            raise Refusal("job.Jobs(kinds=[...]) takes a non-empty list of job classes")
        # Each method asked for by name, not isinstance(store, Store): since Python 3.12 a
        # runtime-checkable Protocol looks only at the class, refusing a store that forwards its
        # methods through __getattr__.
        if lacks := [name for name in _STORE_METHODS if not callable(getattr(store, name, None))]:
            which = "has none" if len(lacks) == len(_STORE_METHODS) else f"lacks {', '.join(lacks)}"
            raise Refusal(
                f"job.Jobs(store={repr(shown(store)) if isinstance(store, str) else repr(store)}): "
                "pass job.Table('sqlite:///app.db'), "
                "job.Table('postgresql://…') or job.Memory(bytes=1 << 20); a store of your own "
                f"must have every method of nilo_job.store.contract.Store, and this one {which}"
            )
        if status is not None and not isinstance(status, Space):
            raise Refusal(
                f"job.Jobs(status={status!r}): pass job.MemorySpace(ttl_s=600) or "
                "job.RedisSpace(client, name=..., ttl_s=600)"
            )
        workers = whole(workers, WORKERS, "job.Jobs(workers={})", "workers")
        self.poll_ms = whole(poll_ms, POSITIVE_MS, "job.Jobs(poll_ms={})", "poll_ms")
        self.timeout_ms = whole(timeout_ms, POSITIVE_MS, "job.Jobs(timeout_ms={})", "timeout_ms")
        self.retention_ms = whole(retention_ms, MS, "job.Jobs(retention_ms={})", "retention_ms")
        self.heartbeat_ms = (
            None
            if heartbeat_ms is None
            else whole(heartbeat_ms, HEARTBEAT_MS, "job.Jobs(heartbeat_ms={})", "heartbeat_ms")
        )
        self.store = store
        self.deps = deps
        self.space = status
        deps_types = read_deps(deps)
        read = [read_kind(cls, deps_types, Jobs) for cls in kinds]
        check_unique_names(read)
        # The parts, each handed the one clock; data flows down through them to the store.
        self._parts = parts = Parts.build(store, read, status, self.timeout_ms, self.heartbeat_ms)
        self.lease_ms = parts.lease_ms
        self._producer = Producer(parts)
        self._runner = runner = Runner(parts, self, deps, keep=retention_ms > 0)
        self._pruner = Pruner(store, retention_ms, parts.clock.now) if retention_ms else None
        self._server = Server(parts, runner, workers, self.poll_ms, self._pruner)
        self._drain = Drain(parts, runner)
        self._operator = Operator(store, parts, on_pause=self._server.pauses.set)

    def __repr__(self) -> str:
        names = list(self._parts.kinds)
        return f"job.Jobs(kinds={names}, store={self.store!r}, workers={self.workers})"

    @property
    def workers(self) -> int:
        """Rows running at once in this process under `serve` (settable before it starts).

        Raises:
            Refusal: (on setting) not an int from 1 to 100,000.
        """
        return self._server.workers

    @workers.setter
    def workers(self, value: int) -> None:
        self._server.workers = whole(value, WORKERS, "jobs.workers = {}", "workers")

    @functools.cached_property
    def sync(self) -> SyncJobs:
        """The blocking face of this queue, for code that does not run asyncio (Flask, Django,
        scripts): `jobs.sync.push(value)`, `jobs.sync.push_in(conn, value)`, `jobs.sync.cancel(id)`,
        `jobs.sync.stats()`, and the operator calls."""
        return SyncJobs(self, self._parts.wakeups.serving_loop, self._producer.push_in_now)

    @property
    def kinds(self) -> tuple[Kind, ...]:
        """The kinds this queue runs, as read from their classes."""
        return tuple(self._parts.kinds.values())

    # ----------------------------------------------------------------------------------- push

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
            unique: a key (at most 64 bytes of UTF-8) that at most one queued or running row of
                this kind may carry; the answer is None when a row already carries it.
            within: a Space put in front of `unique`: a second push of the key inside the
                Space's time to live is answered None by the Space and never reaches the table.

        Returns:
            The new row's id, or None when `unique`/`within` found the key taken.

        Raises:
            Refusal: bad options or a payload that cannot round-trip; nothing is written.
            PayloadTooLarge: the payload's JSON is over the store's `max_payload` (a `Refusal`
                too); nothing is written.
            QueueFull: the store has no room (Memory); nothing is written.
            StoreUnavailable: the store cannot be reached; nothing is written.
        """
        return await self._producer.push(value, after_ms, at, unique, within)

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
            Refusal: a value cannot be pushed (nothing is written); the sentence names it by
                its place in the list (`push_many: item 3 of 10 (values[2]): …`), and the
                options, refused once, name none.
            PayloadTooLarge: a payload's JSON is over the store's `max_payload` (a `Refusal`
                too), named by its place the same way; nothing is written.
            QueueFull: the store has no room (Memory); nothing is written.
            StoreUnavailable: the store cannot be reached; nothing is written.
        """
        return await self._producer.push_many(values, after_ms, at)

    async def push_in(
        self,
        tx: object,
        value: object,
        *,
        after_ms: int | None = None,
        at: int | datetime | None = None,
        unique: str | None = None,
        within: object = None,
    ) -> int | None:
        """Queue `value` through your own open transaction `tx`: the row exists once it commits.

        The outbox pattern with no outbox: if the commit fails there is no job, and if the job
        is there, so is everything your transaction wrote. The row is not there until the
        commit, so the push cannot wake a worker itself. On PostgreSQL the NOTIFY sent with the
        commit wakes every listening worker; on SQLite, call `jobs.wake()` after the commit.

        Args:
            tx: a `sqlite3.Connection` with an open transaction on the store's database file; a
                psycopg `Connection`/`AsyncConnection` in a transaction; a SQLAlchemy
                `Session`/`AsyncSession`/`Connection`/`AsyncConnection`; Django's
                `connection` inside `transaction.atomic()`.
            after_ms, at, unique: as for `push`.
            within: refused: a Space cannot roll back with your transaction.

        Returns:
            The new row's id (visible to others after the commit), or None when `unique` found
            the key taken.

        Raises:
            Refusal: `tx` is not one the store can write through (the message lists them), the
                store is a `job.Memory`, `within` is given, or the options cannot go together.
            PayloadTooLarge: the payload's JSON is over the store's `max_payload`; nothing is
                written through `tx`.
        """
        refuse_within(within)
        return await self._producer.push_in(tx, value, after_ms, at, unique)

    def observe(self, observer: Observer) -> None:
        """Tell `observer` about every push, claim, run and end from now on (metrics, tracing).

        An observer has the methods `pushing`, `pushed`, `claimed`, `running` and `ended`, as
        `nilo_job.metrics.Metrics` does; each must return quickly and never raise.

        Raises:
            Refusal: `observer` lacks one of those methods.
        """
        self._parts.observers.add(observer)

    def wake(self) -> None:
        """Wake an idle worker of this process now, instead of at its next poll; on SQLite, the
        other processes serving the file too (a row `push_in` committed in your transaction
        reaches them so; on PostgreSQL the commit's NOTIFY already has).

        Safe to call from any thread, and a no-op when nothing serves.
        """
        self._operator.wake()

    # ------------------------------------------------------------------------- reading rows

    async def cancel(self, row_id: int) -> bool:
        """Take back a queued row (including one waiting for a retry) before it runs.

        One statement: a worker claiming in the same instant either got the row or did not.
        The unique key goes with the row. A schedule's next tick may be cancelled too: that one
        tick is skipped, and the tick after it is queued in its place, so the schedule goes on.

        Returns:
            True if the row was queued and is now gone; False once a worker holds it (the run
            finishes), or if there is no such row.

        Raises:
            Refusal: `row_id` is not an int from 1 to 2**63 - 1.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.cancel(row_id)

    async def stats(self) -> Stats:
        """How many rows in the table are `queued`, `running` and `dead`, and how many `done`
        rows are kept as history.

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.stats()

    async def dead_ones(self, limit: int = 1_000) -> list[Dead]:
        """The rows that failed for the last time, newest first, at most `limit`.

        Each keeps its error's class name, message and traceback; its payload is the stored JSON
        as plain values, or, longer than 4,096 characters, the start of that JSON as a str with
        `payload_cut` True (a list reads only the start of each payload; `row` reads it whole).

        Raises:
            Refusal: `limit` is not a whole number from 1 to 100,000.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.dead_ones(limit)

    async def retry_dead(self, row_id: int) -> bool:
        """Queue a dead row again, due now, from its first attempt with the full retry budget.

        Returns:
            True if the row was dead; False if there is no dead row with that id.

        Raises:
            Refusal: `row_id` is not an int from 1 to 2**63 - 1.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.retry_dead(row_id)

    async def status(self, row_id: int) -> Status | None:
        """What the status Space remembers of the row, or None once it has forgotten it (or
        when the queue has no status Space). Rows pushed with `push_in` or `push_many` appear
        once a worker runs them.

        Raises:
            Refusal: `row_id` is not an int from 1 to 2**63 - 1.
        """
        return await self._operator.status(row_id)

    async def progress(self, row_id: int, n: int) -> None:
        """Record how far the run of `row_id` has got (the kind decides what `n` means).

        It goes into the status Space beside the state and touches the table not at all; it
        starts over with every attempt and is kept on done. A no-op without a status Space, and
        for a row that is not running in this process (progress is the run's own figure).

        Raises:
            Refusal: `row_id` is not a row id, or `n` is not a 64-bit int.
        """
        check_row_id(row_id, "progress({}, n)")
        whole(n, FIGURE, "progress(row, n={})", "n")
        await self._runner.progress(row_id, n)

    async def ready(self) -> bool:
        """False when the store cannot be reached or has no usable table (the store says so), or
        when `serve` was started and its worker loop is no longer alive; True otherwise (what a
        readiness probe asks)."""
        try:
            await self.store.check()
        except Exception:
            return False
        return self._server.alive()

    # ---------------------------------------------------------------------------- schedules

    async def seed(self) -> None:
        """Queue every schedule's next tick, as `serve` does at start.

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        await self._parts.ticks.seed_at(self._parts.clock.now())

    async def seed_at(self, now_us: int) -> None:
        """Queue every schedule's first tick after `now_us` (µs since the epoch), for a test.

        Each tick row carries the unique key "schedule", so seeding from any number of
        processes at once leaves one row per scheduled kind; a kind already seeded is left as
        it is.

        Raises:
            Refusal: `now_us` is not an int from 0 (1970) to the year 9000.
            StoreUnavailable: the store cannot be reached.
        """
        await self._parts.ticks.seed_at(moment(now_us, "seed_at({})", "now_us"))

    # ------------------------------------------------------------------------------ running

    async def drain(self, *, raises: bool = False) -> int:
        """Run everything due now, here, one row at a time; the clock is read once.

        Args:
            raises: a run that raises stops the drain and its exception reaches the caller, as
                with `drain_at`.

        Returns:
            How many runs were called (a row killed without running is not counted).

        Raises:
            BaseException: with `raises`, what a run raised (see `drain_at`).
        """
        return await self._drain.drain_at(self._parts.clock.now(), raises)

    async def drain_at(self, now_us: int, *, raises: bool = False) -> int:
        """Run everything that would be due if it were `now_us` (microseconds since the epoch).

        Every read of the clock inside a tick (whether a row is due, when a failed run is tried
        again) reads `now_us`, so a test walks tomorrow, a backoff or a lease with a call rather
        than a sleep. Rows pushed by the runs are run too when due at `now_us`.

        Args:
            now_us: the moment to run at, µs since the epoch.
            raises: False (the default): a run that raises is recorded (a retry, or dead) and
                the drain goes on. True: once that end is written, the drain stops and the
                run's exception is raised here with its own traceback and a note naming the
                kind, the row, the attempt and what became of the row (queued again for when,
                or dead); a row that died of `BadPayload` without running raises that.

        Returns:
            How many runs were called.

        Raises:
            Refusal: `now_us` is not an int from 0 (1970) to the year 9000.
            BaseException: with `raises`, what a run raised.
        """
        return await self._drain.drain_at(now_us, raises)

    async def run_one(self, *, raises: bool = False) -> bool:
        """Run one row that is due now; False when none is. `raises` as for `drain_at`."""
        return await self._drain.run_one_at(self._parts.clock.now(), raises)

    async def run_one_at(self, now_us: int, *, raises: bool = False) -> bool:
        """Run one row that would be due at `now_us` (µs since the epoch); False when none is.

        A row whose payload no longer fits its class is killed as `BadPayload` without running
        and the next due row is taken instead. `raises` as for `drain_at`.

        Raises:
            Refusal: `now_us` is not an int from 0 (1970) to the year 9000.
            BaseException: with `raises`, what the run raised.
        """
        return await self._drain.run_one_at(now_us, raises)

    # -------------------------------------------------------------------------------- serve

    async def serve(self, *, grace_ms: int = 30_000, kinds: Sequence[str] | None = None) -> None:
        """Run `workers` rows at once until cancelled: the worker loop of this process.

        It claims as many rows as it has free workers in one call, sleeps `poll_ms` when there
        is nothing due, and wakes at once on a push from this process. A claim that cannot
        reach the store is logged as an error and asked again after `poll_ms`.

        When cancelled it stops claiming, lets running rows finish for up to `grace_ms`
        milliseconds, then cancels them and gives their rows back as queued, unrun; then the
        CancelledError propagates.

        `kinds` (names) runs only those kinds in this process (None: all of them). Paused
        kinds are not claimed; while it runs it prunes done rows past `retention_ms`.

        Raises:
            StoreUnavailable: at start, the table is missing or not nilo-job's.
            Refusal: serve is already running on this queue, or `kinds` names a kind the
                queue lacks.
        """
        await self._server.serve(grace_ms, kinds=kinds)

    @contextlib.asynccontextmanager
    async def serving(
        self, *, grace_ms: int = 30_000, kinds: Sequence[str] | None = None
    ) -> AsyncIterator[Jobs]:
        """`serve` in the background for the body of an `async with`, for an ASGI lifespan.

        Leaving the block cancels it and waits for its shutdown (`grace_ms` and `kinds` as for
        `serve`).

        Raises:
            StoreUnavailable: as the block is entered, the store cannot be reached or its table
                is missing or not nilo-job's.
            Refusal: serve is already running on this queue.
        """
        async with self._server.serving(grace_ms, kinds):
            yield self

    store: Store
    _operator: Operator
    _pruner: Pruner | None

    async def row(self, row_id: int) -> Row | None:
        """A row's whole story: its state, payload, times, attempt, lease and worker, the last
        error (name, message, traceback), for a done row what its run returned (`result`), and
        its newest 20 attempts, oldest first (`attempts_log`). A done row is found while it is
        kept (`retention_ms`).

        Returns:
            The row, or None when there is no row with that id (any more).

        Raises:
            Refusal: `row_id` is not an int from 1 to 2**63 - 1.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.row(row_id)

    async def find(self, where: Where, *, after: str | None = None, limit: int = 100) -> Found:
        """A page of the rows that match `where`, at most `limit` (1 to 1,000). A payload whose
        JSON is longer than 4,096 characters is its start, as a str, with `payload_cut` True:
        a page reads a bounded amount whatever its rows carry, and `row` reads the whole.

        Queued and running rows come by due time, oldest first; dead and done rows newest first.
        Pass the page's `next` as `after` for the page after it: pages are keyset pages, so page
        500 costs what page 1 does. Without `where.state`, rows of every state (no paging).

        Raises:
            Refusal: `where` is not a `job.Where`, `limit` is out of range, `after` is not a
                cursor `find` gave, or `after` without a state.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.find(where, after, limit)

    async def count(self, where: Where) -> int:
        """How many rows match `where` (of every state when it names none).

        Raises:
            Refusal: `where` is not a `job.Where`.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.count(where)

    async def retry_many(self, rows: Sequence[int] | Where, *, at_most: int | None = None) -> int:
        """`retry_dead` for many rows: the dead rows among the ids `rows`, or every dead row
        that matches the filter `rows`, at most `at_most` (None: all), in batches of 500 rows,
        one transaction each. How many were queued again.

        Raises:
            Refusal: an id is not an int, `rows` names a state other than dead, or `at_most`
                is negative.
            StoreUnavailable: the store cannot be reached (whole batches before it stand).
        """
        return await self._operator.retry_many(rows, at_most)

    async def cancel_many(self, rows: Sequence[int] | Where, *, at_most: int | None = None) -> int:
        """`cancel` for many rows: the queued rows among the ids, or every queued row that
        matches the filter, at most `at_most`, in batches as for `retry_many`. How many were
        taken back (a row a worker holds runs on and is not counted).

        Raises:
            Refusal, StoreUnavailable: as for `retry_many`.
        """
        return await self._operator.cancel_many(rows, at_most)

    async def delete_many(self, rows: Sequence[int] | Where, *, at_most: int | None = None) -> int:
        """Delete dead and done rows: among the ids, or every dead or done row that matches the
        filter, at most `at_most`, in batches as for `retry_many`. Queued and running rows are
        never deleted here (`cancel_many` takes queued ones back). How many went.

        Raises:
            Refusal, StoreUnavailable: as for `retry_many`.
        """
        return await self._operator.delete_many(rows, at_most)

    async def pause(self, kind: str) -> bool:
        """Stop claiming rows of the kind named `kind`, in every process on this table: each
        serving process stops within its `poll_ms` (this one at once). Pushes are still
        accepted and rows wait; a run already started finishes. The pause is kept in the
        table, so it outlasts restarts. False when the kind was paused already.

        Raises:
            Refusal: `kind` is not the name of a kind of this queue.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.pause(kind)

    async def resume(self, kind: str) -> bool:
        """Claim rows of a paused kind again, in every process within its `poll_ms`. False when
        it was not paused.

        Raises:
            Refusal, StoreUnavailable: as for `pause`.
        """
        return await self._operator.resume(kind)

    async def paused(self) -> dict[str, int]:
        """The paused kinds, each with when it was paused (µs since the epoch).

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        return await self.store.paused()

    async def flow(self, *, minutes: int = 60) -> list[Flow]:
        """Per kind, the last `minutes` minutes (1 to 1,440): rows done (while history keeps
        them) and deaths per minute (each counted in its minute, also after its row was retried
        or deleted), run durations (p50, p95 of the last 1,000 done rows), and how long the
        oldest due row has waited (queue latency), with the counts now and whether the kind is
        paused.

        Raises:
            Refusal: `minutes` is out of range.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.flow(minutes)

    async def prune_at(self, now_us: int) -> int:
        """Delete every done row that finished more than `retention_ms` before `now_us` (µs
        since the epoch): what `serve` does in small batches as it runs, here all at once (for a
        test's clock, or a cron job of yours). How many went; 0 with `retention_ms=0`.

        Raises:
            Refusal: `now_us` is not an int from 0 (1970) to the year 9000.
            StoreUnavailable: the store cannot be reached.
        """
        moment(now_us, "prune_at({})", "now_us")
        if self._pruner is None:
            return 0
        return await self._pruner.prune_at(now_us)
