"""The one wall clock the library reads, in microseconds since the Unix epoch.

Nothing below the public API calls the time itself: the queue reads `now_us()` once per claim,
push or drain, and hands the number down (seed: "every read of the clock inside a tick ... reads
that number").
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_us() -> int:
    """The wall clock now, in microseconds since the epoch (int)."""
    return time.time_ns() // 1_000


def datetime_to_us(moment: datetime) -> int:
    """An aware `datetime` as microseconds since the epoch.

    Raises:
        Refusal: `moment` is naive (no tzinfo): its instant is unknown.
    """
    from ._errors import Refusal

    if moment.tzinfo is None or moment.utcoffset() is None:
        raise Refusal(
            f"at={moment!r} is a naive datetime, so its instant is unknown: "
            "give it a tzinfo (datetime(..., tzinfo=timezone.utc)) or pass microseconds"
        )
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
