"""Pure decisions: how a run ends, from the kind, the claim, the outcome and the clock.

No I/O and no clock of its own: `now_us` is handed in, so a test's `drain_at` number decides
backoff exactly as the wall clock does in production. The decision is a value; one store call
writes it (`_ends`).
"""

from __future__ import annotations

from ._errors import TimedOut
from ._failure import describe
from ._kinds import Kind
from .store.contract import Claimed, Died, Done, End, NewRow, Retrying


def is_last(kind: Kind, attempts: int) -> bool:
    """Whether attempt number `attempts` is the last the kind's retry allows (`tick.last`)."""
    return attempts >= kind.retry.attempts


def decide(
    kind: Kind,
    row: Claimed,
    error: BaseException | None,
    now_us: int,
    then: NewRow | None = None,
    *,
    keep: bool = False,
    started_us: int | None = None,
    result: bytes | None = None,
) -> End:
    """The end of one run of `row`: done, a retry at a time, or dead with the error's name.

    A done row is kept as history when `keep` (the queue's retention is on), finished at
    `now_us`, started at `started_us`, with the JSON bytes of what its run returned (`result`).

    The failure's name, message and traceback are kept as text every store can hold
    (`_failure.describe`). A failure is dead when it is in the kind's `final` (never a
    `TimedOut`) or when no retry is left; otherwise the next attempt is due
    `kind.retry.wait_ms(attempts)` after `now_us`, the moment the attempt failed on the tick's
    clock. `then` is a schedule's next tick, handed on
    with this end: a retried tick then gives up its key and is retried as a row of its own.
    """
    if error is None:
        if keep:
            return Done(row.id, row.attempts, then, now_us, started_us, result)
        return Done(row.id, row.attempts, then)
    failure = describe(error)
    name, message, trace = failure.name, failure.message, failure.traceback
    if is_last(kind, row.attempts) or (kind.is_final(error) and not isinstance(error, TimedOut)):
        return Died(row.id, row.attempts, now_us, name, message, then, trace)
    wait_ms = kind.retry.wait_ms(row.attempts)
    run_at = now_us + wait_ms * 1_000
    return Retrying(row.id, row.attempts, run_at, name, message, then is not None, then, trace)


def tick_is_missed(kind: Kind, due_us: int, now_us: int) -> bool:
    """Whether a schedule's tick due at `due_us` is later than its own successor at `now_us`.

    Such a tick is a missed one: `Missed.DROP` forgets it, `Missed.CATCH_UP` runs it
    once; a tick that is merely late (its successor still ahead) runs either way.
    """
    assert kind.schedule is not None
    return kind.schedule.next(due_us) <= now_us


def tick_after_skipped(kind: Kind, due_us: int, now_us: int) -> int:
    """When the tick after a skipped one (due at `due_us`, cancelled at `now_us`) falls: the
    schedule's next after it, or, when that one is past too, the first after `now_us`."""
    assert kind.schedule is not None
    run_at = kind.schedule.next(due_us)
    return run_at if run_at > now_us else next_tick_at(kind, due_us, now_us)


def next_tick_at(kind: Kind, due_us: int, now_us: int) -> int:
    """When the tick after the one due at `due_us` falls, seen from `now_us`: the first tick of
    the schedule strictly after `now_us` (on `every`'s grid, so lateness never accumulates)."""
    assert kind.schedule is not None
    return kind.schedule.following(due_us, now_us)
