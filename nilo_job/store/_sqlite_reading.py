"""The SQLite store's operator reads: counts, pages, a row's story, the flow figures. A part of
`SqliteTable` (its base), kept apart so that each module holds one idea: `sqlite.py` pushes,
claims and ends; this reads."""

from __future__ import annotations

import json
from collections.abc import Sequence

from .._values import Stats
from . import _sql
from ._sql import count_statement, dead_row, find_statement, row_view
from ._sqlite_connections import Connections
from .contract import DeadRow, RowView, Where, check_state

SQL = _sql.load("sqlite.sql")


class Reading:
    """The read-only calls of the SQLite store, over `self._db`."""

    _db: Connections

    async def stats(self) -> Stats:
        row = await self._db.call(lambda conn: conn.execute(SQL["stats"]).fetchone())
        return Stats(row[0], row[1], row[2], row[3])

    async def dead_ones(self, limit: int) -> list[DeadRow]:
        rows = await self._db.call(lambda conn: conn.execute(SQL["dead_ones"], (limit,)).fetchall())
        return [dead_row(r) for r in rows]

    async def rows(self, state: str, limit: int) -> list[RowView]:
        return await self.find(Where(state=check_state(state)), None, limit)

    async def row(self, row_id: int) -> RowView | None:
        found = await self._db.call(
            lambda conn: conn.execute(SQL["row"], {"id": row_id}).fetchone()
        )
        return None if found is None else row_view(found)

    async def find(self, where: Where, after: tuple[int, int] | None, limit: int) -> list[RowView]:
        query, params = find_statement(where, after, limit, postgres=False)
        found = await self._db.call(lambda conn: conn.execute(query, params).fetchall())
        return [row_view(r) for r in found]

    async def count(self, where: Where) -> int:
        query, params = count_statement(where, postgres=False)
        found = await self._db.call(lambda conn: conn.execute(query, params).fetchone())
        return int(found[0])

    async def paused(self) -> dict[str, int]:
        found = await self._db.call(lambda conn: conn.execute(SQL["paused"]).fetchall())
        return dict(found)

    async def ended(self, since_us: int) -> list[tuple[str, str, int, int]]:
        found = await self._db.call(
            lambda conn: conn.execute(SQL["ended"], {"since": since_us}).fetchall()
        )
        return [(kind, state, minute, n) for kind, state, minute, n in found]

    async def durations(self, kind: str, since_us: int, limit: int) -> list[int]:
        found = await self._db.call(
            lambda conn: conn.execute(SQL["durations"], (kind, since_us, limit)).fetchall()
        )
        return [r[0] for r in found]

    async def oldest_due(self, now_us: int) -> dict[str, int]:
        found = await self._db.call(
            lambda conn: conn.execute(SQL["oldest_due"], (now_us,)).fetchall()
        )
        return dict(found)

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]:
        params = {"key": key, "kinds": json.dumps(list(kinds))}
        found = await self._db.call(lambda conn: conn.execute(SQL["holding"], params).fetchall())
        return [row_view(r) for r in found]

    async def counts(self) -> dict[tuple[str, str], int]:
        found = await self._db.call(lambda conn: conn.execute(SQL["counts"]).fetchall())
        return {(kind, state): n for kind, state, n in found}
