"""Ends: the one way the end of a claimed row goes, written to the store and then told.

An end (done, a retry at a time, dead, snoozed, or given back unrun) is decided in `outcome`,
then `Ends.end` writes it with `store.finish` and tells the observers, the log, serve's wake-ups
(a retry's wait, a snooze's, a schedule's next tick) and the status Space how it went. Under
serve the ends of concurrent runs share one `finish` (a group commit, `Grouped`), written by a
task of the group's own, so an end whose run has returned is written even when its row's task is
cancelled by a stop past its grace. An end the store cannot take because it is unreachable is
tried again for as long as the row's lease lasts: past it another worker may take the row, and
this end no longer matters (the row runs again: at least once). Rows claimed and never started
are given back (`give_back`) without being told: they did not run.

While serve runs, `Ends` also keeps what serve's bound (`Bound`) and its stop need: the rows
whose ends are being written (`writing`), how many ends the last write took, whether ends fail,
and the rows whose ends could not be written (held until their leases may have run out). Ends
that cannot be written are one WARNING as they begin to fail (each failure after it is logged
at DEBUG), and one INFO once an end is written again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any

from .._base.errors import LeaseLost, StoreUnavailable
from .._base.group_commit import Grouped
from .._base.spaces import Statuses
from .._base.text import count_of, printable
from .._base.values import RetryIn, Snooze, State
from .._kinds.kind import Kind
from .._watch.observers import Observers, Outcome
from ..store.contract import Claimed, Died, Done, End, Released, Retrying, Snoozed, Store
from .feed import Bound
from .outcome import in_ascii, user_traceback
from .wakeups import Wakeups

log = logging.getLogger("nilo_job")


def _nothing() -> None:
    return None


def _first_line(error: BaseException) -> str:
    """`error`'s text up to its first line break (a driver may add lines of context)."""
    return str(error).split("\n", 1)[0]


def _in_ascii(end: End) -> End | None:
    """`end` with its error's name, message and traceback in ASCII (escaped), or None when
    they are already."""
    if not isinstance(end, Retrying | Died):
        return None
    error, detail, trace = (in_ascii(text) for text in (end.error, end.detail, end.traceback))
    if (error, detail, trace) == (end.error, end.detail, end.traceback):
        return None
    return dataclasses.replace(end, error=error, detail=detail, traceback=trace)


class Ends:
    """The one way the end of a claimed row goes: written to the store, then told.

    Args:
        store: the queue's store.
        lease_ms: the queue's lease, in milliseconds: how long an end is tried again through
            an outage.
        observers, wakeups, statuses: told of every end written.
    """

    def __init__(
        self,
        store: Store,
        lease_ms: int,
        observers: Observers,
        wakeups: Wakeups,
        statuses: Statuses,
    ) -> None:
        self.store = store
        self.lease_ms = lease_ms
        self.observers = observers
        self.wakeups = wakeups
        self.statuses = statuses
        self.group: Grouped[End, bool] | None = None  # while serve runs
        self.background: set[asyncio.Task[Any]] = set()
        # While serve runs: the rows whose ends are being written (decided, not yet answered;
        # one whose writer was cancelled stays until the group answers it, or for good when no
        # group will), and serve's bound, with the rows whose ends could not be written.
        self.writing: dict[int, Ending] = {}
        self.bound = Bound(lease_ms)
        self.failing: float | None = None  # since when ends fail (monotonic, s), while they do
        self.failure = ""  # the last failure to write an end, in words

    def start_grouping(self, workers: int = 0) -> None:
        """serve begins, with `workers` workers (its bound: `Bound`): ends from now on share
        `finish` calls, written by the group's task."""
        self.group = Grouped(self._finish, detached=True)
        self.writing.clear()
        self.bound.serve(workers)
        self.failing, self.failure = None, ""

    def end_serving(self) -> None:
        """serve has ended: forget the rows it held."""
        self.writing.clear()
        self.bound.clear()
        self.bound.freed = self.bound.lapsed = _nothing
        self.bound.held = self.bound.unwritten.__len__
        self.bound.base = 0

    async def _finish(self, ends: list[End]) -> list[bool]:
        """A group's write: `store.finish`, whose size serve's bound follows."""
        applied = await self.store.finish(ends)
        self.bound.written(len(ends))
        return applied

    async def stop_grouping(self) -> None:
        """serve ends: until the groups waiting now are written, then ends go one by one."""
        group = self.group
        if group is not None:
            with contextlib.suppress(Exception):
                await group.idle()  # it shields the write itself
        self.group = None

    async def end(self, ending: Ending) -> bool | None:
        """Write `ending`'s end, then tell the observers, the log, serve's wake-ups and the
        status Space how it went: applied (True), lost to another worker (False), or not written
        (None: the store stayed unreachable for the whole lease, and the row is taken again
        after it).

        Under serve the end goes to the group, which writes it even if this task is cancelled
        meanwhile; it is then told in a background task that `settled()` waits for. Meanwhile
        the row is among `writing`; a row whose end could not be written is held against
        serve's bound until its lease may have run out (`Bound`).

        Raises:
            Exception: anything but `StoreUnavailable` that the store raised.
        """
        serving = self.group is not None
        if serving:
            self.writing[ending.row.id] = ending
        try:
            applied, retried = await self._write(ending)
        except asyncio.CancelledError:
            raise  # (left in `writing`: the group may still write it, and tells it late)
        except Exception:
            if serving:
                self.writing.pop(ending.row.id, None)
                self.bound.hold(ending.row.id)
            raise
        if serving:
            self.writing.pop(ending.row.id, None)
            if applied is None:
                self.bound.hold(ending.row.id)
        await self._tell(ending, applied, retried)
        return applied

    async def _tell(self, ending: Ending, applied: bool | None, retried: bool = False) -> None:
        status = tell(self.observers, self.wakeups, ending, applied, retried)
        if status is not None:
            await self.statuses.put(ending.row.id, *status)

    def _told_late(self, ending: Ending, applied: bool) -> None:
        self.writing.pop(ending.row.id, None)
        self._wrote()
        self.later(self._tell(ending, applied))

    def _failed(self, ending: Ending, error: Exception, again: str) -> None:
        """Writing `ending`'s end failed with `error` (`again`: what becomes of it). The first
        failure since ends were last written is a WARNING; the others are DEBUG."""
        kind, row_id = ending.kind.name, ending.row.id
        name, said = type(error).__name__, _first_line(error)
        self.failure = f"{name}: {said}"
        self.bound.failing = self.group is not None
        fields = {"kind": kind, "row": row_id, "error": name}
        if self.failing is not None:
            log.debug(
                "%s row %d: writing its end failed again (%s: %s); %s",
                kind, row_id, name, said, again, extra=fields,
            )  # fmt: skip
            return
        self.failing = time.monotonic()
        # The rows held now, counted as the WARNING is logged: those taken while the bound was
        # larger (it follows the last second's writes of ends) may be more than it is now.
        held = self.bound.held()
        bound = (
            "" if self.group is None
            else f". This process holds {count_of(held, 'row')} whose "
            f"{'end is' if held == 1 else 'ends are'} not written now, and takes no new row "
            f"while it holds {self.bound.most():,} or more"
        )  # fmt: skip
        log.warning(
            "writing ends failed with %s: %s (the end of %s row %d). Until an end is written "
            "again, the rows whose ends are not written stay running under their leases: %s, "
            "and a row whose end is never written runs again once its lease runs out%s",
            name, said, kind, row_id, again, bound, extra=fields,
        )  # fmt: skip

    def _wrote(self) -> None:
        """An end was written: if ends were failing, say they are written again."""
        if self.failing is not None:
            log.info(
                "ends are written again, after %.1f s of failures", time.monotonic() - self.failing
            )
            self.failing = None
            self.bound.failing = False
            self.bound.freed()  # the bound is no longer the rows per worker alone

    async def _write(self, ending: Ending) -> tuple[bool | None, bool]:
        """`store.finish` of `ending`'s end, tried again through an outage for the lease: whether
        it applied (None: never written), and whether it was tried more than once."""
        kind, row, end = ending.kind.name, ending.row, ending.end
        deadline = time.monotonic() + self.lease_ms / 1_000
        pause = 0.05
        retried = False
        while True:
            try:
                group = self.group
                if group is None:
                    (applied,) = await self.store.finish([end])
                else:
                    late = functools.partial(self._told_late, ending)
                    applied = await group.submit(end, late)
            except StoreUnavailable as error:
                if time.monotonic() + pause > deadline:
                    log.error(
                        "%s row %d: its end could not be written (%s); unless a try whose "
                        "answer was lost wrote it, the row runs again once its lease has passed",
                        kind, row.id, error, extra={"kind": kind, "row": row.id},
                    )  # fmt: skip
                    return None, retried
                self._failed(ending, error, f"each end is tried again (this one in {pause:.2f} s)")
                retried = True
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
            except Exception as error:
                # Its text is storable already (`outcome`); should a store refuse it anyway,
                # the end is written with its text in plain ASCII rather than not at all.
                plainer = _in_ascii(end)
                if plainer is None:
                    self._failed(ending, error, "an end the store refuses is not tried again")
                    raise
                log.error(
                    "%s row %d: the store refused its end (%s: %s); writing it again with its "
                    "error's text in ASCII",
                    kind, row.id, type(error).__name__, error,
                    extra={"kind": kind, "row": row.id},
                )  # fmt: skip
                end = plainer
            else:
                self._wrote()
                return applied, retried

    async def give_back(self, rows: Sequence[Claimed], run_at: int | None = None) -> int | None:
        """Queue `rows`, claimed and not started, again unrun (due when they were, or at
        `run_at`, µs), in one `finish` that a cancel of the caller does not cut short; a failure
        leaves them to their lease (while serve runs, it holds them until then: `Bound`). A
        row due before serve's claims' front makes its next claim a full one. Answers how many
        were queued again (the others had been taken by another worker), or None when the store
        did not take the write."""
        if not rows:
            return 0
        ends = [
            Released(row.id, row.attempts, row.run_at if run_at is None else run_at) for row in rows
        ]
        try:
            applied = await asyncio.shield(self.store.finish(ends))
        except Exception as error:
            if self.group is not None:
                self.failure = f"{type(error).__name__}: {_first_line(error)}"
                for row in rows:
                    self.bound.hold(row.id)
            return None
        # (No wake-up for their due time: this process gave them back, and another may take
        # them first. A row due before serve's front makes its next claim a full one.)
        self.wakeups.front.woken(min(end.run_at for end in ends))
        return sum(applied)

    def later(self, work: Coroutine[Any, Any, object]) -> None:
        """Run `work` in a background task that `settled()` waits for."""
        task = asyncio.get_running_loop().create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def settled(self) -> None:
        """Until the background work started so far has finished."""
        if self.background:
            await asyncio.wait(set(self.background))


@dataclasses.dataclass(frozen=True, slots=True)
class Ending:
    """A run's end on its way to the store and then to `tell`: `end` of `row` (of `kind`);
    `seconds`, how long the run took; `dropped`, a schedule's tick dropped unrun; `error`, the
    failure the end records, attached to its log record; `progress`, the run's last progress
    figure."""

    kind: Kind
    row: Claimed
    end: End
    seconds: float = 0.0
    dropped: bool = False
    error: BaseException | None = None
    progress: int | None = None


def tell(
    observers: Observers,
    wakeups: Wakeups,
    ending: Ending,
    applied: bool | None,
    retried: bool = False,
) -> tuple[State, int, int | None] | None:
    """Tell the observers, the log and serve's wake-ups how `ending` went (`applied`: whether
    it applied, False when the lease was lost, None when it could not be written; `retried`:
    it was written again after a try that got no answer, which may have written it); the
    status the row has now, for the status Space, or None when it has none to record."""
    if applied is None:
        return None
    kind, row, end, seconds = ending.kind, ending.row, ending.end, ending.seconds
    progress = ending.progress
    fields = {"kind": kind.name, "row": row.id, "attempt": row.attempts}
    outcome: Outcome = "lost" if not applied else "dropped" if ending.dropped else _outcome(end)
    observers.ended(kind.name, outcome, _error_of(end), seconds)
    if not applied:
        why = (
            "this attempt's end was not written now: a try whose answer was lost wrote it "
            "already, or the lease ran out and another worker took the row" if retried
            else "the lease ran out and another worker took the row; this attempt's end was "
            "not written"
        )  # fmt: skip
        log.warning(
            "%s row %d: %s", kind.name, row.id, why,
            extra={**fields, "error": LeaseLost.__name__},
        )  # fmt: skip
        return None
    if isinstance(end, Retrying | Released | Snoozed):
        wakeups.wake_at(end.run_at)  # a retry's wait, a row given back, a snooze
    if end.then is not None:
        wakeups.wake_at(end.then.run_at)  # a schedule's next tick
    if isinstance(end, Done):
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s row %d: done on attempt %d in %.1f ms",
                kind.name, row.id, row.attempts, seconds * 1_000,
                extra={**fields, "ms": round(seconds * 1_000, 3)},
            )  # fmt: skip
        return State.DONE, row.attempts, progress
    if isinstance(end, Snoozed):
        snooze_ms = ending.error.ms if isinstance(ending.error, Snooze) else 0
        log.info(
            "%s row %d snoozed for %s s (snooze %d of at most %d)",
            kind.name, row.id, seconds_text(snooze_ms), row.snoozes + 1, kind.snoozes,
            extra={**fields, "wait_ms": snooze_ms, "snoozes": row.snoozes + 1},
        )  # fmt: skip
        return State.QUEUED, row.attempts - 1, None
    if isinstance(end, Retrying):
        error = ending.error
        wait_ms = error.ms if isinstance(error, RetryIn) else kind.retry.wait_ms(row.attempts)
        _log_failure(
            logging.WARNING,
            "%s row %d failed with %s on attempt %d: %s; retrying in %.1f s",
            (kind.name, row.id, printable(end.error), row.attempts, printable(end.detail),
             wait_ms / 1_000),
            {**fields, "error": end.error, "wait_ms": wait_ms},
            ending.error,
            end.traceback,
        )  # fmt: skip
        return State.QUEUED, row.attempts, None
    if isinstance(end, Died):
        _log_failure(
            logging.ERROR,
            "%s row %d failed with %s on attempt %d and is dead: %s",
            (kind.name, row.id, printable(end.error), row.attempts, printable(end.detail)),
            {**fields, "error": end.error},
            ending.error,
            end.traceback,
        )  # fmt: skip
        return State.DEAD, row.attempts, progress
    return State.QUEUED, row.attempts - 1, None


def _log_failure(
    level: int,
    message: str,
    args: tuple[object, ...],
    fields: dict[str, Any],
    error: BaseException | None,
    traceback: str,
) -> None:
    """Log a failed attempt as its row keeps it: the message as given (its parts escaped by the
    caller), and the row's traceback (bounded, escaped, its lines kept) as the record's
    exception text, which a handler prints below the message (or, as JSON, in one field). The
    exception itself stays attached (`exc_info`) for an error tracker to read. The record names
    the caller's line and function, as a record `log.log` made there would."""
    if not log.isEnabledFor(level):
        return
    path, line, function, _stack = log.findCaller(stacklevel=2)
    record = log.makeRecord(
        log.name, level, path, line, message, args, exc_info(error), function, fields
    )
    trace = traceback.rstrip("\n")
    record.exc_text = printable(trace, lines=True) if trace else None
    log.handle(record)


def exc_info(
    error: BaseException | None,
) -> tuple[type[BaseException], BaseException, TracebackType | None] | None:
    """What `logging` takes to attach `error`, from its first frame outside nilo-job."""
    return None if error is None else (type(error), error, user_traceback(error))


def seconds_text(ms: int) -> str:
    """`ms` milliseconds as seconds for a log line: "60", "1.5", "0.05", "3,600"."""
    return f"{ms / 1_000:,.3f}".rstrip("0").rstrip(".")


def _outcome(end: End) -> Outcome:
    if isinstance(end, Done):
        return "done"
    if isinstance(end, Retrying):
        return "retrying"
    if isinstance(end, Snoozed):
        return "snoozed"
    if isinstance(end, Died):
        return "dead"
    return "released"


def _error_of(end: End) -> str | None:
    return end.error if isinstance(end, Retrying | Died) else None
