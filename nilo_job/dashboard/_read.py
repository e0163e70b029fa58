"""What the dashboard reads beyond the store contract: the rows holding a unique key.

A schedule's next tick is the one row of its kind holding the unique key "schedule" (seed: "A
schedule is a row"), so the dashboard asks for the rows of the scheduled kinds holding that key.
The contract has no such call yet; until it does, this adapter answers it on the three stores
that ship, through each one's own connection (SQLite's thread, PostgreSQL's pool, Memory's
lock), with the statements in `_read.sql`. A store that has a `holding` method of its own is
asked through it, so a store of yours answers by adding that one method:

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections.abc import Sequence
from importlib import resources
from typing import Any

from ..store._sql import row_view
from ..store.contract import RowView, Store
from ..store.memory import Memory
from ..store.sqlite import SqliteTable

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, str]:
    text = resources.files(__package__).joinpath("_read.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


SQL = _load()


def unwrap(store: Store) -> Store:
    """The store under any wrappers (a metrics proxy keeps the store it wraps as `wrapped`)."""
    while (inner := getattr(store, "wrapped", None)) is not None:
        store = inner
    return store


async def holding(store: Store, key: str, kinds: Sequence[str]) -> list[RowView] | None:
    """The rows of `kinds` that hold the unique key `key`, by kind: at most one per kind; None
    when the store is none of the three that ship and has no `holding` method.

    Args:
        store: the queue's store (wrappers are looked through).
        key: the unique key, e.g. "schedule".
        kinds: the kinds to look at; an empty sequence answers [] without a query.

    Raises:
        StoreUnavailable: the store cannot be reached.
    """
    if not kinds:
        return []
    own = getattr(store, "holding", None)
    if callable(own):
        found: list[RowView] = await own(key, kinds)
        return found
    inner = unwrap(store)
    if inner is not store:
        return await holding(inner, key, kinds)
    if isinstance(store, Memory):
        return _memory_holding(store, key, kinds)
    if isinstance(store, SqliteTable):
        return await _sqlite_holding(store, key, kinds)
    # Imported only by a program that made a PostgreSQL store, so psycopg stays optional.
    postgres = sys.modules.get("nilo_job.store.postgres")
    if postgres is not None and isinstance(store, postgres.PostgresTable):
        return await _postgres_holding(store, key, kinds)
    return None


def _memory_holding(store: Memory, key: str, kinds: Sequence[str]) -> list[RowView]:
    wanted = set(kinds)
    with store._lock:
        found = [
            RowView(
                row.id,
                row.kind,
                row.state,
                row.payload,
                row.run_at,
                row.attempts,
                row.unique_key,
                row.lease_until if row.state == "running" else None,
                row.error,
                row.died_at,
            )
            for row in store._rows.values()
            if row.unique_key == key and row.kind in wanted
        ]
    return sorted(found, key=lambda row: row.kind)


async def _sqlite_holding(store: SqliteTable, key: str, kinds: Sequence[str]) -> list[RowView]:
    params = {"key": key, "kinds": json.dumps(list(kinds))}

    def read(conn: sqlite3.Connection) -> list[Any]:
        return conn.execute(SQL["sqlite_holding"], params).fetchall()

    rows: list[Any] = await store._call(read)
    return [row_view(r) for r in rows]


async def _postgres_holding(store: Any, key: str, kinds: Sequence[str]) -> list[RowView]:
    params = {"key": key, "kinds": list(kinds)}

    async def read(conn: Any) -> list[Any]:
        cur = await conn.execute(SQL["postgres_holding"], params)
        found: list[Any] = await cur.fetchall()
        return found

    rows: list[Any] = await store._run(read)
    return [row_view(r) for r in rows]
