"""The PostgreSQL table's shape: reading its version, and creating or upgrading it in place.

What a version is, and which steps lead from one to the next, is `_schema`'s; this is how the
PostgreSQL store runs them: in one transaction, behind an advisory lock (concurrent creators
would otherwise race on the catalog), taking the table's strongest lock first when a step is to
run (taken after the weaker ones `CREATE INDEX` takes, it would deadlock with workers holding
rows), and waiting at most 10 s for it.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .. import _schema, _sql

SQL = _sql.load("nilo_job.store.postgres")


Schema = tuple[set[str], _schema.Recorded, set[str]]
"""The table's columns (empty: no table), what its version table records, and which of the
tables beside it (`_schema.SIDE_TABLES`) exist."""


async def read_schema(conn: psycopg.AsyncConnection[Any]) -> Schema:
    """The table's columns, its version record and the tables beside it (`Schema`)."""
    cur = await conn.execute(SQL["columns"])
    columns = {row[0] for row in await cur.fetchall()}
    cur = await conn.execute(SQL["tables"], (sorted(_schema.SIDE_TABLES),))
    tables = {row[0] for row in await cur.fetchall()}
    if "nilo_jobs_version" not in tables:
        return columns, None, tables
    cur = await conn.execute(SQL["version"])
    found = await cur.fetchone()
    if found is None or found[0] is None or found[1] is None:
        return columns, None, tables
    return columns, (int(found[0]), int(found[1])), tables


async def check_schema(conn: psycopg.AsyncConnection[Any]) -> Schema:
    """`read_schema`, for a check, then one read of every table of the queue's that the
    statements find, so that a table the user may not read is the server's refusal (where
    information_schema hides such a table's columns, it would look missing).

    Raises:
        psycopg.errors.InsufficientPrivilege: the user may not read a table of the queue's.
    """
    schema = await read_schema(conn)
    columns, _recorded, tables = schema
    found = set(tables)
    if columns:
        found.add("nilo_jobs")
    else:  # hidden or missing: the table itself first, so that the refusal names it
        cur = await conn.execute(SQL["tables"], (["nilo_jobs"],))
        if await cur.fetchone() is not None:
            await conn.execute(SQL["readable"].format(table="nilo_jobs"))
    if found:
        arms = [SQL["readable"].format(table=table) for table in sorted(found)]
        await conn.execute("\nUNION ALL\n".join(arms))
    return schema


async def upgrade(conn: psycopg.AsyncConnection[Any], where: str) -> None:
    """Create what is missing and run the steps from the table's version to this one's, on
    `conn` inside a transaction; a table already as this version wants it, with every table
    beside it, is not touched.

    Raises:
        StoreUnavailable: the table is from a newer nilo-job than this one can work on.
    """
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('nilo_jobs'))")
    await conn.execute("SET LOCAL lock_timeout = '10s'")
    columns, recorded, tables = await read_schema(conn)
    steps = _schema.steps_from(columns, recorded, where)
    if steps is None or (not steps and recorded is not None and columns):
        # As this version wants it (or newer, and fine as it is): touch nothing, but make a
        # table beside it that is missing (dropped, say), whatever the record says.
        if _schema.SIDE_TABLES - tables:
            await _script(conn, SQL["create"])
        return
    if steps:
        await conn.execute("LOCK TABLE nilo_jobs IN ACCESS EXCLUSIVE MODE")
        for step in steps:
            await _script(conn, SQL[step])
    await _script(conn, SQL["create"])
    await conn.execute(SQL["forget_version"])
    await conn.execute(SQL["set_version"], (_schema.VERSION, _schema.COMPATIBLE_FROM))


async def _script(conn: psycopg.AsyncConnection[Any], script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            await conn.execute(statement)
