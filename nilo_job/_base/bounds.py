"""The numbers every store can hold, and the one check every call and setting makes of a number.

Every store keeps a time, an id and a count as a 64-bit integer (SQLite's INTEGER, PostgreSQL's
bigint), and a row's attempts as a 32-bit one (PostgreSQL's integer). Times are microseconds
since the epoch and durations milliseconds, as their names say.

    a moment (`at`, `drain_at`, `seed_at`, ...)   1970-01-01 to 9000-01-01 UTC, in µs
    a duration (`after_ms`, `timeout_ms`, ...)    at most ten years, in ms
    a row id                                     1 to 2**63 - 1
    `Retry(times=...)`                           0 to 2**31 - 2 (attempts are times + 1)
    a kind's `snoozes`                           0 to 2**31 - 2
    a store's `max_payload`                      1 to 1,000,000,000 bytes

The latest moment leaves room: everything the queue derives from a moment (a lease, a retry's
wait, a schedule's next tick, each at most ten years on) is still a date Python's `datetime`,
and so the command line and the dashboard, can show (its last is 9999-12-31).

`whole`, `seconds`, `moment`, `due`, `row_id` and `row_ids` are the checks. Each answers the
value, or raises a `Refusal` that says what was given, why it cannot be (a bool, NaN, a fraction,
below or past its range) and the range, before anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeGuard

from .errors import Refusal, is_int

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""A 64-bit integer's range: SQLite's INTEGER, PostgreSQL's bigint."""

INT32_MAX = 2**31 - 1
"""The largest 32-bit integer: PostgreSQL's integer (a row's attempts)."""

MOST_MS = 10 * 365 * 86_400_000
"""The longest duration a call or a setting takes, in milliseconds: ten years (a delay, a
timeout, a retry's wait, a schedule's period, a poll, a retention, a grace period)."""

FIRST_US = 0
"""The earliest moment a call takes: 1970-01-01 00:00 UTC, in µs since the epoch."""

LAST_US = 221_845_392_000_000_000
"""The latest moment a call takes: 9000-01-01 00:00 UTC, in µs since the epoch."""

TICK_LAST_US = 250_246_627_200_000_000
"""The latest moment a schedule's `next(after_us)` takes: 9900-01-01 00:00 UTC. Later than
`LAST_US`, since a schedule's tick the queue derived from a moment (ten years on, or a rare
cron's decades) must still have a next."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Span:
    """The ints a number may be: from `least` to `most`, both included. `what` says what the
    number is ("whole milliseconds"), `note` why its bounds are what they are ("ten years")."""

    least: int
    most: int
    what: str
    note: str = ""

    def words(self) -> str:
        """The range in words: "whole milliseconds from 0 to 315,360,000,000 (ten years)"."""
        note = f" ({self.note})" if self.note else ""
        return f"{self.what} from {self.least:,} to {self.most:,}{note}"


MS = Span(0, MOST_MS, "whole milliseconds", "ten years")
"""A duration that may be 0: a delay, a retry's fixed wait, a retention, a grace period."""

POSITIVE_MS = Span(1, MOST_MS, "whole milliseconds", "ten years")
"""A duration that must pass: a timeout, a poll, a schedule's period, a backoff's step."""

ROW_ID = Span(1, INT64_MAX, "an int", "the id push returned, 64-bit in every store")
"""A row id."""

ROWS = Span(0, INT64_MAX, "a count of rows", "64-bit in every store")
"""How many rows at most (`at_most`)."""

RETRIES = Span(0, INT32_MAX - 1, "a count of retries", "a row's attempts, times + 1, are a "
               "32-bit integer in PostgreSQL")  # fmt: skip
"""`Retry(times=...)`."""

SNOOZES = Span(0, INT32_MAX - 1, "a count of snoozes", "a row's snoozes are a 32-bit integer in "
               "PostgreSQL")  # fmt: skip
"""A kind's `snoozes`: how many times one row may snooze before a snooze counts as an attempt."""

WORKERS = Span(1, 100_000, "a count of runs at once", "each is a task of this process")
"""`job.Jobs(workers=...)`, `nilo-job worker --workers`."""

FIGURE = Span(INT64_MIN, INT64_MAX, "an int", "64-bit")
"""A run's progress figure."""

PAYLOAD_BYTES = Span(
    1, 1_000_000_000, "a positive number of bytes", "the longest text SQLite keeps"
)
"""A store's `max_payload`: the largest JSON one row may carry, in bytes. PostgreSQL keeps up to
1 GiB in a value, SQLite 1,000,000,000 bytes by default."""


def whole(value: object, span: Span, said: str, name: str) -> int:
    """`value`, an int (not a bool) within `span`.

    `said` is how the caller wrote it, with `{}` where the value goes (`"push(after_ms={})"`,
    `"Slow.timeout_ms = {}"`); `name` is the argument's name.

    Raises:
        Refusal: `value` is not an int, or is out of `span`; the sentence names `said`, why, and
            the range.
    """
    if is_int(value, span.least, span.most):
        return value
    raise Refusal(
        f"{said.format(_shown(value))} {_why(value, span)}: {name} must be {span.words()}"
    )


def seconds(value: object, said: str, name: str) -> float:
    """`value`, a number of seconds (an int or a finite float, not a bool) above 0 and at most
    ten years.

    Raises:
        Refusal: `value` is not such a number.
    """
    most_s = MOST_MS // 1_000
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= most_s:
        return float(value)  # NaN compares False above, so it is refused
    span = Span(0, most_s, "a number of seconds")
    why = "is not above 0" if _real(value) and value <= 0 else _why(value, span, real=True)
    raise Refusal(
        f"{said.format(_shown(value))} {why}: {name} must be a positive number of seconds, at "
        f"most {most_s:,} (ten years)"
    )


def moment(value: object, said: str, name: str, last: int = LAST_US) -> int:
    """`value`, µs since the epoch (an int) or an aware `datetime`, as µs from `FIRST_US` to
    `last` (`LAST_US` unless said).

    Raises:
        Refusal: `value` is neither, a naive datetime (its instant is unknown), or a moment
            outside the range; the sentence names the date it would be.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise Refusal(
                f"{said.format(_shown(value))} is a naive datetime, so its instant is unknown: "
                "give it a tzinfo (datetime(..., tzinfo=timezone.utc)) or pass microseconds"
            )
        delta = value - _EPOCH
        us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        shown = value.isoformat()
    elif is_int(value):
        us, shown = value, _shown(value)
    else:
        why = _why(value, _MOMENTS)
        raise Refusal(f"{said.format(_shown(value))} {why}: {_moment_words(name, last)}")
    if us < FIRST_US:
        raise Refusal(
            f"{said.format(shown)} is {date_text(us)}, before the epoch: "
            f"{_moment_words(name, last)}"
        )
    if us > last:
        raise Refusal(
            f"{said.format(shown)} is {date_text(us)}, past what a store can hold: "
            f"{_moment_words(name, last)}"
        )
    return us


def due(now_us: int, after_ms: object, said: str) -> int:
    """The moment `after_ms` milliseconds after `now_us` (µs).

    Raises:
        Refusal: `after_ms` is not a duration (`MS`), or the moment it makes is past `LAST_US`.
    """
    delay = whole(after_ms, MS, said, "after_ms")
    at = now_us + delay * 1_000
    if at > LAST_US:
        raise Refusal(
            f"{said.format(repr(after_ms))} from now ({date_text(now_us)}) is {date_text(at)}, "
            f"past what a store can hold: the latest moment is {date_text(LAST_US)}"
        )
    return at


def row_id(value: object, said: str) -> int:
    """`value`, a row id (`ROW_ID`).

    Raises:
        Refusal: it is not an int from 1 to 2**63 - 1.
    """
    return whole(value, ROW_ID, said, "row_id")


def row_ids(values: object, said: str) -> tuple[int, ...]:
    """`values`, a list or tuple of row ids, as a tuple.

    Raises:
        Refusal: `values` is not a sequence (a str is not), or an id is not a row id (`ROW_ID`).
    """
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise Refusal(f"{said.format(_shown(values))} takes a list of row ids")
    each = said.format("[..., {}, ...]")
    return tuple(whole(value, ROW_ID, each, "a row id") for value in values)


def date_text(us: int) -> str:
    """`us` (µs since the epoch) as "9000-01-01 00:00:00 UTC" (with its microseconds when it has
    any), or "after 9999-12-31" / "before 0001-01-01" past what a `datetime` can be."""
    try:
        moment = _EPOCH + timedelta(microseconds=us)
    except OverflowError:
        return "after 9999-12-31" if us > 0 else "before 0001-01-01"
    text = f"{moment.year:04d}-" + moment.strftime("%m-%d %H:%M:%S")
    return f"{text}.{moment.microsecond:06d} UTC" if moment.microsecond else f"{text} UTC"


_MOMENTS = Span(FIRST_US, LAST_US, "µs since the epoch")


def _moment_words(name: str, last: int) -> str:
    day = date_text(last).removesuffix(" 00:00:00 UTC")
    return (
        f"{name} must be µs since the epoch (an int) or an aware datetime, from 1970-01-01 "
        f"({FIRST_US}) to {day} ({last:,})"
    )


def _shown(value: object) -> str:
    """`value` as the caller would write it, cut short past 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _real(value: object) -> TypeGuard[int | float]:
    """Whether `value` is a finite int or float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _why(value: object, span: Span, *, real: bool = False) -> str:
    """Why `value` is not in `span`, as the end of "push(after_ms=1.5) …"."""
    if isinstance(value, bool):
        return "is a bool, not a number"
    if isinstance(value, float):
        if math.isnan(value):
            return "is not a number"
        if math.isinf(value):
            return "is not a finite number"
        if not real:
            return "is not a whole number" if not value.is_integer() else "is a float, not an int"
    if not isinstance(value, int | float):
        return f"is a {type(value).__name__}, not a number"
    if value < span.least:
        return f"is below {span.least:,}"
    return f"is more than {span.most:,}"
