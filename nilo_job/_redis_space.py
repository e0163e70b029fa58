"""`job.RedisSpace`: a status Space shared by processes, on Redis (redis-py asyncio).

A web process polls `jobs.status(id)` while a worker process writes it: both name the same Redis
and the same `name`. Like every Space it may forget (keys expire after `ttl_s`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import Refusal

if TYPE_CHECKING:
    from redis.asyncio import Redis


class RedisSpace:
    """A Space on Redis: `name:key` strings with a time to live.

    Args:
        client: a `redis.asyncio.Redis` of yours.
        name: the prefix that keeps this Space's keys apart from the rest of the database.
        ttl_s: how long, in seconds, a key is remembered after it was put.

    Raises:
        Refusal: `client` is not an asyncio Redis client, or `ttl_s` is not positive.
    """

    def __init__(self, client: Redis | Any, *, name: str, ttl_s: int) -> None:
        from redis.asyncio import Redis

        if not isinstance(client, Redis):
            raise Refusal(
                f"RedisSpace({client!r}): pass a redis.asyncio.Redis client (redis-py's asyncio "
                "API), e.g. redis.asyncio.Redis.from_url('redis://localhost:6379/0')"
            )
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s <= 0:
            raise Refusal(f"RedisSpace(ttl_s={ttl_s!r}) takes a positive whole number of seconds")
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
