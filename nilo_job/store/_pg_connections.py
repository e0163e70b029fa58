"""PostgreSQL connections: the store's pools, the connections it keeps beside them, and forks.

`Connections` is where every statement of the PostgreSQL store finds its connection:

- the ordinary pool, for pushes, cancels, retries of dead rows and reads; they commit durably;
- the workers' pool, for claims and ends, whose sessions commit with `synchronous_commit = off`
  (losing one of those to a server crash can only make a row run again, which at-least-once
  allows) and turn bitmap scans off (a claim walks `nilo_jobs_due` in order and stops after
  `limit` rows; on a table not yet analysed the planner may otherwise fetch every due row and
  sort them, once per claim);
- two connections kept beside the pools (`Kept`), one for one-row pushes and one for serve's
  claims, calls that come one at a time and then skip the pool's checkout and return.

A store over an application's own pool uses that pool for the ordinary statements and keeps no
connection of its own beside it. After a fork, the parent's pools and connections are replaced
before anything reads them. Outages are `StoreUnavailable`, with the driver's sentence.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import pq
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from .._errors import StoreUnavailable

DOWN = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)
"""The driver's exceptions that mean the server cannot be reached (or the pool gave up)."""

_WORK = "-c synchronous_commit=off -c enable_bitmapscan=off"  # the workers' sessions


class Connections:
    """The connections of one PostgreSQL store.

    Args:
        conninfo: the connection string.
        pool: the application's own pool, or None for one of the store's own.
        max_size: the most connections the store's own pool opens.
    """

    def __init__(self, conninfo: str, pool: AsyncConnectionPool[Any] | None, max_size: int) -> None:
        self.conninfo = conninfo
        self.pool = pool
        self.owns_pool = pool is None
        self.kwargs: dict[str, Any] = {}
        if pool is not None and isinstance(pool.kwargs, dict):
            self.kwargs = {k: v for k, v in pool.kwargs.items() if k != "autocommit"}
        self.max_size = max_size
        self.work_pool: AsyncConnectionPool[Any] | None = None
        self.opening: asyncio.Lock | None = None
        self.kept_push = Kept(conninfo, {})
        self.kept_claim = Kept(conninfo, {"options": _WORK})
        self.pid = os.getpid()

    async def get_pool(self, *, work: bool = False) -> AsyncConnectionPool[Any]:
        """The ordinary pool, or (`work`) the workers' own; opened on first use.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        if self.pid != os.getpid():
            # A forked child: the parent's pools and their connections are not ours.
            self.pid, self.work_pool, self.opening = os.getpid(), None, None
            self.kept_push = Kept(self.conninfo, {})
            self.kept_claim = Kept(self.conninfo, {"options": _WORK})
            if self.owns_pool:
                self.pool = None
        current = self.work_pool if work else self.pool
        if current is not None and not current.closed:
            return current
        if self.opening is None:
            self.opening = asyncio.Lock()
        async with self.opening:
            if work and (self.work_pool is None or self.work_pool.closed):
                self.work_pool = await self._open_pool("nilo-job-work", 4, {"options": _WORK})
            if not work and (self.pool is None or self.pool.closed):
                self.pool = await self._open_pool("nilo-job", self.max_size, {})
                self.owns_pool = True
        pool = self.work_pool if work else self.pool
        assert pool is not None
        return pool

    async def _open_pool(
        self, name: str, max_size: int, extra: dict[str, Any]
    ) -> AsyncConnectionPool[Any]:
        # One plain connection first: a server that is down or a wrong password is said at
        # once, in the driver's words, instead of after the pool's timeout.
        try:
            probe = await psycopg.AsyncConnection.connect(self.conninfo)
        except DOWN as error:
            raise StoreUnavailable(f"cannot reach PostgreSQL: {error}") from error
        await probe.close()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=max_size,
            kwargs={**self.kwargs, "autocommit": True, **extra},
            open=False,
            name=name,
        )
        try:
            await pool.open(wait=True, timeout=10)
        except DOWN as error:
            await pool.close()
            raise StoreUnavailable(f"cannot reach PostgreSQL: {error}") from error
        return pool

    async def run(
        self,
        fn: Callable[[psycopg.AsyncConnection[Any]], Any],
        *,
        work: bool = False,
        transaction: bool = True,
    ) -> Any:
        """`fn(conn)` on a pooled connection, in one transaction unless `transaction` is False
        (a single statement commits on its own, saving two round trips).

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        pool = await self.get_pool(work=work)
        try:
            async with pool.connection() as conn:
                if not transaction:
                    return await fn(conn)
                async with conn.transaction():
                    return await fn(conn)
        except DOWN as error:
            raise StoreUnavailable(f"PostgreSQL: {error}") from error

    async def kept_run(
        self, fn: Callable[[psycopg.AsyncConnection[Any]], Any], *, work: bool
    ) -> Any:
        """`fn(conn)`, one statement that commits on its own, on the connection kept for it
        (`work`: serve's claims, else one-row pushes) when that is free, else on a pooled one.
        A store over an application's pool keeps no connection of its own: it opens nothing
        behind that pool.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        # An unreachable server is said in a sentence here; after a fork, the parent's pools
        # and kept connections are replaced before either is read below.
        await self.get_pool(work=work)
        if self.owns_pool:
            kept = self.kept_claim if work else self.kept_push
            done, answer = await kept.run(fn)
            if done:
                return answer
        return await self.run(fn, work=work, transaction=False)

    async def close(self) -> None:
        """Close what the store opened; an application's pool stays open."""
        await self.kept_push.close()
        await self.kept_claim.close()
        work, self.work_pool = self.work_pool, None
        if work is not None:
            await work.close()
        pool = self.pool
        if pool is not None and self.owns_pool:
            self.pool = None
            await pool.close()


class Kept:
    """A connection a store keeps beside its pools for calls that come one at a time (a single
    producer's pushes, serve's claims), which then skip the pool's checkout and return: about
    60 µs of CPU a call on the benchmark's machine.

    It is opened at the first call and serves one call at a time, on the event loop that opened
    it (or on another once that loop is closed); `run` says when it was not free, and the
    caller goes through its pool. If it breaks, or a call on it is cut off mid-statement, it is
    closed and the next call opens a fresh one. `close()` closes it, or leaves that to the call
    using it at that moment.
    """

    def __init__(self, conninfo: str, options: dict[str, Any]) -> None:
        self.conninfo = conninfo
        self.options = options
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock = threading.Lock()  # taken without waiting: one call at a time
        self.closing = False  # close() came while a call held the lock: that call closes it

    async def run(self, fn: Callable[[psycopg.AsyncConnection[Any]], Any]) -> tuple[bool, Any]:
        """(True, `fn(conn)`) on the kept connection, or (False, None) when it is not free.

        Raises:
            StoreUnavailable: the connection could not be opened, or broke.
        """
        loop = asyncio.get_running_loop()
        if not self.lock.acquire(blocking=False):
            return False, None
        try:
            owner = self.loop
            if owner is not None and owner is not loop and not owner.is_closed():
                return False, None
            conn = self.conn
            if conn is None or conn.closed:
                try:
                    conn = await psycopg.AsyncConnection.connect(
                        self.conninfo, autocommit=True, **self.options
                    )
                except DOWN as error:
                    raise StoreUnavailable(f"PostgreSQL: {error}") from error
                self.conn = conn
            self.loop = loop
            try:
                return True, await fn(conn)
            except BaseException as error:
                if conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    # Broken, or cut off mid-statement: the next call opens a fresh one.
                    self.conn = self.loop = None
                    await conn.close()
                if isinstance(error, DOWN):
                    raise StoreUnavailable(f"PostgreSQL: {error}") from error
                raise
            finally:
                if self.closing:  # close() came while this call held it (or was opening it)
                    self.conn, self.loop, self.closing = None, None, False
                    await conn.close()
        finally:
            self.closing = False  # (a close() while the connection failed to open: nothing left)
            self.lock.release()

    async def close(self) -> None:
        if not self.lock.acquire(blocking=False):
            self.closing = True  # a call is using it (or opening it): that call closes it
            return
        try:
            conn, self.conn, self.loop = self.conn, None, None
        finally:
            self.lock.release()
        if conn is not None:
            await conn.close()
