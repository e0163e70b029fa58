"""Pure decisions: how a run ends, from the kind, the claim, the outcome and the clock.

No I/O and no clock of its own: `now_us` is handed in, so a test's `drain_at` number decides
backoff exactly as the wall clock does in production (STYLE: decide without I/O, then write once).
"""

from __future__ import annotations

from ._errors import TimedOut
from ._kinds import Kind
from .store.contract import Claimed, Died, Done, End, Retrying

DETAIL_CHARS = 2_000
"""How much of an error's message a row keeps for operators."""


def is_last(kind: Kind, attempts: int) -> bool:
    """Whether attempt number `attempts` is the last the kind's retry allows (seed: `tick.last`)."""
    return attempts >= kind.retry.attempts


def decide(kind: Kind, row: Claimed, error: BaseException | None, now_us: int) -> End:
    """The end of one run of `row`: done, a retry at a time, or dead with the error's name.

    A failure is dead when it is in the kind's `final` (never a `TimedOut`) or when no retry is
    left; otherwise the next attempt is due `kind.retry.wait_ms(attempts)` after `now_us`, the
    moment the attempt failed on the tick's clock.
    """
    if error is None:
        return Done(row.id, row.attempts)
    name = type(error).__name__
    detail = str(error)[:DETAIL_CHARS]
    if is_last(kind, row.attempts) or (kind.is_final(error) and not isinstance(error, TimedOut)):
        return Died(row.id, row.attempts, now_us, name, detail)
    wait_ms = kind.retry.wait_ms(row.attempts)
    return Retrying(row.id, row.attempts, now_us + wait_ms * 1_000, name, detail)
