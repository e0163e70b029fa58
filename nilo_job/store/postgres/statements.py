"""The PostgreSQL store's statements with their parameters, as psycopg is handed them: a row
to insert, a group of finished runs, an end; numbers' arrays as literals the store builds."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import psycopg

from .. import _sql
from .._sql import end_statement
from ..contract import Done, End, NewRow

SQL = _sql.load("nilo_job.store.postgres")


def numbers(values: Sequence[int | None]) -> str:
    """`values` as a PostgreSQL array literal ('{1,NULL,3}'), for a `%s::bigint[]` parameter:
    about a tenth of psycopg's cost for a list, which inspects every element for its type."""
    if None in values:
        return "{" + ",".join("NULL" if value is None else str(value) for value in values) + "}"
    return "{" + ",".join(map(str, values)) + "}"


@functools.lru_cache(maxsize=64)
def texts(values: tuple[str, ...]) -> str:
    """`values` as a PostgreSQL array literal ('{"a","b"}'), for a `%s::text[]` parameter: every
    element quoted, its backslashes and double quotes escaped. Cached: every claim of a serve
    passes the same kinds, and psycopg would build a binary array from the list each time."""
    quoted = ('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values)
    return "{" + ",".join(quoted) + "}"


async def delete_done(cur: psycopg.AsyncCursor[Any], ends: Sequence[Done]) -> list[bool]:
    """Delete the rows of `ends` (runs that finished, no schedule's next tick) in one statement,
    moving into the history those that keep one; for each end, whether its row was still its
    attempt's (False: the lease ran out and another worker took it)."""
    kept = [end for end in ends if end.finished_at is not None]
    if kept and len(kept) < len(ends):  # (never within one queue: it keeps all or none)
        kept_ok = dict(zip(kept, await delete_done(cur, kept), strict=True))
        rest = [end for end in ends if end.finished_at is None]
        rest_ok = dict(zip(rest, await delete_done(cur, rest), strict=True))
        return [kept_ok[end] if end in kept_ok else rest_ok[end] for end in ends]
    if kept:
        await cur.execute(
            SQL["keep_many"],
            {
                "ids": numbers([end.id for end in ends]),
                "attempts": numbers([end.attempts for end in ends]),
                "started": numbers([end.started_at for end in ends]),
                "finished": numbers([end.finished_at for end in ends]),
                "results": [None if end.result is None else end.result.decode() for end in ends],
            },
        )
    else:
        await cur.execute(
            SQL["done_many"],
            {
                "ids": numbers([end.id for end in ends]),
                "attempts": numbers([end.attempts for end in ends]),
            },
        )
    gone = {row[0] for row in await cur.fetchall()}
    return [end.id in gone for end in ends]


def insert_statement(row: NewRow) -> tuple[str, Sequence[object] | dict[str, object]]:
    """The INSERT for `row` and its parameters: lean ones for a row without a unique key."""
    if row.unique_key is None:
        if row.lease_until is None:
            return SQL["push"], (
                row.kind,
                row.payload.decode(),
                row.run_at,
                row.pushed_at,
                row.trace,
            )
        return SQL["push_claimed"], (
            row.kind,
            row.payload.decode(),
            row.run_at,
            row.lease_until,
            row.pushed_at,
            row.pushed_at,
            row.worker,
            row.trace,
        )
    return SQL["push_row"], params(row)


def keep_params(end: Done) -> dict[str, object]:
    """The parameters of `keep`: a finished run moved into the history."""
    return {
        "id": end.id,
        "attempts": end.attempts,
        "started_at": end.started_at,
        "finished_at": end.finished_at,
        "result": None if end.result is None else end.result.decode(),
    }


def params(row: NewRow) -> dict[str, object]:
    """Every column of `row` by name, for the statements that take them all."""
    return {
        "kind": row.kind,
        "payload": row.payload.decode(),
        "run_at": row.run_at,
        "unique_key": row.unique_key,
        "state": "queued" if row.lease_until is None else "running",
        "attempts": 0 if row.lease_until is None else 1,
        "lease_until": row.lease_until,
        "pushed_at": row.pushed_at,
        "started_at": None if row.lease_until is None else row.pushed_at,
        "worker": None if row.lease_until is None else row.worker,
        "trace": row.trace,
    }


async def insert(conn: psycopg.AsyncConnection[Any], row: NewRow) -> int | None:
    """Insert `row` on `conn`: its id, or None when its unique key was taken."""
    cur = await conn.execute(*insert_statement(row))
    found = await cur.fetchone()
    return None if found is None else int(found[0])


def end_sql(end: End) -> tuple[str, tuple[object, ...]]:
    """The statement that writes `end` (a retry, a death, a row given back, …) and its
    parameters."""
    name, params = end_statement(end)
    return SQL[name], params
