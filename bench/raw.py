"""The raw-SQL baselines: the same patterns as the workloads, with no job library in between.

    .venv/bin/python bench/raw.py ACTION --url postgresql://…|sqlite:///…|mariadb://… [--jobs N] …

PostgreSQL through psycopg 3's async connections (the driver nilo-job uses), SQLite through the
standard library's `sqlite3` (synchronous calls, no thread hop), MariaDB through asyncmy's (the
driver nilo-job's MariaDB/MySQL store uses), with the store's session (READ COMMITTED). The
table has nilo-job's shape on each (the same columns and indexes, partial on PostgreSQL and
SQLite), written out here so that the baseline does not move when the library changes. The
INSERT sends no NOTIFY and wakes nobody: it is the floor for "a row and a commit".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

PG_DDL = """
CREATE TABLE IF NOT EXISTS raw_jobs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text    NOT NULL,
    payload     json    NOT NULL,
    state       text    NOT NULL,
    run_at      bigint  NOT NULL,
    lease_until bigint,
    attempts    integer NOT NULL DEFAULT 0,
    unique_key  text,
    error       text,
    detail      text,
    died_at     bigint
);
CREATE UNIQUE INDEX IF NOT EXISTS raw_jobs_unique ON raw_jobs (kind, unique_key);
CREATE INDEX IF NOT EXISTS raw_jobs_due ON raw_jobs (run_at, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS raw_jobs_lease ON raw_jobs (lease_until, id) WHERE state = 'running';
"""

SQLITE_DDL = """
CREATE TABLE IF NOT EXISTS raw_jobs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    run_at      INTEGER NOT NULL,
    lease_until INTEGER,
    attempts    INTEGER NOT NULL DEFAULT 0,
    unique_key  TEXT,
    error       TEXT,
    detail      TEXT,
    died_at     INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS raw_jobs_unique ON raw_jobs (kind, unique_key);
CREATE INDEX IF NOT EXISTS raw_jobs_due ON raw_jobs (run_at, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS raw_jobs_lease ON raw_jobs (lease_until, id) WHERE state = 'running';
"""

MARIA_DDL = """
CREATE TABLE IF NOT EXISTS raw_jobs (
    id          bigint       NOT NULL AUTO_INCREMENT,
    kind        varchar(255) NOT NULL,
    payload     longtext     NOT NULL,
    state       varchar(7)   NOT NULL,
    run_at      bigint       NOT NULL,
    lease_until bigint,
    attempts    int          NOT NULL DEFAULT 0,
    unique_key  varchar(255),
    error       text,
    detail      text,
    died_at     bigint,
    traceback   mediumtext,
    pushed_at   bigint,
    started_at  bigint,
    worker      text,
    snoozes     int          NOT NULL DEFAULT 0,
    trace       text,
    PRIMARY KEY (id),
    CONSTRAINT raw_jobs_state CHECK (state IN ('queued', 'running', 'dead')),
    UNIQUE KEY raw_jobs_unique (kind, unique_key),
    KEY raw_jobs_due (state, kind, run_at, id),
    KEY raw_jobs_lease (state, kind, lease_until, id),
    KEY raw_jobs_order (state, run_at, id),
    KEY raw_jobs_dead (state, died_at, id),
    KEY raw_jobs_dead_kind (state, kind, died_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin
"""
"""nilo_jobs' columns and indexes as the MariaDB store makes them (no partial indexes there:
each leads with the state), so that a raw INSERT writes as many index entries as a push."""

PG_INSERT = (
    "INSERT INTO raw_jobs (kind, payload, state, run_at) VALUES ('noop', %s::json, 'queued', %s) "
    "RETURNING id"
)
PG_INSERT_MANY = (
    "INSERT INTO raw_jobs (kind, payload, state, run_at) "
    "SELECT 'noop', p::json, 'queued', r FROM unnest(%s::text[], %s::bigint[]) AS t(p, r) "
    "RETURNING id"
)
PG_CLAIM = """
UPDATE raw_jobs AS job SET state = 'running', lease_until = %(lease)s, attempts = job.attempts + 1
FROM (SELECT id FROM raw_jobs WHERE state = 'queued' AND run_at <= %(now)s
      ORDER BY run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) AS picked
WHERE job.id = picked.id
RETURNING job.id, job.payload::text, job.attempts
"""
PG_DONE = "DELETE FROM raw_jobs WHERE id = ANY(%s)"

SQLITE_INSERT = (
    "INSERT INTO raw_jobs (kind, payload, state, run_at) VALUES ('noop', ?, 'queued', ?) "
    "RETURNING id"
)
SQLITE_INSERT_MANY = (
    "INSERT INTO raw_jobs (kind, payload, state, run_at) VALUES ('noop', ?, 'queued', ?)"
)
MARIA_INSERT = (
    "INSERT INTO raw_jobs (kind, payload, state, run_at, pushed_at) "
    "VALUES ('noop', %s, 'queued', %s, %s)"
)
"""Its id is the connection's last insert id, which the server's answer carries (no round trip
more), as for the store's push."""
MARIA_PICK = (
    "SELECT id, payload, attempts FROM raw_jobs FORCE INDEX (raw_jobs_due) "
    "WHERE state = 'queued' AND kind = 'noop' AND run_at <= %s "
    "ORDER BY run_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
)
MARIA_TAKE = (
    "UPDATE raw_jobs SET state = 'running', lease_until = %s, attempts = attempts + 1 "
    "WHERE id IN ({})"
)
MARIA_DONE = "DELETE FROM raw_jobs WHERE id IN ({})"

SQLITE_CLAIM = """
UPDATE raw_jobs SET state = 'running', lease_until = :lease, attempts = attempts + 1
WHERE id IN (SELECT id FROM raw_jobs WHERE state = 'queued' AND run_at <= :now
             ORDER BY run_at, id LIMIT :limit)
RETURNING id, payload, attempts
"""


def now_us() -> int:
    return time.time_ns() // 1_000


def payload(i: int) -> str:
    return f'{{"i":{i}}}'


# -------------------------------------------------------------------------------- PostgreSQL


async def pg_connect(url: str) -> Any:
    import psycopg

    return await psycopg.AsyncConnection.connect(url, autocommit=True)


async def pg_ready(url: str) -> Any:
    conn = await pg_connect(url)
    for statement in PG_DDL.split(";"):
        if statement.strip():
            await conn.execute(statement)
    return conn


async def pg_insert_loop(
    conn: Any, first: int, count: int, explicit: bool, watch: common.Stopwatch
) -> None:
    """One row per transaction: by default a lone INSERT in autocommit (one round trip, the
    server commits it); `explicit` wraps each in BEGIN … COMMIT (three round trips)."""
    for i in range(first, first + count):
        if watch.over():
            return
        watch.done += 1
        if explicit:
            async with conn.transaction():
                cur = await conn.execute(PG_INSERT, (payload(i), now_us()))
                await cur.fetchone()
        else:
            cur = await conn.execute(PG_INSERT, (payload(i), now_us()))
            await cur.fetchone()


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


# ---------------------------------------------------------------------------------- MariaDB


async def maria_connect(url: str) -> Any:
    """An asyncmy connection in autocommit, with the session the store sets (UTC, strict,
    READ COMMITTED: a locking read locks only the rows it takes, no gap locks)."""
    import asyncmy

    conn = await asyncmy.connect(**common.mysql_params(url), charset="utf8mb4", autocommit=True)
    async with conn.cursor() as cur:
        await cur.execute(
            "SET SESSION time_zone = '+00:00', "
            "SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'"
        )
        await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return conn


async def maria_ready(url: str) -> Any:
    conn = await maria_connect(url)
    async with conn.cursor() as cur:
        await cur.execute(MARIA_DDL)
    return conn


async def maria_insert(cur: Any, i: int) -> int:
    """One row in autocommit (one round trip: the server commits it); its id."""
    now = now_us()
    await cur.execute(MARIA_INSERT, (payload(i), now, now))
    return int(cur.lastrowid)


async def _maria_fill(conn: Any, jobs: int) -> None:
    async with conn.cursor() as cur:
        for first in range(0, jobs, 1_000):
            idx = range(first, min(first + 1_000, jobs))
            at = now_us()
            marks = ", ".join(["('noop', %s, 'queued', %s)"] * len(idx))
            params = [value for i in idx for value in (payload(i), at)]
            await cur.execute(
                f"INSERT INTO raw_jobs (kind, payload, state, run_at) VALUES {marks}", params
            )


async def maria_w2(args: argparse.Namespace) -> dict[str, Any]:
    """Raw W2 on MariaDB: `--workers` loops, each on its own connection, of: BEGIN, a locking
    read of `--claim` due rows (SKIP LOCKED), an UPDATE of them, COMMIT; then BEGIN, DELETE
    them, COMMIT."""
    first = await maria_ready(args.url)
    if not args.no_fill:
        await _maria_fill(first, args.jobs)
    conns = [first, *[await maria_connect(args.url) for _ in range(args.workers - 1)]]
    done = 0
    finished = asyncio.Event()
    ended_at = 0.0

    async def worker(conn: Any) -> None:
        nonlocal done, ended_at
        async with conn.cursor() as cur:
            while not finished.is_set():
                if args.cap_s > 0 and time.perf_counter() - began > args.cap_s:
                    ended_at = time.perf_counter()
                    finished.set()
                    return
                now = now_us()
                await conn.begin()
                await cur.execute(MARIA_PICK, (now, args.claim))
                ids = [r[0] for r in await cur.fetchall()]
                if ids:
                    marks = ", ".join(["%s"] * len(ids))
                    await cur.execute(MARIA_TAKE.format(marks), (now + 60_000_000, *ids))
                await conn.commit()
                if not ids:
                    await asyncio.sleep(0.001)
                    continue
                await conn.begin()
                await cur.execute(MARIA_DONE.format(marks), ids)
                await conn.commit()
                done += len(ids)
                if done >= args.jobs and not finished.is_set():
                    ended_at = time.perf_counter()
                    finished.set()

    began = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    for conn in conns:
        conn.close()
    return common.rate(
        min(done, args.jobs),
        ended_at - began,
        capped=done < args.jobs,
        claim=args.claim,
        connections=len(conns),
    )


# ----------------------------------------------------------------------------------- SQLite


def sqlite_ready(url: str) -> sqlite3.Connection:
    conn = sqlite3.connect(common.sqlite_path(url), isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.executescript(SQLITE_DDL)
    return conn


# -------------------------------------------------------------------------------- workloads


async def w1_one(args: argparse.Namespace, explicit: bool = False) -> dict[str, Any]:
    """INSERT … RETURNING id and its commit, one row at a time, on one connection."""
    if common.is_sqlite(args.url):
        conn = sqlite_ready(args.url)
        watch = common.Stopwatch(args.cap_s)
        for i in range(args.jobs):
            if watch.over():
                break
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(SQLITE_INSERT, (payload(i), now_us())).fetchone()
            conn.execute("COMMIT")
            watch.done += 1
        return watch.result(args.jobs, connections=1)
    if common.is_mysql(args.url):
        assert not explicit, "MariaDB: the lone INSERT in autocommit only"
        maria = await maria_ready(args.url)
        watch = common.Stopwatch(args.cap_s)
        async with maria.cursor() as cur:
            for i in range(args.jobs):
                if watch.over():
                    break
                await maria_insert(cur, i)
                watch.done += 1
        maria.close()
        return watch.result(args.jobs, connections=1)
    conn = await pg_ready(args.url)
    watch = common.Stopwatch(args.cap_s)
    await pg_insert_loop(conn, 0, args.jobs, explicit, watch)
    return watch.result(args.jobs, connections=1, explicit=explicit)


async def w1_one_tx(args: argparse.Namespace) -> dict[str, Any]:
    """w1_one with BEGIN … COMMIT around each INSERT."""
    return await w1_one(args, explicit=True)


async def w1_pool16(args: argparse.Namespace, explicit: bool = False) -> dict[str, Any]:
    """The same INSERT+COMMIT from `--connections` connections at once (one task each)."""
    if common.is_sqlite(args.url):
        return {"skipped": "one SQLite connection is the baseline (w1_one)"}
    first = await pg_ready(args.url)
    conns = [first, *[await pg_connect(args.url) for _ in range(args.connections - 1)]]
    shares = split(args.jobs, len(conns))
    starts = [sum(shares[:k]) for k in range(len(shares))]
    watch = common.Stopwatch(args.cap_s)
    await asyncio.gather(
        *(
            pg_insert_loop(c, s, n, explicit, watch)
            for c, s, n in zip(conns, starts, shares, strict=True)
        )
    )
    return watch.result(args.jobs, connections=len(conns), explicit=explicit)


async def w1_pool16_tx(args: argparse.Namespace) -> dict[str, Any]:
    """w1_pool16 with BEGIN … COMMIT around each INSERT."""
    return await w1_pool16(args, explicit=True)


async def w1_bulk(args: argparse.Namespace) -> dict[str, Any]:
    """One multi-row INSERT (unnest on PostgreSQL, executemany on SQLite) per `--batch`."""
    if common.is_sqlite(args.url):
        conn = sqlite_ready(args.url)
        began = time.perf_counter()
        for first in range(0, args.jobs, args.batch):
            rows = [
                (payload(i), now_us()) for i in range(first, min(first + args.batch, args.jobs))
            ]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(SQLITE_INSERT_MANY, rows)
            conn.execute("COMMIT")
        return common.rate(args.jobs, time.perf_counter() - began, batch=args.batch)
    conn = await pg_ready(args.url)
    began = time.perf_counter()
    for first in range(0, args.jobs, args.batch):
        idx = range(first, min(first + args.batch, args.jobs))
        at = now_us()
        cur = await conn.execute(PG_INSERT_MANY, ([payload(i) for i in idx], [at for _ in idx]))
        await cur.fetchall()
    return common.rate(args.jobs, time.perf_counter() - began, batch=args.batch)


async def _pg_fill(conn: Any, jobs: int) -> None:
    for first in range(0, jobs, 1_000):
        idx = range(first, min(first + 1_000, jobs))
        at = now_us()
        await conn.execute(PG_INSERT_MANY, ([payload(i) for i in idx], [at for _ in idx]))


async def w2(args: argparse.Namespace) -> dict[str, Any]:
    """`--jobs` rows queued first; then `--workers` loops, each on its own connection (PG,
    MariaDB) or all on the one connection (SQLite), of: claim `--claim` rows (SKIP LOCKED on PG
    and MariaDB) and commit, then delete them and commit."""
    if common.is_sqlite(args.url):
        conn = sqlite_ready(args.url)
        if not args.no_fill:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(SQLITE_INSERT_MANY, [(payload(i), now_us()) for i in range(args.jobs)])
            conn.execute("COMMIT")
        watch = common.Stopwatch(args.cap_s)
        while watch.done < args.jobs and not watch.over():
            conn.execute("BEGIN IMMEDIATE")
            now = now_us()
            rows = conn.execute(
                SQLITE_CLAIM, {"lease": now + 60_000_000, "now": now, "limit": args.claim}
            ).fetchall()
            conn.execute("COMMIT")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                f"DELETE FROM raw_jobs WHERE id IN ({','.join('?' * len(rows))})",
                [r[0] for r in rows],
            )
            conn.execute("COMMIT")
            watch.done += len(rows)
        return watch.result(args.jobs, claim=args.claim, connections=1)
    if common.is_mysql(args.url):
        return await maria_w2(args)
    first = await pg_ready(args.url)
    if not args.no_fill:
        await _pg_fill(first, args.jobs)
    conns = [first, *[await pg_connect(args.url) for _ in range(args.workers - 1)]]
    done = 0
    finished = asyncio.Event()
    ended_at = 0.0

    async def worker(conn: Any) -> None:
        nonlocal done, ended_at
        while not finished.is_set():
            if args.cap_s > 0 and time.perf_counter() - began > args.cap_s:
                ended_at = time.perf_counter()
                finished.set()
                return
            now = now_us()
            async with conn.transaction():
                cur = await conn.execute(
                    PG_CLAIM, {"lease": now + 60_000_000, "now": now, "limit": args.claim}
                )
                rows = await cur.fetchall()
            if not rows:
                await asyncio.sleep(0.001)
                continue
            async with conn.transaction():
                await conn.execute(PG_DONE, ([r[0] for r in rows],))
            done += len(rows)
            if done >= args.jobs and not finished.is_set():
                ended_at = time.perf_counter()
                finished.set()

    began = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    return common.rate(
        min(done, args.jobs),
        ended_at - began,
        capped=done < args.jobs,
        claim=args.claim,
        connections=len(conns),
    )


async def w3_inproc(args: argparse.Namespace) -> dict[str, Any]:
    """The floor of W3 in one process: the latency of the push's own INSERT and its durable
    commit alone (a run could start no sooner), sampled like nilo's W3 (a short pause between
    samples). PostgreSQL: one autocommit INSERT on an async connection; SQLite: BEGIN
    IMMEDIATE, INSERT, COMMIT (synchronous=FULL) on the calling thread."""
    sqlite = common.is_sqlite(args.url)
    lite = sqlite_ready(args.url) if sqlite else None
    pg = None if sqlite else await pg_ready(args.url)
    latencies: list[int] = []
    warm = max(3, args.samples // 20)
    for i in range(warm + args.samples):
        before = time.perf_counter_ns()
        if lite is not None:
            lite.execute("BEGIN IMMEDIATE")
            lite.execute(SQLITE_INSERT, (payload(i), now_us())).fetchone()
            lite.execute("COMMIT")
        else:
            cur = await pg.execute(PG_INSERT, (payload(i), now_us()))
            await cur.fetchone()
        if i >= warm:
            latencies.append(time.perf_counter_ns() - before)
        await asyncio.sleep(0.005)
    return common.percentiles(latencies)


if __name__ == "__main__":
    common.main(
        {
            "w1_one": w1_one,
            "w1_one_tx": w1_one_tx,
            "w1_pool16": w1_pool16,
            "w1_pool16_tx": w1_pool16_tx,
            "w1_bulk": w1_bulk,
            "w2": w2,
            "w3_inproc": w3_inproc,
        },
        loop="auto",
    )
