"""Schedules: `job.cron(expr)` and `job.every(ms)`, and what a tick that is late means.

A schedule is a pure function of time: `next(after_us)` is the first tick strictly after a moment.
The queue keeps the next tick as a row (`_worker.ticks`); this module only says when
ticks fall. cron expressions are read by cronsim, which follows classic Vixie cron (what crontab
users compare against) and handles time zones through zoneinfo; the checks here come first so
that a mistake is refused naming its field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Protocol, runtime_checkable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .._base.bounds import POSITIVE_MS, TICK_LAST_US, moment, whole
from .._base.clock import datetime_to_us
from .._base.errors import Refusal

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# name, lowest, highest (day-of-week allows 7 for Sunday, as Vixie cron does)
_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
_ITEM = re.compile(r"^(?P<range>\*|\d+(?:-\d+)?)(?:/(?P<step>\d+))?$")


@runtime_checkable
class Schedule(Protocol):
    """When a scheduled kind's ticks fall. Times are microseconds since the epoch."""

    def next(self, after_us: int) -> int:
        """The first tick strictly after `after_us`."""

    def following(self, due_us: int, now_us: int) -> int:
        """The first tick strictly after `now_us` in the series that holds the tick `due_us`."""


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron schedule: five fields (minute hour day-of-month month day-of-week), UTC unless a
    `tz` is given. Build it with `job.cron(...)`."""

    expr: str
    tz: str | None = None
    _zone: ZoneInfo | timezone = field(default=UTC, repr=False, compare=False)

    def next(self, after_us: int) -> int:
        """The first tick strictly after `after_us` (µs since the epoch).

        Raises:
            Refusal: `after_us` is not a moment from 1970 to the year 9900.
        """
        after_us = moment(after_us, "cron(...).next({})", "after_us", TICK_LAST_US)
        start = (_EPOCH + timedelta(microseconds=after_us)).astimezone(self._zone)
        for tick in CronSim(self.expr, start):
            # In an hour a DST change repeats, a wall time happens twice. A time of day runs
            # once, at the first (the second is the one whose fold=0 reading is another
            # instant); an interval (a wildcard minute or hour, as `0 * * * *` or `*/30 ...`)
            # runs in both, on the real clock, as Vixie cron does.
            if self._interval or tick.replace(fold=0).astimezone(UTC) == tick.astimezone(UTC):
                return datetime_to_us(tick)
        raise AssertionError("unreachable: a cron that can fire fires again")

    @property
    def _interval(self) -> bool:
        minute, hour = self.expr.split()[:2]
        return minute.startswith("*") or hour.startswith("*")

    def following(self, due_us: int, now_us: int) -> int:
        """cron ticks are fixed in time, so this is `next(now_us)`."""
        return self.next(now_us)


@dataclass(frozen=True, slots=True)
class Every:
    """A tick every `ms` milliseconds from when the schedule was seeded. Build it with
    `job.every(...)`."""

    ms: int

    def next(self, after_us: int) -> int:
        """`after_us + ms`: the first tick of a series seeded at `after_us`.

        Raises:
            Refusal: `after_us` is not a moment from 1970 to the year 9900.
        """
        return moment(after_us, "every(...).next({})", "after_us", TICK_LAST_US) + self.ms * 1_000

    def following(self, due_us: int, now_us: int) -> int:
        """The first tick after `now_us` on the grid `due_us + k·ms`: lateness never moves it."""
        step = self.ms * 1_000
        if now_us < due_us:
            return due_us + step
        return due_us + ((now_us - due_us) // step + 1) * step


def cron(expr: str, *, tz: str | None = None) -> Cron:
    """A schedule from a five-field cron expression: `minute hour day-of-month month day-of-week`.

    Classic Vixie cron rules: lists (`1,15`), ranges (`1-5`), steps (`*/15`, `1-10/2` is
    1,3,5,7,9, counted from the range's start), names (`JAN`, `MON`); 0 and 7 are Sunday, also at
    the end of a range (`5-7`); when both day-of-month and day-of-week are restricted a day
    matches when either does. A step larger than its field is allowed and fires at the start only
    (`*/90` in minutes is minute 0). UTC unless `tz` names a zoneinfo zone; a tick in an hour a
    DST change skips runs once at the next valid time, and one in a repeated hour runs once.

    Raises:
        Refusal: not five fields, a value out of its field's range, a backwards range, a zero
            step, an unknown time zone, or an expression that can never fire (30 February); the
            message names the field.
    """
    if not isinstance(expr, str):
        raise Refusal(f"job.cron({expr!r}) takes the expression as a str, like '0 3 * * *'")
    parts = expr.split()
    if len(parts) != 5:
        raise Refusal(
            f"job.cron({expr!r}) has {len(parts)} fields; write five: minute hour "
            "day-of-month month day-of-week (no seconds, no year)"
        )
    for text, (name, low, high) in zip(parts, _FIELDS, strict=True):
        _check_field(expr, name, text, low, high)
    zone: ZoneInfo | timezone = UTC
    if tz is not None:
        if not isinstance(tz, str):
            raise Refusal(
                f"job.cron({expr!r}, tz={tz!r}): a zoneinfo name as a str, like 'Europe/Berlin'"
            )
        try:
            zone = ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise Refusal(
                f"job.cron({expr!r}, tz={tz!r}): no such time zone; use a zoneinfo name like "
                "'Europe/Berlin' or 'Asia/Jakarta'"
            ) from None
    try:
        it = CronSim(expr, datetime(2000, 1, 1, tzinfo=zone))
        next(it)
    except CronSimError as error:
        field_name = str(error).removeprefix("Bad ").strip()
        raise Refusal(
            f"job.cron({expr!r}): the {field_name} field cannot be read, or can never match "
            "(30 February, 31 April): fix it"
        ) from None
    return Cron(expr, tz, zone)


def every(ms: int) -> Every:
    """A schedule that ticks every `ms` milliseconds, first `ms` after it is seeded.

    Raises:
        Refusal: `ms` is not an int from 1 to ten years of milliseconds.
    """
    return Every(whole(ms, POSITIVE_MS, "job.every({})", "ms"))


def _check_field(expr: str, name: str, text: str, low: int, high: int) -> None:
    for item in text.split(","):
        match = _ITEM.match(item)
        if match is None:
            if re.fullmatch(r"[A-Za-z]{3}(-[A-Za-z]{3})?(/\d+)?|[\dLW#?]+|L", item):
                continue  # names and cronsim's extensions: cronsim checks them
            raise Refusal(f"job.cron({expr!r}): the {name} field {text!r} is not a cron field")
        if match["step"] is not None and int(match["step"]) == 0:
            raise Refusal(f"job.cron({expr!r}): the {name} field {text!r} has a step of 0")
        if match["range"] == "*":
            continue
        bounds = [int(n) for n in match["range"].split("-")]
        for value in bounds:
            if not low <= value <= high:
                raise Refusal(
                    f"job.cron({expr!r}): {value} is out of range for the {name} field "
                    f"({low}-{high})"
                )
        if len(bounds) == 2 and bounds[0] > bounds[1]:
            raise Refusal(
                f"job.cron({expr!r}): the {name} range {match['range']} runs backwards; write "
                f"{bounds[1]}-{bounds[0]}"
            )
