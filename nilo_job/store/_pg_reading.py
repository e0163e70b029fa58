"""The PostgreSQL store's operator calls: counts, pages, a row's story, acting on many rows,
prunes, pauses and the flow figures. A part of `PostgresTable` (its base), kept apart so that each
module holds one idea: `postgres.py` pushes, claims and ends; this reads and tidies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from .._values import Stats
from . import _sql
from ._pg_connections import Connections
from ._sql import count_statement, dead_row, find_statement, row_view
from .contract import DeadRow, RowView, Where, check_state

SQL = _sql.load("postgres.sql")


class Reading:
    """The operator's calls of the PostgreSQL store, over `self._connections`."""

    _connections: Connections

    async def _one(self, query: str, params: Any = None) -> Any:
        async def one(conn: psycopg.AsyncConnection[Any]) -> Any:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

        return await self._connections.run(one, transaction=False)

    async def stats(self) -> Stats:
        row = await self._one(SQL["stats"])
        return Stats(row[0], row[1], row[2], row[3])

    async def dead_ones(self, limit: int) -> list[DeadRow]:
        async def dead(conn: psycopg.AsyncConnection[Any]) -> list[DeadRow]:
            cur = await conn.execute(SQL["dead_ones"], (limit,))
            return [dead_row(r) for r in await cur.fetchall()]

        rows: list[DeadRow] = await self._connections.run(dead, transaction=False)
        return rows

    async def rows(self, state: str, limit: int) -> list[RowView]:
        return await self.find(Where(state=check_state(state)), None, limit)

    async def _all(self, query: str, params: Any = None, *, transaction: bool = False) -> Any:
        async def run(conn: psycopg.AsyncConnection[Any]) -> Any:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

        return await self._connections.run(run, transaction=transaction)

    async def row(self, row_id: int) -> RowView | None:
        found = await self._all(SQL["row"], {"id": row_id})
        return row_view(found[0]) if found else None

    async def find(self, where: Where, after: tuple[int, int] | None, limit: int) -> list[RowView]:
        query, params = find_statement(where, after, limit, postgres=True)
        return [row_view(r) for r in await self._all(query, params)]

    async def count(self, where: Where) -> int:
        query, params = count_statement(where, postgres=True)
        row = await self._one(query, params)
        return int(row[0])

    async def retry_many(self, ids: Sequence[int], now_us: int) -> list[int]:
        return [r[0] for r in await self._all(SQL["retry_many"], (now_us, list(ids)))]

    async def cancel_many(self, ids: Sequence[int]) -> list[int]:
        return [r[0] for r in await self._all(SQL["cancel_many"], (list(ids),))]

    async def delete_many(self, ids: Sequence[int]) -> list[int]:
        return [r[0] for r in await self._all(SQL["delete_many"], {"ids": list(ids)})]

    async def prune(self, before_us: int, limit: int) -> int:
        async def prune(conn: psycopg.AsyncConnection[Any]) -> int:
            cur = await conn.execute(SQL["prune"], (before_us, limit))
            return cur.rowcount

        gone: int = await self._connections.run(prune, transaction=False)
        return gone

    async def pause(self, kind: str, at_us: int) -> bool:
        async def pause(conn: psycopg.AsyncConnection[Any]) -> bool:
            cur = await conn.execute(SQL["pause"], (kind, at_us))
            return cur.rowcount == 1

        done: bool = await self._connections.run(pause, transaction=False)
        return done

    async def resume(self, kind: str) -> bool:
        async def resume(conn: psycopg.AsyncConnection[Any]) -> bool:
            cur = await conn.execute(SQL["resume"], (kind,))
            return cur.rowcount == 1

        done: bool = await self._connections.run(resume, transaction=False)
        return done

    async def paused(self) -> dict[str, int]:
        return {kind: int(at) for kind, at in await self._all(SQL["paused"])}

    async def ended(self, since_us: int) -> list[tuple[str, str, int, int]]:
        found = await self._all(SQL["ended"], {"since": since_us})
        return [(kind, state, int(minute), int(n)) for kind, state, minute, n in found]

    async def durations(self, kind: str, since_us: int, limit: int) -> list[int]:
        return [int(r[0]) for r in await self._all(SQL["durations"], (kind, since_us, limit))]

    async def oldest_due(self, now_us: int) -> dict[str, int]:
        return {kind: int(at) for kind, at in await self._all(SQL["oldest_due"], (now_us,))}

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]:
        params = {"key": key, "kinds": list(kinds)}

        async def holding(conn: psycopg.AsyncConnection[Any]) -> list[RowView]:
            cur = await conn.execute(SQL["holding"], params)
            return [row_view(r) for r in await cur.fetchall()]

        found: list[RowView] = await self._connections.run(holding, transaction=False)
        return found

    async def counts(self) -> dict[tuple[str, str], int]:
        async def counts(conn: psycopg.AsyncConnection[Any]) -> dict[tuple[str, str], int]:
            cur = await conn.execute(SQL["counts"])
            return {(kind, state): n for kind, state, n in await cur.fetchall()}

        found: dict[tuple[str, str], int] = await self._connections.run(counts, transaction=False)
        return found
