"""Spaces: small caches with a time to live, for `status`, `progress` and `within`.

A Space is a cache that may forget, on purpose. `MemorySpace` lives in this
process; `RedisSpace` (`job.RedisSpace`) is shared between processes. Both satisfy the
`Space` protocol below, and a third is four coroutines.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from .bounds import MOST_MS, Span, seconds, whole
from .errors import Refusal, is_int
from .values import State, Status

TTL_S = Span(1, MOST_MS // 1_000, "whole seconds", "ten years")
"""A `RedisSpace`'s time to live."""


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
        self.ttl_s = seconds(ttl_s, "MemorySpace(ttl_s={})", "ttl_s")
        if not is_int(max_keys, 1):
            raise Refusal(f"MemorySpace(max_keys={max_keys!r}) takes a positive int")
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


if TYPE_CHECKING:
    from redis.asyncio import Redis


class RedisSpace:
    """A Space on Redis: `name:key` strings with a time to live.

    Args:
        client: a `redis.asyncio.Redis` of yours.
        name: the prefix that keeps this Space's keys apart from the rest of the database.
        ttl_s: how long, in seconds, a key is remembered after it was put.

    Raises:
        Refusal: `client` is not an asyncio Redis client, or `ttl_s` is not whole seconds from 1
            to ten years.
    """

    def __init__(self, client: Redis | Any, *, name: str, ttl_s: int) -> None:
        from redis.asyncio import Redis

        if not isinstance(client, Redis):
            raise Refusal(
                f"RedisSpace({client!r}): pass a redis.asyncio.Redis client (redis-py's asyncio "
                "API), e.g. redis.asyncio.Redis.from_url('redis://localhost:6379/0')"
            )
        whole(ttl_s, TTL_S, "RedisSpace(ttl_s={})", "ttl_s")
        if not isinstance(name, str) or not name:
            raise Refusal(f"RedisSpace(name={name!r}) takes a non-empty str prefix")
        self.client = client
        self.name = name
        self.ttl_s = ttl_s

    def __repr__(self) -> str:
        return f"job.RedisSpace(name={self.name!r}, ttl_s={self.ttl_s})"

    def _key(self, key: str) -> str:
        return f"{self.name}:{key}"

    async def get(self, key: str) -> bytes | None:
        value = await self.client.get(self._key(key))
        if value is None:
            return None
        return value if isinstance(value, bytes) else str(value).encode()

    async def put(self, key: str, value: bytes) -> None:
        await self.client.set(self._key(key), value, ex=self.ttl_s)

    async def add(self, key: str, value: bytes) -> bool:
        return bool(await self.client.set(self._key(key), value, ex=self.ttl_s, nx=True))

    async def delete(self, key: str) -> None:
        await self.client.delete(self._key(key))


log = logging.getLogger("nilo_job")

_ENCODE = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder(Status)


def status_key(row_id: int) -> str:
    """The Space key of row `row_id`'s status."""
    return f"nilo_job:status:{row_id}"


class Statuses:
    """Rows' statuses in `space` (None: the queue keeps none)."""

    __slots__ = ("space",)

    def __init__(self, space: Space | None) -> None:
        self.space = space

    async def put(
        self, row_id: int, state: State, attempts: int, progress: int | None = None
    ) -> None:
        """Record a row's state; a failure is logged, never raised."""
        if self.space is None:
            return
        status = Status(state, attempts, progress)
        try:
            await self.space.put(status_key(row_id), _ENCODE.encode(status))
        except Exception as error:
            log.warning(
                "row %d: its status (%s) could not be recorded in %r: %s",
                row_id, state.value, self.space, error, extra={"row": row_id},
            )  # fmt: skip

    async def get(self, row_id: int) -> Status | None:
        """What the Space remembers of the row, or None.

        Raises:
            Exception: whatever the Space raises when it cannot be read.
        """
        if self.space is None:
            return None
        data = await self.space.get(status_key(row_id))
        return None if data is None else _DECODE.decode(data)

    async def forget(self, row_id: int) -> None:
        """Forget the row (it was cancelled)."""
        if self.space is not None:
            await self.space.delete(status_key(row_id))
