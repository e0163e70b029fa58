"""Running one claimed row: from the row a claim took to the end written for it.

`Runner.execute` takes a `Claimed` row up to its run and back down to the store: a schedule's
tick is dropped when missed or hands its key on; the payload is decoded (a row whose JSON no
longer fits its class dies as `BadPayload` without running); the run is called with its
arguments (`calling`), under its timeout, in a thread when it is sync; the outcome becomes an
end (`outcome.decide`), which is written (`ends`) and then told to the observers, the log, the
status Space and serve's wake-ups (a retry's wait, the next tick). Serve and the test helpers
both run rows through here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable

import msgspec

from .._base.errors import BadPayload
from .._base.values import State, Tick
from .._kinds.kind import Kind
from ..store.contract import Claimed, Died, Done, End, NewRow, Released
from . import outcome
from .calling import Execution, arguments, call_async, call_in_thread
from .ends import Ending
from .outcome import MESSAGE_CHARS, storable
from .parts import Parts

log = logging.getLogger("nilo_job")

RESULT_BYTES = 65_536
"""The largest result (its JSON, in bytes) a done row keeps; a larger one is kept as None."""

_BUSY_AGAIN_US = 1_000_000  # a row whose earlier thread still runs here is due again after this


def _nothing() -> None:
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt at a claimed row: `row`, of `kind`, with its decoded payload `value`;
    `clock()`, the tick's clock (µs); `free()`, called once the row no longer needs its worker;
    `execution`, this process's hold on the row; `then_at_end`, whether a schedule's next tick
    is computed when the run ends (`Overlap.SKIP`)."""

    kind: Kind
    row: Claimed
    value: object
    clock: Callable[[], int]
    free: Callable[[], None]
    execution: Execution
    then_at_end: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Ran:
    """What `Runner.execute` did with one claimed row: `called`, whether its run was called;
    `end`, the end decided for it (None when none was: a row handed back because an earlier
    thread of it still runs here); `error`, what the run raised, or the `BadPayload` a row
    died of without running (None when it returned)."""

    called: bool
    end: End | None = None
    error: BaseException | None = None


class Runner:
    """Runs the claimed rows of one queue, one `execute` per row.

    Args:
        parts: the queue's parts.
        queue: the value a run gets for a parameter annotated `job.Jobs`.
        deps: the object whose fields answer a run's other parameters.
        keep: keep done rows as history, with their run's result (the queue's retention).
    """

    def __init__(self, parts: Parts, queue: object, deps: object, *, keep: bool = False) -> None:
        self.kinds = parts.answers  # by every name a row may carry: a renamed kind's old ones too
        self.keep = keep
        self.queue = queue
        self.deps = deps
        self.timeout_ms = parts.timeout_ms
        self.ends = parts.ends
        self.ticks = parts.ticks
        self.statuses = parts.statuses
        self.observers = parts.observers
        # Rows this process holds, by id, until their execution (thread included) has ended.
        self.busy: dict[int, Execution] = {}
        # Runs cut short by serve's stop, by row id: the write that gives the row back (its
        # answer: applied, lost, not written), or None for a sync run whose thread goes on.
        self.stopped: dict[int, asyncio.Future[bool | None] | None] = {}
        self.progress_of: dict[int, int] = {}
        self.run_s: float | None = None  # recent seconds per run (a moving average)

    async def execute(
        self, row: Claimed, clock: Callable[[], int], free: Callable[[], None] = _nothing
    ) -> Ran:
        """Run one claimed row to its end and write the end; what was done with it.

        `clock()` is the tick's clock (µs). `free()` is called once the row no longer needs its
        worker: an async run's as soon as its run has returned, before its end is written
        (serve's worker takes its next row meanwhile); otherwise when everything here is over.
        """
        kind = self.kinds[row.kind]
        if row.retaken_from is not None:
            retaken(kind, row)
        if row.unreadable is not None:
            why = f"the store cannot read it: {row.unreadable}"
            return await self._bad_payload(kind, row, why, clock)
        then_at_end = False
        if self.ticks.holds_schedule(kind, row):
            start = await self.ticks.start(kind, row, clock())
            if start.dropped is not None:
                done = Done(row.id, row.attempts, start.dropped)
                await self.ends.end(Ending(kind, row, done, dropped=True))
                return Ran(False, done)
            then_at_end = start.next_at_end
        try:
            value = kind.codec.decode(row.payload)
        except BadPayload as error:
            then = self.ticks.next_row(kind, row.run_at, clock()) if then_at_end else None
            return await self._bad_payload(kind, row, str(error), clock, then)
        # Two executions of one row never overlap in this process: while a timed-out sync run's
        # thread is still going, a new claim of its row is given back, due a second later.
        previous = self.busy.get(row.id)
        if previous is not None and not previous.done:
            log.info(
                "%s row %d: an earlier run's thread is still going here; the row is queued "
                "again for a second from now",
                kind.name, row.id, extra={"kind": kind.name, "row": row.id},
            )  # fmt: skip
            await self.ends.give_back([row], run_at=clock() + _BUSY_AGAIN_US)
            return Ran(False)
        execution = Execution(functools.partial(self._forget, row.id))
        self.busy[row.id] = execution
        try:
            return await self._run(Attempt(kind, row, value, clock, free, execution, then_at_end))
        finally:
            if kind.is_async or not execution.thread_started:
                execution.end()

    async def _bad_payload(
        self,
        kind: Kind,
        row: Claimed,
        why: str,
        clock: Callable[[], int],
        then: NewRow | None = None,
    ) -> Ran:
        """Kill `row` as `BadPayload` without running it: `why` says what is wrong with it."""
        detail = storable(f"{why} (the row did not run)", MESSAGE_CHARS)
        died_at = clock()
        end = Died(
            row.id,
            row.attempts,
            died_at,
            BadPayload.__name__,
            detail,
            then,
            ended_at=died_at,
            lost_from=row.retaken_from,
        )
        await self.ends.end(Ending(kind, row, end))
        return Ran(False, end, BadPayload(detail))

    def _forget(self, row_id: int, execution: Execution) -> None:
        if self.busy.get(row_id) is execution:
            del self.busy[row_id]

    async def _run(self, attempt: Attempt) -> Ran:
        """Call `attempt`'s run, decide its end and have it written and told."""
        kind, row, clock, execution = attempt.kind, attempt.row, attempt.clock, attempt.execution
        started = clock()
        tick = Tick(row.id, row.attempts, row.run_at, outcome.is_last(kind, row.attempts))
        if self.statuses.space is not None:
            self.progress_of[row.id] = 0  # the figure starts over with every attempt
        kwargs = arguments(kind, tick, started, self.queue, self.deps)
        timeout_s = (kind.timeout_ms or self.timeout_ms) / 1_000
        error: BaseException | None = None
        stop = False  # a KeyboardInterrupt to raise once the end is written
        watch = self.observers.running(kind.name, tick, row.trace)
        returned: object = None
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s row %d: attempt %d started", kind.name, row.id, row.attempts,
                extra={"kind": kind.name, "row": row.id, "attempt": row.attempts},
            )  # fmt: skip
        began = time.monotonic()
        try:
            # Inside the try: a stop while the status is written gives the row back too.
            await self.statuses.put(row.id, State.RUNNING, row.attempts, 0)
            with watch:
                if kind.is_async:
                    returned = await call_async(kind, attempt.value, kwargs, timeout_s)
                else:
                    returned = await call_in_thread(
                        kind, attempt.value, kwargs, timeout_s, execution
                    )
        except asyncio.CancelledError as cancelled:
            task = asyncio.current_task()
            if task is None or not task.cancelling():
                error = cancelled  # raised by the run itself: a failure like any other
            elif kind.is_async or not execution.thread_started or execution.done:
                # The worker is shutting down past its grace: give the row back unrun.
                now = clock()
                given_back = Released(
                    row.id, row.attempts, now, ended_at=now, lost_from=row.retaken_from
                )
                ending = Ending(kind, row, given_back, time.monotonic() - began)
                writing = asyncio.ensure_future(self.ends.end(self._with_progress(ending)))
                self.stopped[row.id] = writing
                await asyncio.shield(writing)
                raise
            else:
                # A thread cannot be stopped: the row stays running under its lease, so that
                # nobody starts it again while the thread may still be at it.
                self.stopped[row.id] = None
                raise
        except KeyboardInterrupt as interrupt:
            # The run's own doing, or (async) a second Ctrl-C of this process: either way the
            # attempt is recorded as failed, so that a run raising it every time dies by its
            # retries; then an async one stops the process.
            error = interrupt if kind.is_async else KeyboardInterrupt("the run raised it")
            stop = kind.is_async
        except BaseException as failure:
            error = failure  # SystemExit and the like from a run end the attempt, not the worker
        seconds = time.monotonic() - began
        self.run_s = seconds if self.run_s is None else 0.8 * self.run_s + 0.2 * seconds
        ended = clock()
        # Overlap.SKIP: the next tick is computed from the clock when the run ends.
        then = self.ticks.next_row(kind, row.run_at, ended) if attempt.then_at_end else None
        kept = self.keep and error is None
        result = _result(kind, row, returned) if kept else None
        # When the run began, as far back from its end as it really took (on a test's clock,
        # which stands still, the clock alone would make every run take no time).
        began_us = ended - int(seconds * 1_000_000)
        end = outcome.decide(
            kind, row, error, ended, then, keep=self.keep, started_us=began_us, result=result
        )
        if kind.is_async:
            attempt.free()
        # Not shielded: a cancel here (a stop past its grace) leaves the end with serve's
        # group, which writes it and tells of it whatever happens to this task.
        try:
            await self.ends.end(self._with_progress(Ending(kind, row, end, seconds, error=error)))
        finally:
            task = asyncio.current_task()
            if not kind.is_async and not (task is not None and task.cancelling()):
                # A timed-out thread still running keeps its worker slot until it returns,
                # even when recording its end failed.
                await execution.wait()
        if stop and error is not None:
            raise error
        return Ran(True, end, error)

    def _with_progress(self, ending: Ending) -> Ending:
        """`ending` with its run's last progress figure, which this process forgets now."""
        progress = self.progress_of.pop(ending.row.id, None)
        return ending if progress is None else dataclasses.replace(ending, progress=progress)

    async def progress(self, row_id: int, n: int) -> None:
        """Record `n` as the progress of `row_id`'s run, if it runs in this process and the
        queue has a status Space; a no-op otherwise."""
        if self.statuses.space is None or row_id not in self.busy:
            return
        self.progress_of[row_id] = n
        current = await self.statuses.get(row_id)
        state, attempts = (
            (State.RUNNING, 0) if current is None else (current.state, current.attempts)
        )
        await self.statuses.put(row_id, state, attempts, n)


def retaken(kind: Kind, row: Claimed) -> None:
    """Log, as a WARNING, that `row` was taken back after the lease of the worker that held it
    ran out (that worker died, hung, or lost the store for longer than the lease): its run may
    have begun there, so this attempt may be its second run."""
    held = row.retaken_from or "an unknown worker"
    log.warning(
        "%s row %d was retaken after its lease ran out: attempt %d begins; worker %s held "
        "attempt %d",
        kind.name, row.id, row.attempts, held, row.attempts - 1,
        extra={
            "kind": kind.name, "row": row.id, "attempt": row.attempts,
            "worker": row.retaken_from or "",
        },
    )  # fmt: skip


def _result(kind: Kind, row: Claimed, value: object) -> bytes | None:
    """The JSON of what a run returned, for its done row: None for None, for a value JSON cannot
    carry, and for one over `RESULT_BYTES` (the row is kept all the same, and the log says why)."""
    if value is None:
        return None
    try:
        data = msgspec.json.encode(value)
        data.decode()  # text every store keeps (no lone surrogates)
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError) as error:
        log.info(
            "%s row %d: its run returned a %s, which JSON cannot carry (%s); the row keeps no "
            "result",
            kind.name, row.id, type(value).__name__, error,
            extra={"kind": kind.name, "row": row.id},
        )  # fmt: skip
        return None
    if len(data) > RESULT_BYTES:
        log.info(
            "%s row %d: its run returned %d bytes of JSON, over the %d a row keeps; the row "
            "keeps no result",
            kind.name, row.id, len(data), RESULT_BYTES, extra={"kind": kind.name, "row": row.id},
        )  # fmt: skip
        return None
    return data
