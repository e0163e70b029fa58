"""Giving back the room an index of `nilo_jobs` took: `REINDEX INDEX CONCURRENTLY` of the
indexes that have swollen far past what their live entries need.

A transaction that holds an old snapshot keeps every row version made since from cleanup, and
the queue table's indexes grow for as long as it lasts; a backlog of a million rows, once run,
leaves its entries' pages behind too. VACUUM makes those pages reusable but never shrinks the
file. A rebuild writes a new index beside the old one and swaps them, while pushes, claims and
ends go on (it takes no lock that blocks them), and gives the room back to the file system.

One process rebuilds at a time (a session advisory lock, tried), on a connection of its own to
the server itself (a rebuild runs outside any transaction: not through a pooler in transaction
mode; behind one, only with a `listen_url`), never while something holds back the cleanup (the
new index would keep what the old one did, and the rebuild would wait for the hold to end).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from ..contract import HeldBack, Rebuilt
from .connections import Connections
from .statements import SQL

HELD_S = 10.0
"""A transaction holding back the cleanup for this long (s) puts the rebuilds off."""

OVER_BEFORE = 2
"""An index that `before` names is swollen only past this many times its size there."""


async def rebuild_swollen(
    connections: Connections, held: HeldBack | None, before: Mapping[str, int]
) -> list[Rebuilt]:
    """Rebuild the swollen indexes of `nilo_jobs`: those the `swollen` statement finds and,
    when `before` (bytes, from before a hold) names them, larger than `OVER_BEFORE` times their
    size there. What was rebuilt. Leftovers of a rebuild cut short are dropped first. Nothing
    while `held` (what holds back the cleanup now) has lasted `HELD_S`: the new index would
    keep what the hold keeps, and the rebuild would wait for it to end.

    Raises:
        StoreUnavailable: the server cannot be reached.
        psycopg.Error: the server refused a rebuild (the role does not own the table, say).
    """
    if held is not None and held.age_s >= HELD_S:
        return []
    if connections.listening_where() is None:
        return []  # behind a pooler, without a direct URL
    async with connections.own() as conn:
        locked = await _one(conn, SQL["rebuild_lock"])
        if not locked:
            return []  # another process is at it
        for (name,) in await (await conn.execute(SQL["unfinished_rebuilds"])).fetchall():
            await conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(
                sql.Identifier(name)
            ))  # fmt: skip
        rebuilt = []
        for name, size in await (await conn.execute(SQL["swollen"])).fetchall():
            if name in before and size <= OVER_BEFORE * before[name]:
                continue  # its working size (or another process rebuilt it since)
            await conn.execute(
                sql.SQL("REINDEX INDEX CONCURRENTLY {}").format(sql.Identifier(name))
            )
            after = await _one(conn, SQL["index_size"], (name,))
            rebuilt.append(Rebuilt(name, int(size), int(after or 0)))
        return rebuilt  # (the lock goes with the connection)


async def _one(conn: psycopg.AsyncConnection[Any], query: str, params: Any = None) -> Any:
    row = await (await conn.execute(query, params)).fetchone()
    return None if row is None else row[0]
