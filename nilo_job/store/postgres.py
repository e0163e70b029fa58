"""The PostgreSQL store: `job.Table("postgresql://…")` or `job.Table(pool)`, through psycopg 3.

Any number of worker processes on any number of hosts share one table. The claim is one statement
with `FOR UPDATE SKIP LOCKED` that takes as many rows as it is asked for; the unique index gives
`unique` its verdict (`ON CONFLICT … DO NOTHING RETURNING`); every push sends `NOTIFY nilo_jobs`
with the row's due time (never the payload), delivered when its transaction commits, and `watch`
listens for it so idle workers in other processes start at once, or when the row falls due.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from .._errors import Refusal, StoreUnavailable
from .._values import Stats
from . import _sql
from ._sql import check_columns, end_statement, unwrap_django
from ._sql import row_view as _row_view
from ._sql import rows_statement as _rows_statement
from .contract import Claimed, DeadRow, Done, End, NewRow, RowView

log = logging.getLogger("nilo_job")

SQL = _sql.load("postgres.sql")
CHANNEL = "nilo_jobs"

ACCEPTED_TX = (
    "a psycopg Connection or AsyncConnection in a transaction, or a SQLAlchemy Session, "
    "AsyncSession, Connection or AsyncConnection, or Django's connection inside "
    "transaction.atomic()"
)

_DOWN = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)
_WORK = "-c synchronous_commit=off -c enable_bitmapscan=off"  # the workers' connections


class PostgresTable:
    """The `nilo_jobs` table in a PostgreSQL database.

    Args:
        target: a `postgresql://` connection string, or a `psycopg_pool.AsyncConnectionPool`
            the application already has (it stays the application's: `close` leaves it open).
        max_size: the most connections the store's own pool opens (with a URL only).

    Raises:
        Refusal: `target` is neither.
    """

    def __init__(self, target: str | AsyncConnectionPool[Any], *, max_size: int = 10) -> None:
        self._pool: AsyncConnectionPool[Any] | None = None
        self._work_pool: AsyncConnectionPool[Any] | None = None
        self._kwargs: dict[str, Any] = {}
        if isinstance(target, str):
            self.conninfo = target
            self._owns_pool = True
        elif isinstance(target, AsyncConnectionPool):
            self.conninfo = str(target.conninfo)
            given = target.kwargs if isinstance(target.kwargs, dict) else {}
            self._kwargs = {k: v for k, v in given.items() if k != "autocommit"}
            self._pool = target
            self._owns_pool = False
        else:
            raise Refusal(
                f"job.Table({target!r}): pass 'postgresql://user@host/db' or a "
                "psycopg_pool.AsyncConnectionPool"
            )
        self.max_size = max_size
        self._opening: asyncio.Lock | None = None
        # Connections of the store's own, beside its pools: one for one-row pushes, one for
        # serve's claims (see _Kept).
        self._kept_push = _Kept(self.conninfo, {})
        self._kept_claim = _Kept(self.conninfo, {"options": _WORK})
        self._pid = os.getpid()

    def __repr__(self) -> str:
        shown = psycopg.conninfo.conninfo_to_dict(self.conninfo)
        shown.pop("password", None)
        where = f"{shown.get('host', '')}:{shown.get('port', '')}/{shown.get('dbname', '')}"
        return f"job.Table('postgresql://{where}')"

    @property
    def ddl(self) -> str:
        """The statements that create the table and its indexes, as text."""
        return SQL["create"]

    # ------------------------------------------------------------------------------ plumbing

    async def _get_pool(self, *, work: bool = False) -> AsyncConnectionPool[Any]:
        """The pool for pushes and reads, or (`work`) the workers' own pool.

        The workers' connections commit claims and ends with `synchronous_commit = off`: losing
        one of those to a server crash can only make a row run again, which at-least-once
        allows, so they need not wait for the WAL to reach the disk. Pushes, cancels and
        retries of dead rows use the ordinary pool and wait, because losing those loses work.
        The workers' connections also turn bitmap scans off: a claim walks `nilo_jobs_due` in
        order and stops after `limit` rows, and on a table not yet analysed the planner may
        otherwise fetch every due row and sort them, once per claim.
        """
        if self._pid != os.getpid():
            # A forked child: the parent's pools and their connections are not ours.
            self._pid, self._work_pool, self._opening = os.getpid(), None, None
            self._kept_push = _Kept(self.conninfo, {})
            self._kept_claim = _Kept(self.conninfo, {"options": _WORK})
            if self._owns_pool:
                self._pool = None
        current = self._work_pool if work else self._pool
        if current is not None and not current.closed:
            return current
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if work and (self._work_pool is None or self._work_pool.closed):
                self._work_pool = await self._open_pool("nilo-job-work", 4, {"options": _WORK})
            if not work and (self._pool is None or self._pool.closed):
                self._pool = await self._open_pool("nilo-job", self.max_size, {})
                self._owns_pool = True
        pool = self._work_pool if work else self._pool
        assert pool is not None
        return pool

    async def _open_pool(
        self, name: str, max_size: int, extra: dict[str, Any]
    ) -> AsyncConnectionPool[Any]:
        # One plain connection first: a server that is down or a wrong password is said at
        # once, in the driver's words, instead of after the pool's timeout.
        try:
            probe = await psycopg.AsyncConnection.connect(self.conninfo)
        except _DOWN as error:
            raise StoreUnavailable(f"cannot reach PostgreSQL: {error}") from error
        await probe.close()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=max_size,
            kwargs={**self._kwargs, "autocommit": True, **extra},
            open=False,
            name=name,
        )
        try:
            await pool.open(wait=True, timeout=10)
        except _DOWN as error:
            await pool.close()
            raise StoreUnavailable(f"cannot reach PostgreSQL: {error}") from error
        return pool

    async def _run(
        self,
        fn: Callable[[psycopg.AsyncConnection[Any]], Any],
        *,
        work: bool = False,
        transaction: bool = True,
    ) -> Any:
        """`fn(conn)` on a pooled connection, in one transaction unless `transaction` is False
        (a single statement commits on its own, saving two round trips); outages are
        StoreUnavailable."""
        pool = await self._get_pool(work=work)
        try:
            async with pool.connection() as conn:
                if not transaction:
                    return await fn(conn)
                async with conn.transaction():
                    return await fn(conn)
        except _DOWN as error:
            raise StoreUnavailable(f"PostgreSQL: {error}") from error

    async def _kept_run(
        self, fn: Callable[[psycopg.AsyncConnection[Any]], Any], *, work: bool
    ) -> Any:
        """`fn(conn)`, one statement that commits on its own, on the connection kept for it
        (`work`: serve's claims, else one-row pushes) when that is free, else on a pooled one.
        A store over an application's pool keeps no connection of its own: it opens nothing
        behind that pool."""
        # An unreachable server is said in a sentence here; after a fork, the parent's pools
        # and kept connections are replaced before either is read below.
        await self._get_pool(work=work)
        if self._owns_pool:
            kept = self._kept_claim if work else self._kept_push
            done, answer = await kept.run(fn)
            if done:
                return answer
        return await self._run(fn, work=work, transaction=False)

    async def _one(self, query: str, params: Any = None) -> Any:
        async def one(conn: psycopg.AsyncConnection[Any]) -> Any:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

        return await self._run(one, transaction=False)

    async def open(self) -> None:
        await self._get_pool()

    async def close(self) -> None:
        await self._kept_push.close()
        await self._kept_claim.close()
        work, self._work_pool = self._work_pool, None
        if work is not None:
            await work.close()
        pool = self._pool
        if pool is not None and self._owns_pool:
            self._pool = None
            await pool.close()

    async def ping(self) -> None:
        await self._one("SELECT 1")

    async def now_us(self) -> int | None:
        """The database's clock, in microseconds since the epoch."""
        row = await self._one(SQL["now"])
        return int(row[0])

    async def create_missing(self) -> None:
        """Create `nilo_jobs` and its indexes where missing (idempotent, safe to race)."""

        async def create(conn: psycopg.AsyncConnection[Any]) -> None:
            # Serialise concurrent creators: IF NOT EXISTS alone can still race on the catalog.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('nilo_jobs'))")
            for statement in SQL["create"].split(";"):
                if statement.strip():
                    await conn.execute(statement)

        await self._run(create)

    async def check(self) -> None:
        async def columns(conn: psycopg.AsyncConnection[Any]) -> set[str]:
            cur = await conn.execute(SQL["columns"])
            return {row[0] for row in await cur.fetchall()}

        check_columns(repr(self), await self._run(columns, transaction=False))

    # ---------------------------------------------------------------------------------- rows

    async def push(self, rows: Sequence[NewRow]) -> list[int | None]:
        if len(rows) > 1 and all(row.unique_key is None for row in rows):
            return await self._push_bulk(rows)

        async def push(conn: psycopg.AsyncConnection[Any]) -> list[int | None]:
            return [await _insert(conn, row) for row in rows]

        if len(rows) == 1:
            # One row is one statement, which commits on its own: one round trip, not three.
            alone: list[int | None] = await self._kept_run(push, work=False)
            return alone
        answers: list[int | None] = await self._run(push)
        return answers

    async def _push_bulk(self, rows: Sequence[NewRow]) -> list[int | None]:
        """Rows without unique keys in one statement, one NOTIFY for all of them.

        With no key nothing can conflict, and an identity hands out increasing ids in the order
        the rows are inserted, so the sorted ids are the rows' ids in order.
        """
        params = {
            "kinds": [row.kind for row in rows],
            "payloads": [row.payload.decode() for row in rows],
            "run_ats": [row.run_at for row in rows],
            "leases": [row.lease_until for row in rows],
        }

        async def bulk(conn: psycopg.AsyncConnection[Any]) -> list[int | None]:
            cur = await conn.execute(SQL["push_bulk"], params)
            return [*sorted(int(found[0]) for found in await cur.fetchall())]

        ids: list[int | None] = await self._run(bulk, transaction=False)
        return ids

    async def push_in(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        tx = unwrap_django(tx)
        if isinstance(tx, psycopg.AsyncConnection):
            _check_in_transaction(tx.info.transaction_status, tx.autocommit)
            return [await _insert(tx, row) for row in rows]
        if isinstance(tx, psycopg.Connection):
            _check_in_transaction(tx.info.transaction_status, tx.autocommit)
            answers: list[int | None] = []
            for row in rows:
                found = tx.execute(*_insert_statement(row)).fetchone()
                answers.append(None if found is None else found[0])
            return answers
        if type(tx).__module__.startswith("sqlalchemy"):
            return await _push_sqlalchemy(tx, rows)
        raise Refusal(f"push_in got a {type(tx).__qualname__}; this store accepts {ACCEPTED_TX}")

    async def claim(
        self, kinds: Sequence[str], now_us: int, lease_until_us: int, limit: int
    ) -> list[Claimed]:
        params = {
            "now": now_us,
            "lease_until": lease_until_us,
            "limit": limit,
            "kinds": list(kinds),
        }

        async def claim(conn: psycopg.AsyncConnection[Any]) -> list[Claimed]:
            cur = await conn.execute(SQL["claim"], params)
            return [
                Claimed(r[0], r[1], r[2].encode(), r[3], r[4], r[5]) for r in await cur.fetchall()
            ]

        # serve's claims come one at a time: on the connection kept for them.
        claimed: list[Claimed] = await self._kept_run(claim, work=True)
        claimed.sort(key=lambda row: (row.run_at, row.id))
        return claimed

    async def finish(self, ends: Sequence[End]) -> list[bool]:
        plain = [end for end in ends if isinstance(end, Done) and end.then is None]
        if len(plain) == len(ends):
            # The common case, a batch of runs that simply finished: one statement.
            done: list[bool] = await self._run(
                lambda conn: _delete_done(conn, plain), work=True, transaction=False
            )
            return done

        async def apply(conn: psycopg.AsyncConnection[Any]) -> list[bool]:
            applied = []
            for end in ends:
                cur = await conn.execute(*_statement(end))
                ok = cur.rowcount == 1
                if ok and end.then is not None:
                    await _insert(conn, end.then)
                applied.append(ok)
            return applied

        answers: list[bool] = await self._run(apply, work=True)
        return answers

    async def hand_on(self, row_id: int, attempts: int, then: NewRow) -> bool:
        async def hand_on(conn: psycopg.AsyncConnection[Any]) -> bool:
            cur = await conn.execute(SQL["release_key"], (row_id, attempts))
            if cur.rowcount != 1:
                return False
            await _insert(conn, then)
            return True

        done: bool = await self._run(hand_on, work=True)
        return done

    async def cancel(self, row_id: int) -> bool:
        async def cancel(conn: psycopg.AsyncConnection[Any]) -> bool:
            cur = await conn.execute(SQL["cancel"], (row_id,))
            return cur.rowcount == 1

        gone: bool = await self._run(cancel, transaction=False)
        return gone

    async def stats(self) -> Stats:
        row = await self._one(SQL["stats"])
        return Stats(row[0], row[1], row[2])

    async def dead_ones(self, limit: int) -> list[DeadRow]:
        async def dead(conn: psycopg.AsyncConnection[Any]) -> list[DeadRow]:
            cur = await conn.execute(SQL["dead_ones"], (limit,))
            return [
                DeadRow(r[0], r[1], r[2] or "", r[3], r[4].encode(), r[5] or 0)
                for r in await cur.fetchall()
            ]

        rows: list[DeadRow] = await self._run(dead, transaction=False)
        return rows

    async def rows(self, state: str, limit: int) -> list[RowView]:
        query = SQL[_rows_statement(state)]

        async def rows(conn: psycopg.AsyncConnection[Any]) -> list[RowView]:
            cur = await conn.execute(query, (limit,))
            return [_row_view(r) for r in await cur.fetchall()]

        found: list[RowView] = await self._run(rows, transaction=False)
        return found

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]:
        params = {"key": key, "kinds": list(kinds)}

        async def holding(conn: psycopg.AsyncConnection[Any]) -> list[RowView]:
            cur = await conn.execute(SQL["holding"], params)
            return [_row_view(r) for r in await cur.fetchall()]

        found: list[RowView] = await self._run(holding, transaction=False)
        return found

    async def counts(self) -> dict[tuple[str, str], int]:
        async def counts(conn: psycopg.AsyncConnection[Any]) -> dict[tuple[str, str], int]:
            cur = await conn.execute(SQL["counts"])
            return {(kind, state): n for kind, state, n in await cur.fetchall()}

        found: dict[tuple[str, str], int] = await self._run(counts, transaction=False)
        return found

    async def retry_dead(self, row_id: int, now_us: int) -> bool:
        row = await self._one(SQL["retry_dead"], (now_us, row_id))
        return row is not None

    # ----------------------------------------------------------------------------- wake-ups

    async def watch(self, wake: Callable[[int | None], None]) -> None:
        """Call `wake(run_at)` for every row another process pushes, until cancelled.

        A connection of its own runs `LISTEN nilo_jobs`; each notification's payload is the
        row's due time (µs); for a group of rows, the earliest. When the connection is lost (a
        restart, a terminated backend) it is opened again after a short pause, and the queue's
        poll covers the gap.
        """
        pause = 0.05
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
                try:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    pause = 0.05
                    wake(None)  # rows pushed while nobody listened
                    async for note in conn.notifies():
                        wake(_due_at(note.payload))
                finally:
                    await conn.close()
            except _DOWN as error:
                log.warning(
                    "listening for pushes failed (%s); listening again in %.2f s", error, pause
                )
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)


def _due_at(payload: str) -> int | None:
    """The due time a push's NOTIFY carries (µs); None for anything else (an older version
    sent the row's id, which reads as long past: wake now either way)."""
    try:
        return int(payload)
    except ValueError:
        return None


class _Kept:
    """A connection a store keeps beside its pools for calls that come one at a time (a single
    producer's pushes, serve's claims), which then skip the pool's checkout and return: about
    60 µs of CPU a call on the benchmark's machine (docs/postgres.md, "Connections").

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
                except _DOWN as error:
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
                if isinstance(error, _DOWN):
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


async def _delete_done(conn: psycopg.AsyncConnection[Any], ends: Sequence[Done]) -> list[bool]:
    cur = await conn.execute(
        SQL["done_many"], ([end.id for end in ends], [end.attempts for end in ends])
    )
    gone = {row[0] for row in await cur.fetchall()}
    return [end.id in gone for end in ends]


def _insert_statement(row: NewRow) -> tuple[str, Sequence[object] | dict[str, object]]:
    """The INSERT for `row` and its parameters: lean ones for a row without a unique key."""
    if row.unique_key is None:
        if row.lease_until is None:
            return SQL["push"], (row.kind, row.payload.decode(), row.run_at)
        return SQL["push_claimed"], (row.kind, row.payload.decode(), row.run_at, row.lease_until)
    return SQL["push_row"], _params(row)


def _params(row: NewRow) -> dict[str, object]:
    return {
        "kind": row.kind,
        "payload": row.payload.decode(),
        "run_at": row.run_at,
        "unique_key": row.unique_key,
        "state": "queued" if row.lease_until is None else "running",
        "attempts": 0 if row.lease_until is None else 1,
        "lease_until": row.lease_until,
    }


async def _insert(conn: psycopg.AsyncConnection[Any], row: NewRow) -> int | None:
    cur = await conn.execute(*_insert_statement(row))
    found = await cur.fetchone()
    return None if found is None else int(found[0])


def _check_in_transaction(status: pq.TransactionStatus, autocommit: bool) -> None:
    if status == pq.TransactionStatus.INTRANS:
        return
    if status == pq.TransactionStatus.IDLE and not autocommit:
        return  # the INSERT opens the transaction, and the caller commits it
    raise Refusal(
        "push_in got a psycopg connection with no open transaction, so the row would commit on "
        "its own: use `async with conn.transaction():` (or a connection without autocommit)"
    )


async def _push_sqlalchemy(tx: object, rows: Sequence[NewRow]) -> list[int | None]:
    """Write through a SQLAlchemy Session, AsyncSession, Connection or AsyncConnection."""
    from sqlalchemy import Connection, text
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    statement = text(SQL["push_sqlalchemy"])
    answers: list[int | None] = []
    for row in rows:
        if isinstance(tx, AsyncSession | AsyncConnection):
            result = await tx.execute(statement, _params(row))
        elif isinstance(tx, Session | Connection):
            result = tx.execute(statement, _params(row))
        else:
            raise Refusal(
                f"push_in got a {type(tx).__qualname__}; this store accepts {ACCEPTED_TX}"
            )
        found = result.first()
        answers.append(None if found is None else int(found[0]))
    return answers


def _statement(end: End) -> tuple[str, tuple[object, ...]]:
    name, params = end_statement(end)
    return SQL[name], params
