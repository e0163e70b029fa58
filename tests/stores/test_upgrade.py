"""A table made by an earlier nilo-job (version 1, before versions were recorded, and versions
2 to 6) keeps every row through `create_missing()` / `nilo-job migrate`, in place, while
workers of that version run.

The older tables and their statements are the ones nilo-job shipped then
(`tests/helpers/schema_v1/` to `schema_v6/`), so "an old worker" here runs the old statements
for real against the upgraded table.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

import nilo_job as job
from tests.helpers import ROOT

SCHEMAS = ROOT / "tests" / "helpers"
"""Where `schema_v1/` to `schema_v6/` are: the tables and statements of those versions."""
T = 1_700_000_000_000_000
LEASE = 61_000_000


def statements(store: str, version: int) -> dict[str, str]:
    """The named statements of an older version of a store."""
    text = (SCHEMAS / f"schema_v{version}" / f"{store}.sql").read_text()
    parts = re.split(r"^-- name: (\w+)\s*$", text, flags=re.MULTILINE)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


class Db:
    """The database under an older table, through the driver (as an old worker sees it)."""

    def __init__(self, kind: str, url: str, path: Path | None, version: int) -> None:
        self.kind, self.url, self.path, self.version = kind, url, path, version
        self.sql = statements(kind, version)

    @contextlib.contextmanager
    def connect(self) -> Iterator[Any]:
        """A connection in autocommit, closed after the block (sqlite3's own `with` does not
        close)."""
        if self.kind == "sqlite":
            with contextlib.closing(
                sqlite3.connect(self.path, isolation_level=None, timeout=30)
            ) as conn:
                yield conn
        else:
            with psycopg.connect(self.url, autocommit=True) as conn:
                yield conn

    def run(self, conn: Any, name: str, params: Any = ()) -> list[Any]:
        statement = self.sql[name]
        if self.kind == "sqlite":
            return conn.execute(statement, params).fetchall()
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []

    def script(self, conn: Any, name: str) -> None:
        for statement in self.sql[name].split(";"):
            if statement.strip():
                conn.execute(statement)

    def push(self, conn: Any, payload: str) -> list[Any]:
        """An old worker's push of a queued "mail" row due at T, without a unique key."""
        if self.kind == "sqlite" and self.version >= 5:
            return self.run(
                conn, "push", ("mail", payload, "queued", T, 0, None, None, None, None, None, None)
            )
        if self.kind == "sqlite" and self.version >= 3:
            return self.run(
                conn, "push", ("mail", payload, "queued", T, 0, None, None, None, None, None)
            )
        if self.kind == "sqlite":
            return self.run(conn, "push", ("mail", payload, "queued", T, 0, None, None))
        if self.version >= 5:
            return self.run(conn, "push", ("mail", payload, T, None, None))
        if self.version >= 3:
            return self.run(conn, "push", ("mail", payload, T, None))
        return self.run(conn, "push", ("mail", payload, T))

    def claim_params(self, limit: int) -> dict[str, Any]:
        """An old worker's claim of "mail" rows at T + 1."""
        params: dict[str, Any] = {
            "now": T + 1,
            "lease_until": T + LEASE,
            "limit": limit,
            "kinds": '["mail"]' if self.kind == "sqlite" else ["mail"],
        }
        if self.version >= 3:
            params["worker"] = None
        return params

    def rows(self) -> list[tuple[Any, ...]]:
        """Every row, by id, in version 1's columns."""
        with self.connect() as conn:
            return [
                tuple(row)
                for row in conn.execute(
                    "SELECT id, kind, payload, state, run_at, lease_until, attempts, unique_key, "
                    "error, detail, died_at FROM nilo_jobs ORDER BY id"
                ).fetchall()
            ]


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry(times=2)

    to: str

    async def run(self, tick: job.Tick) -> None:
        ran.append((self.to, tick.attempts))


ran: list[tuple[str, int]] = []


@pytest.fixture(
    params=[
        ("sqlite", 1), ("sqlite", 2), ("sqlite", 3), ("sqlite", 4), ("sqlite", 5), ("sqlite", 6),
        ("postgres", 1), ("postgres", 2), ("postgres", 3), ("postgres", 4), ("postgres", 5),
        ("postgres", 6),
    ],
    ids=[
        "sqlite-v1", "sqlite-v2", "sqlite-v3", "sqlite-v4", "sqlite-v5", "sqlite-v6",
        "postgres-v1", "postgres-v2", "postgres-v3", "postgres-v4", "postgres-v5", "postgres-v6",
    ],
)  # fmt: skip
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    """An older table holding a row in every state."""
    store, version = request.param
    if store == "sqlite":
        path = tmp_path / f"v{version}.db"
        found = Db("sqlite", f"sqlite:///{path}", path, version)
    else:
        url: str = request.getfixturevalue("pg_url")
        with psycopg.connect(url, autocommit=True) as conn:
            for table in (
                "nilo_jobs", "nilo_jobs_version", "nilo_jobs_done", "nilo_jobs_paused",
                "nilo_jobs_workers", "nilo_jobs_attempts", "nilo_jobs_deaths",
            ):  # fmt: skip
                conn.execute(f"DROP TABLE IF EXISTS {table}")
        found = Db("postgres", url, None, version)
    with found.connect() as conn:
        found.script(conn, "create")
        if version >= 2:
            conn.execute(found.sql["set_version"], (version, 1))
        columns = "kind, payload, state, run_at, lease_until, attempts, unique_key, error, detail"
        mark = "?" if found.kind == "sqlite" else "%s"
        insert = f"INSERT INTO nilo_jobs ({columns}, died_at) VALUES ({', '.join([mark] * 10)})"
        wait = T + 60_000_000
        for row in (
            ("mail", '{"to":"due@x"}', "queued", T, None, 0, "k1", None, None, None),
            ("mail", '{"to":"waits@x"}', "queued", wait, None, 1, None, "Boom", "down", None),
            ("mail", '{"to":"orphan@x"}', "running", T, T - 1, 1, None, None, None, None),
            ("mail", '{"to":"held@x"}', "running", T, T + LEASE, 1, "k2", None, None, None),
            ("mail", '{"to":"dead@x"}', "dead", T, None, 3, None, "Rejected", "no such address", T),
            ("other", '{"any":1}', "queued", T, None, 0, None, None, None, None),
        ):  # fmt: skip
            conn.execute(insert, row)
    return found


async def store_deaths(jobs: job.Jobs) -> list[int]:
    """The deaths `ended` counts since T's minute, by (kind, minute)."""
    since = T - T % 60_000_000
    return [n for _kind, state, _minute, n in await jobs.store.ended(since) if state == "dead"]


def open_table(db: Db) -> job.Table:
    return job.Table(db.url)


async def test_an_older_table_is_refused_with_the_command_that_upgrades_it(db: Db) -> None:
    table = open_table(db)
    jobs = job.Jobs(kinds=[Mail], store=table)
    try:
        with pytest.raises(job.StoreUnavailable) as refused:
            await table.check()
        message = str(refused.value)
        said = f"is at version {db.version}, from an older nilo-job, and this one needs version 7"
        assert said in message
        target = db.url if db.kind == "sqlite" else db.url.removeprefix("postgresql://postgres@")
        assert "run `nilo-job migrate " in message
        assert target.split("/")[-1] in message
        with pytest.raises(job.StoreUnavailable, match="from an older nilo-job"):
            await jobs.serve()
        assert await jobs.ready() is False
    finally:
        await table.close()


async def test_the_upgrade_keeps_every_row_and_the_queue_runs_them(db: Db) -> None:
    before = db.rows()
    table = open_table(db)
    jobs = job.Jobs(kinds=[Mail], store=table)
    ran.clear()
    try:
        await table.create_missing()
        await table.check()
        assert db.rows() == before
        with db.connect() as conn:
            added = conn.execute("SELECT id, snoozes, trace FROM nilo_jobs ORDER BY id").fetchall()
        assert [tuple(row) for row in added] == [(n, 0, None) for n in range(1, 7)]
        with db.connect() as conn:  # version 6's registry, empty
            assert tuple(conn.execute("SELECT count(*) FROM nilo_jobs_workers").fetchone()) == (0,)
        # Version 7's attempts: the dead row's death, recorded as its last attempt (counted by
        # the flow in its minute), and nothing for the others.
        dead_row = await jobs.row(5)
        assert dead_row is not None
        assert dead_row.attempts_log == (
            job.Attempt(3, "dead", None, T, None, "Rejected", "no such address", None),
        )
        for n in (1, 2, 3, 4, 6):
            other = await jobs.row(n)
            assert other is not None
            assert other.attempts_log == ()
        assert sum(await store_deaths(jobs)) == 1
        for n in range(1, 7):
            kept = await jobs.row(n)
            assert kept is not None
            assert kept.snoozes == 0
        assert await jobs.stats() == (3, 2, 1)
        (dead,) = await jobs.dead_ones()
        assert (dead.error, dead.message, dead.traceback) == ("Rejected", "no such address", "")
        assert await jobs.drain_at(T) == 2  # the due row, and the orphan whose lease ran out
        assert sorted(ran) == [("due@x", 1), ("orphan@x", 2)]
        assert await jobs.drain_at(T + 60_000_000) == 1  # the one waiting for its retry
        assert await jobs.stats() == (1, 1, 1)  # "other" (not ours), the held row, the dead one
        assert await jobs.push(Mail("again@x"), unique="k2") is None  # the held row's key
        assert await jobs.retry_dead(dead.id)
        ran.clear()
        assert await jobs.drain() == 2  # the dead one again, and the held one: its lease is past
        assert sorted(ran) == [("dead@x", 1), ("held@x", 2)]
        assert await jobs.stats() == (1, 0, 0)
    finally:
        await table.close()


def test_migrate_upgrades_and_says_so_and_again_changes_nothing(db: Db) -> None:
    before = db.rows()
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "nilo_job", "migrate", db.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("nilo_jobs is ready in ")
        assert db.rows() == before
    with db.connect() as conn:
        recorded = conn.execute("SELECT version, compatible_from FROM nilo_jobs_version")
        assert [tuple(r) for r in recorded] == [(7, 1)]


async def test_upgrades_racing_from_many_processes_make_one_table(db: Db) -> None:
    before = db.rows()
    tables = [open_table(db) for _ in range(6)]
    try:
        await asyncio.gather(*(table.create_missing() for table in tables))
    finally:
        for table in tables:
            await table.close()
    assert db.rows() == before
    with db.connect() as conn:
        recorded = conn.execute("SELECT version, compatible_from FROM nilo_jobs_version")
        assert [tuple(r) for r in recorded] == [(7, 1)]


async def test_workers_of_an_older_version_keep_working_on_the_upgraded_table(db: Db) -> None:
    table = open_table(db)
    await table.create_missing()
    await table.close()
    mark = "?" if db.kind == "sqlite" else "%s"
    with db.connect() as conn:
        pushed = db.push(conn, '{"to":"old@x"}')
        assert pushed
        assert pushed[0][0] > 0
        claimed = db.run(conn, "claim", db.claim_params(1))
        assert [row[0] for row in claimed] == [1]  # the due row first, by run_at then id
        died = db.sql["died"]
        trace = (None,) if db.version == 1 else ("Traceback ...",)
        if db.version == 1:
            conn.execute(died, (T + 2, "Boom", "old worker", claimed[0][0], claimed[0][3]))
        else:
            conn.execute(died, (T + 2, "Boom", "old worker", *trace, *claimed[0][:4:3]))
        row = conn.execute(
            f"SELECT state, error, detail, traceback FROM nilo_jobs WHERE id = {mark}",
            (claimed[0][0],),
        ).fetchone()
        assert tuple(row) == ("dead", "Boom", "old worker", *trace)
        # The new version reads the old worker's rows, and its own columns are empty there.
        table = open_table(db)
        try:
            found = await job.Jobs(kinds=[Mail], store=table).row(claimed[0][0])
            old = await job.Jobs(kinds=[Mail], store=table).row(pushed[0][0])
        finally:
            await table.close()
        assert found is not None
        assert (found.state, found.error, found.pushed_at, found.worker, found.snoozes) == (
            "dead", "Boom", None, None, 0
        )  # fmt: skip
        assert old is not None
        assert (old.state, old.snoozes) == ("queued", 0)  # pushed by the old worker: the default
        traced = conn.execute(
            f"SELECT trace FROM nilo_jobs WHERE id = {mark}", (pushed[0][0],)
        ).fetchone()
        assert tuple(traced) == (None,)  # an old worker's push records no trace


async def test_the_upgrade_under_load_loses_nothing(db: Db) -> None:
    """Old workers claim and finish rows while the table is upgraded beneath them."""
    with db.connect() as conn:
        for n in range(2_000):
            db.push(conn, f'{{"to":"{n}@x"}}')
    errors: list[BaseException] = []
    finished: list[int] = []
    stop = threading.Event()

    def old_worker() -> None:
        try:
            with db.connect() as conn:
                while not stop.is_set():
                    params = db.claim_params(5)
                    if db.kind == "sqlite":
                        conn.execute("BEGIN IMMEDIATE")
                        rows = conn.execute(db.sql["claim"], params).fetchall()
                        conn.execute("COMMIT")
                    else:
                        rows = conn.execute(db.sql["claim"], params).fetchall()
                    if not rows:
                        return
                    for row in rows:
                        conn.execute(db.sql["done"], (row[0], row[3]))
                        finished.append(row[0])
        except BaseException as error:
            errors.append(error)

    workers = [threading.Thread(target=old_worker) for _ in range(2)]
    for thread in workers:
        thread.start()
    # Two old workers writing without a pause can keep SQLite's lock for as long as the rows
    # last on a loaded machine (its busy handler is not fair): the upgrade waits them out.
    table = job.Table(db.url, busy_timeout_ms=120_000) if db.kind == "sqlite" else open_table(db)
    try:
        await table.create_missing()
        await table.check()
    finally:
        await table.close()
        for thread in workers:
            thread.join(60)
        stop.set()
    assert errors == []
    remaining = {row[0] for row in db.rows()}
    # Every row pushed is either finished (once) or still there; the fixture's rows are there.
    assert len(finished) == len(set(finished))
    assert not remaining & set(finished)
    assert len(remaining) + len(finished) == 2_006


async def test_a_newer_table_that_still_works_here_is_used_and_left_as_it_is(db: Db) -> None:
    """A rolled-back deploy: the table was upgraded by a newer nilo-job whose steps this version
    can live with."""
    table = open_table(db)
    await table.create_missing()
    with db.connect() as conn:
        conn.execute("UPDATE nilo_jobs_version SET version = 9, compatible_from = 2")
    try:
        await table.check()
        await table.create_missing()
    finally:
        await table.close()
    with db.connect() as conn:
        recorded = conn.execute("SELECT version, compatible_from FROM nilo_jobs_version")
        assert [tuple(r) for r in recorded] == [(9, 2)]


async def test_a_table_from_a_newer_nilo_job_is_refused_and_left_as_it_is(db: Db) -> None:
    table = open_table(db)
    await table.create_missing()
    with db.connect() as conn:
        conn.execute("UPDATE nilo_jobs_version SET version = 9, compatible_from = 9")
    before = db.rows()
    try:
        for call in (table.check, table.create_missing):
            with pytest.raises(
                job.StoreUnavailable, match="at version 9, from a newer nilo-job than this one can"
            ):
                await call()
    finally:
        await table.close()
    assert db.rows() == before
    with db.connect() as conn:
        recorded = conn.execute("SELECT version, compatible_from FROM nilo_jobs_version")
        assert [tuple(r) for r in recorded] == [(9, 9)]
