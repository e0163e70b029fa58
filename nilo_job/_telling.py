"""Telling how a row's end went, once it was written: the observers, the log (a lease lost, a
retry, a death, a done row at DEBUG), serve's wake-ups (a retry's wait, a row given back, a
schedule's next tick), and the status the row has now."""

from __future__ import annotations

import dataclasses
import logging
from types import TracebackType

from ._errors import LeaseLost
from ._failure import user_traceback
from ._kinds import Kind
from ._observe import Observers, Outcome
from ._values import State
from ._wakeups import Wakeups
from .store.contract import Claimed, Died, Done, End, Released, Retrying

log = logging.getLogger("nilo_job")


@dataclasses.dataclass(frozen=True, slots=True)
class Ending:
    """A run's end on its way to the store and then to `tell`: `end` of `row` (of `kind`);
    `seconds`, how long the run took; `dropped`, a schedule's tick dropped unrun; `error`, the
    failure the end records, for the log's traceback."""

    kind: Kind
    row: Claimed
    end: End
    seconds: float = 0.0
    dropped: bool = False
    error: BaseException | None = None


def tell(
    observers: Observers,
    wakeups: Wakeups,
    ending: Ending,
    applied: bool | None,
    progress: int | None,
) -> tuple[State, int, int | None] | None:
    """Tell the observers, the log and serve's wake-ups how `ending` went (`applied`: whether
    it applied, False when the lease was lost, None when it could not be written; `progress`:
    the run's last progress figure); the status the row has now, for the status Space, or None
    when it has none to record."""
    if applied is None:
        return None
    kind, row, end, seconds = ending.kind, ending.row, ending.end, ending.seconds
    fields = {"kind": kind.name, "row": row.id, "attempt": row.attempts}
    outcome: Outcome = "lost" if not applied else "dropped" if ending.dropped else _outcome(end)
    observers.ended(kind.name, outcome, _error_of(end), seconds)
    if not applied:
        log.warning(
            "%s row %d: the lease ran out and another worker took the row; this attempt's "
            "end was not written",
            kind.name, row.id, extra={**fields, "error": LeaseLost.__name__},
        )  # fmt: skip
        return None
    if isinstance(end, Retrying | Released):
        wakeups.wake_at(end.run_at)  # a retry's wait, or a row given back
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
    if isinstance(end, Retrying):
        wait_ms = kind.retry.wait_ms(row.attempts)
        log.warning(
            "%s row %d failed with %s on attempt %d: %s; retrying in %.1f s",
            kind.name, row.id, end.error, row.attempts, end.detail, wait_ms / 1_000,
            extra={**fields, "error": end.error, "wait_ms": wait_ms},
            exc_info=exc_info(ending.error),
        )  # fmt: skip
        return State.QUEUED, row.attempts, None
    if isinstance(end, Died):
        log.error(
            "%s row %d failed with %s on attempt %d and is dead: %s",
            kind.name, row.id, end.error, row.attempts, end.detail,
            extra={**fields, "error": end.error},
            exc_info=exc_info(ending.error),
        )  # fmt: skip
        return State.DEAD, row.attempts, progress
    return State.QUEUED, row.attempts - 1, None


def exc_info(
    error: BaseException | None,
) -> tuple[type[BaseException], BaseException, TracebackType | None] | None:
    """What `logging` takes to print `error` with its traceback."""
    return None if error is None else (type(error), error, user_traceback(error))


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
