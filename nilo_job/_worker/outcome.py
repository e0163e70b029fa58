"""A failure as the row keeps it: the exception's name, its message and its traceback, as text
every store can hold.

A failed attempt is recorded whatever its exception holds. Text a store cannot keep (a NUL
character, which PostgreSQL refuses in text; a lone surrogate, which is not UTF-8, as in
`os.fsdecode(b"caf\\xe9.txt")`) is escaped (`\\x00`, `\\udce9`) and the text says so at its end,
so that no end is ever refused by the store and no row runs again for want of one. Each part is
bounded: the name to 200 characters, the message to 2,000, the traceback to 10,000 (its first
and last lines, where the call and the raise are).
"""

from __future__ import annotations

import dataclasses
import os
import traceback as _traceback
from dataclasses import dataclass
from types import TracebackType

from .._base.errors import TimedOut
from .._base.values import RetryIn, Snooze
from .._kinds.kind import Kind
from ..store.contract import INT64_MAX, Claimed, Died, Done, End, NewRow, Retrying, Snoozed

NAME_CHARS = 200
MESSAGE_CHARS = 2_000
TRACEBACK_CHARS = 10_000
ESCAPED = " [nilo-job: characters no store can keep were escaped]"
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # nilo_job/


def user_traceback(error: BaseException) -> TracebackType | None:
    """`error`'s traceback from the first frame that is not nilo-job's own (the frames that
    called `run` say nothing about the failure); the whole of it when every frame is ours (a
    timeout, raised by the queue itself)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OURS):
        tb = tb.tb_next
    return error.__traceback__ if tb is None else tb


@dataclass(frozen=True, slots=True)
class Failure:
    """What a row keeps of one failed attempt: `name` (the exception's class name), `message`
    (its `str`) and `traceback` (as Python prints it)."""

    name: str
    message: str
    traceback: str


def storable(text: str, most: int) -> str:
    """`text` cut to `most` characters, with what no store can keep escaped and said so."""
    if len(text) > most:
        text = text[: most - 1] + "…"
    if "\x00" not in text and text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        clean = text.encode("utf-8", "backslashreplace").decode("utf-8")
    else:
        clean = text
    clean = clean.replace("\x00", "\\x00")
    return clean if clean == text else clean + ESCAPED


def in_ascii(text: str) -> str:
    """`text` in printable ASCII: every other character escaped (`\xe9`, `\x00`)."""
    return text.encode("ascii", "backslashreplace").decode().replace("\x00", "\\x00")


def describe(error: BaseException) -> Failure:
    """The failure `error` is, as storable text; never raises, whatever the exception does."""
    name = storable(type(error).__name__, NAME_CHARS)
    try:
        message = str(error)
    except Exception:
        message = f"<{type(error).__name__}: its message could not be read>"
    try:
        lines = _traceback.format_exception(type(error), error, user_traceback(error))
    except Exception:
        lines = [f"{name}: <its traceback could not be read>\n"]
    text = "".join(lines)
    if len(text) > TRACEBACK_CHARS:
        head, tail = TRACEBACK_CHARS // 5, TRACEBACK_CHARS - TRACEBACK_CHARS // 5 - 60
        cut = len(text) - head - tail
        text = f"{text[:head]}\n… ({cut:,} characters cut) …\n{text[-tail:]}"
    return Failure(
        name,
        storable(message, MESSAGE_CHARS),
        storable(text, TRACEBACK_CHARS + len(ESCAPED)),
    )


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
    """The end of one run of `row`, as `end_of` decides it; for a row taken back after its
    lease ran out, with the worker that lost it (`End.lost_from`)."""
    end = end_of(kind, row, error, now_us, then, keep=keep, started_us=started_us, result=result)
    if row.retaken_from is None:
        return end
    return dataclasses.replace(end, lost_from=row.retaken_from)


def end_of(
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
    """The end of one run of `row`: done, a retry at a time, dead with the error's name, or
    snoozed.

    Every end records its attempt, ended at `now_us` (`ended_at`). A done row is kept as
    history when `keep` (the queue's retention is on), finished at
    `now_us`, started at `started_us`, with the JSON bytes of what its run returned (`result`).

    The failure's name, message and traceback are kept as text every store can hold
    (`describe`). A failure is dead when it is in the kind's `final` (never a
    `TimedOut`) or when no retry is left; otherwise the next attempt is due
    `kind.retry.wait_ms(attempts)` after `now_us`, the moment the attempt failed on the tick's
    clock. `then` is a schedule's next tick, handed on
    with this end: a retried tick then gives up its key and is retried as a row of its own.

    A `Snooze` is no failure: the row is queued again `ms` after `now_us`, its attempt
    uncounted (`Snoozed`), unless it has snoozed `kind.snoozes` times already; that snooze is a
    failed attempt named `Snooze` (`over_snoozes`). A `RetryIn` is a failure whose next attempt
    is due `ms` after `now_us` instead of after the backoff; raised `from` an error, that error
    is the failure recorded (its name, message and traceback), and the one `final` is asked
    about.
    """
    if error is None:
        if keep:
            return Done(row.id, row.attempts, then, now_us, started_us, result, now_us)
        return Done(row.id, row.attempts, then, ended_at=now_us)
    if isinstance(error, Snooze) and row.snoozes < kind.snoozes:
        run_at = min(now_us + error.ms * 1_000, INT64_MAX)
        return Snoozed(row.id, row.attempts, run_at, then is not None, then, now_us)
    failure = describe(error)
    name, message, trace = failure.name, failure.message, failure.traceback
    cause = error
    if isinstance(error, Snooze):
        message = over_snoozes(row.snoozes, kind.snoozes)
    elif isinstance(error, RetryIn) and error.__cause__ is not None:
        cause = error.__cause__
        told = describe(cause)
        name, message, trace = told.name, told.message, told.traceback
    if is_last(kind, row.attempts) or (kind.is_final(cause) and not isinstance(cause, TimedOut)):
        return Died(row.id, row.attempts, now_us, name, message, then, trace, now_us)
    wait_ms = error.ms if isinstance(error, RetryIn) else kind.retry.wait_ms(row.attempts)
    run_at = min(now_us + wait_ms * 1_000, INT64_MAX)  # a time every store can keep
    return Retrying(
        row.id, row.attempts, run_at, name, message, then is not None, then, trace, now_us
    )


def over_snoozes(snoozes: int, most: int) -> str:
    """The message a snooze past the kind's most records, as a failed attempt named `Snooze`:
    "snoozed 100 times, the kind's most (snoozes = 100): counted as a failed attempt"."""
    times = "time" if snoozes == 1 else "times"
    return (
        f"snoozed {snoozes:,} {times}, the kind's most (snoozes = {most:,}): counted as a "
        "failed attempt"
    )


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
