"""The one clock the queue reads, in microseconds since the Unix epoch.

`now_us()` is the wall clock. `Clock` is the queue's own reading of it: the wall clock, or the
store's clock where the store keeps one shared by several hosts (PostgreSQL), followed as an
offset measured over one round trip. The queue's parts read `Clock.now()`, and nothing below the
public API reads the time by itself; a test's `drain_at(now_us)` hands its number down instead
(every read of the clock inside a tick reads that number).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_us() -> int:
    """The wall clock now, in microseconds since the epoch (int)."""
    return time.time_ns() // 1_000


def datetime_to_us(moment: datetime) -> int:
    """An aware `datetime` as microseconds since the epoch.

    Raises:
        Refusal: `moment` is naive (no tzinfo): its instant is unknown.
    """
    from .errors import Refusal

    if moment.tzinfo is None or moment.utcoffset() is None:
        raise Refusal(
            f"at={moment!r} is a naive datetime, so its instant is unknown: "
            "give it a tzinfo (datetime(..., tzinfo=timezone.utc)) or pass microseconds"
        )
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class Clock:
    """A queue's clock: this host's wall clock plus `offset_us`, the measured distance to the
    store's clock (0 for a store without one of its own).

    `measured_at` is when the offset was last measured (µs, this host's clock), so that serve
    can measure it again now and then rather than at every claim.
    """

    __slots__ = ("measured_at", "offset_us")

    def __init__(self) -> None:
        self.offset_us = 0
        self.measured_at = 0

    def now(self) -> int:
        """The queue's time now, in microseconds since the epoch."""
        return time.time_ns() // 1_000 + self.offset_us

    async def follow(self, store_now_us: Callable[[], Awaitable[int | None]]) -> None:
        """Measure the offset to the store's clock (`store_now_us()`, µs, None when the store has
        no clock of its own) over one round trip, taking its midpoint as the moment it was read.

        Raises:
            StoreUnavailable: the store cannot be reached (the offset is left as it was).
        """
        before = now_us()
        theirs = await store_now_us()
        after = now_us()
        self.measured_at = after
        if theirs is not None:
            self.offset_us = theirs - (before + after) // 2


def utc_text(us: int) -> str:
    """`us` (µs since the epoch) as "2026-12-01 13:05:09 UTC", for a log line or a page."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
