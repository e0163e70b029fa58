"""Spaces: small caches with a time to live, for `status`, `progress` and `within`.

A Space is a cache that may forget, on purpose. `MemorySpace` lives in this
process; `RedisSpace` (`job.RedisSpace`) is shared between processes. Both satisfy the
`Space` protocol below, and a third is four coroutines.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from ._errors import Refusal


@runtime_checkable
class Space(Protocol):
    """Keys (str) to values (bytes), each remembered for the Space's own time to live."""

    async def get(self, key: str) -> bytes | None:
        """The value under `key`, or None once forgotten or never put."""

    async def put(self, key: str, value: bytes) -> None:
        """Remember `value` under `key` for the time to live, replacing what was there."""

    async def add(self, key: str, value: bytes) -> bool:
        """Remember `value` under `key` only if nothing is there; True if it was added."""

    async def delete(self, key: str) -> None:
        """Forget `key`."""


class MemorySpace:
    """A Space in this process: a dict with a time to live, and a bound on its size.

    Args:
        ttl_s: how long, in seconds, a key is remembered after it was put.
        max_keys: the most keys held; past it the oldest is forgotten first.
        clock: seconds on a monotonic clock; a test may hand in its own.

    Raises:
        Refusal: `ttl_s` or `max_keys` is not positive.
    """

    def __init__(
        self,
        *,
        ttl_s: float,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or ttl_s <= 0:
            raise Refusal(f"MemorySpace(ttl_s={ttl_s!r}) takes a positive number of seconds")
        if isinstance(max_keys, bool) or not isinstance(max_keys, int) or max_keys <= 0:
            raise Refusal(f"MemorySpace(max_keys={max_keys!r}) takes a positive int")
        self.ttl_s = float(ttl_s)
        self.max_keys = max_keys
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"job.MemorySpace(ttl_s={self.ttl_s:g})"

    def _live(self, key: str, now: float) -> bytes | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item[0] <= now:
            del self._items[key]
            return None
        return item[1]

    def _set(self, key: str, value: bytes, now: float) -> None:
        self._items[key] = (now + self.ttl_s, value)
        self._items.move_to_end(key)
        while len(self._items) > self.max_keys:
            self._items.popitem(last=False)

    async def get(self, key: str) -> bytes | None:
        with self._lock:
            return self._live(key, self._clock())

    async def put(self, key: str, value: bytes) -> None:
        with self._lock:
            self._set(key, value, self._clock())

    async def add(self, key: str, value: bytes) -> bool:
        with self._lock:
            now = self._clock()
            if self._live(key, now) is not None:
                return False
            self._set(key, value, now)
            return True

    async def delete(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)
