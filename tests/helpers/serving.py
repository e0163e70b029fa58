"""Helpers shared by the tests of serve: waiting for its workers to be idle, for a condition, or
for its PostgreSQL listener, and a status Space that fails on demand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nilo_job as job

T = TypeVar("T")


async def until_idle(jobs: job.Jobs) -> None:
    """Until serve's workers all wait for a row (serve has started and claimed nothing)."""
    async with asyncio.timeout(10):
        while True:
            feed = jobs._parts.wakeups.feed
            if feed is not None and len(feed.idle) == jobs.workers:
                return
            await asyncio.sleep(0)


async def until(what: str, check: Callable[[], bool], seconds: float = 20.0) -> None:
    """Wait for `check()` to hold, looking every 10 ms, for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what}")
        await asyncio.sleep(0.01)


def listeners(pg_url: str) -> int:
    """How many connections to the database at `pg_url` wait in `LISTEN nilo_jobs` (one per
    serving queue, on PostgreSQL)."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as admin:
        found = admin.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query = 'LISTEN nilo_jobs'"
        ).fetchone()
    return 0 if found is None else int(found[0])


def listening(pg_url: str) -> bool:
    """Whether exactly one connection to the database at `pg_url` waits in `LISTEN nilo_jobs`."""
    return listeners(pg_url) == 1


class FailingSpace(job.MemorySpace):
    """A status Space whose writes fail while `down` is set, or once after `armed` is set (a
    Redis blip)."""

    def __init__(self) -> None:
        super().__init__(ttl_s=60)
        self.down = False
        self.armed = False

    async def put(self, key: str, value: bytes) -> None:
        if self.down or self.armed:
            self.armed = False
            raise ConnectionError("the status space is unreachable")
        await super().put(key, value)


def held_at(
    gate: asyncio.Event, real: Callable[[Any], Awaitable[T]], writes: list[asyncio.Future[T]]
) -> Callable[[Any], Awaitable[T]]:
    """A store method that waits for `gate`, then calls `real`, and completes even when its
    caller is cancelled meanwhile (as a statement the database has received does; SQLite's
    thread does exactly this). Each call's inner write is put in `writes`."""

    async def in_flight(arg: Any) -> T:
        async def write() -> T:
            await gate.wait()
            return await real(arg)

        inner = asyncio.ensure_future(write())
        writes.append(inner)
        return await asyncio.shield(inner)

    return in_flight
