"""A `nilo_jobs` table whose tables beside it are not all there (one dropped, or an Alembic-managed
schema not migrated since nilo-job added tables) is refused by `check()`, so by `serve` and the
commands, with a sentence naming exactly the missing tables and what to run; `nilo-job migrate`
makes them again, keeping every row, whatever the version record says; and a statement that
meets a missing table at run time names that table.

Each case runs on a SQLite file, on a PostgreSQL database of its own (`pg_url`), and on a schema
of that database named by the URL's search_path, with the tables in `public` left there: what
the connection's search_path finds is what counts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

import nilo_job as job
from nilo_job.store.contract import WorkerEntry

SIDE_TABLES = (
    "nilo_jobs_done", "nilo_jobs_paused", "nilo_jobs_workers", "nilo_jobs_attempts",
    "nilo_jobs_deaths", "nilo_jobs_version",
)  # fmt: skip
"""The tables beside nilo_jobs, each dropped in turn."""
TABLES = ("nilo_jobs", *SIDE_TABLES)
T = 1_700_000_000_000_000

APP = """\
import os
from dataclasses import dataclass

import nilo_job as job


@dataclass
class Mail:
    nilo_job = "mail"
    aliases = ("send-mail",)
    retry = job.Retry.NONE

    to: str

    def run(self) -> None:
        pass


jobs = job.Jobs(kinds=[Mail], store=job.Table(os.environ["APP_DB"]))
"""
"""A queue over the database in APP_DB, for `nilo-job worker` and `nilo-job check` (a kind with
an old name, so that check says why it did not read the table)."""


class Rejected(Exception):
    pass


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry(times=2, backoff=job.Exponential(from_ms=60_000, to_ms=60_000))
    final = (Rejected,)

    to: str
    fail: str = ""

    def run(self) -> str:
        if self.fail == "final":
            raise Rejected(f"550 {self.to}")
        if self.fail == "again":
            raise ConnectionError("421 try later")
        return "sent"


@dataclass
class Db:
    """A database with nilo-job's tables, and what the sentences call it."""

    url: str
    path: Path | None  # the SQLite file; None on PostgreSQL

    @contextlib.contextmanager
    def connect(self) -> Iterator[Any]:
        if self.path is not None:
            with contextlib.closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
                yield conn
        else:
            with psycopg.connect(self.url, autocommit=True) as conn:
                yield conn

    def drop(self, *names: str) -> None:
        with self.connect() as conn:
            for name in names:
                conn.execute(f"DROP TABLE {name}")

    def dump(self) -> dict[str, list[str]]:
        """Every row of every nilo-job table the connection finds (a missing table: absent), as
        text in a stable order."""
        found: dict[str, list[str]] = {}
        with self.connect() as conn:
            for name in TABLES:
                try:
                    rows = conn.execute(f"SELECT * FROM {name}").fetchall()
                except (sqlite3.OperationalError, psycopg.errors.UndefinedTable):
                    continue
                found[name] = sorted(repr(tuple(row)) for row in rows)
        return found

    def checked_in(self, table: job.Table) -> str:
        """Where `check()`'s sentences say the table is."""
        return str(self.path) if self.path is not None else repr(table)

    def ran_in(self, table: job.Table) -> str:
        """Where a statement's sentence says the table is: the file, or `host:port/dbname`."""
        if self.path is not None:
            return str(self.path)
        shown = repr(table).removeprefix("job.Table('postgresql://").removesuffix("')")
        return shown.rpartition("@")[2]  # (the repr keeps the user; sentences name the place)


@pytest.fixture(
    params=[("sqlite", None), ("postgres", None), ("postgres", "app")],
    ids=["sqlite", "postgres", "postgres-schema"],
)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Db:
    """A database with no nilo-job table yet where the URL looks (the PostgreSQL schema case's
    `public` keeps the fixture's empty tables, which it must not see)."""
    kind, schema = request.param
    if kind == "sqlite":
        path = tmp_path / "q.db"
        return Db(f"sqlite:///{path}", path)
    url: str = request.getfixturevalue("pg_url")
    if schema is None:
        found = Db(url, None)
        found.drop(*TABLES)
        return found
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return Db(f"{url}?options=-csearch_path%3D{schema}", None)


async def fill(db: Db) -> dict[str, list[str]]:
    """Make the tables and put rows in every one of them: a done row, a row waiting for its
    retry, a dead row (their attempts and the death counted), a row due later, a paused kind, a
    registered worker and the version record. Answers `db.dump()`."""
    table = job.Table(db.url)
    try:
        await table.create_missing()
        jobs = job.Jobs(kinds=[Mail], store=table)
        await jobs.push(Mail("a@x"), at=T)
        await jobs.push(Mail("b@x", fail="again"), at=T)
        await jobs.push(Mail("c@x", fail="final"), at=T)
        await jobs.push(Mail("d@x"), at=T + 3_600_000_000, unique="later")
        assert await jobs.drain_at(T) == 3
        assert await jobs.stats() == (2, 0, 1)
        assert await table.pause("report", T)
        await table.register(
            WorkerEntry("web-1:7:1", "web-1", 7, "0.1.0", ("mail",), 4, 5_000, T, T, (2,))
        )
    finally:
        await table.close()
    found = db.dump()
    assert {name: len(rows) for name, rows in found.items()} == {
        "nilo_jobs": 3, "nilo_jobs_done": 1, "nilo_jobs_paused": 1, "nilo_jobs_workers": 1,
        "nilo_jobs_attempts": 2, "nilo_jobs_deaths": 1, "nilo_jobs_version": 1,
    }  # fmt: skip
    return found


def lacks(where: str, url: str, *names: str) -> str:
    """The sentence for a table in `where` that lacks `names` (in alphabetical order)."""
    if len(names) == 1:
        return (
            f"the nilo_jobs table in {where} lacks {names[0]}, a table beside it that this "
            f"nilo-job needs: run `nilo-job migrate {url}` to create it (every row is kept), or, "
            "where Alembic manages the schema, autogenerate a migration (`alembic revision "
            "--autogenerate`) and run it (`alembic upgrade head`)"
        )
    listed = f"{', '.join(names[:-1])} and {names[-1]}"
    return (
        f"the nilo_jobs table in {where} lacks {listed}, tables beside it that this nilo-job "
        f"needs: run `nilo-job migrate {url}` to create them (every row is kept), or, where "
        "Alembic manages the schema, autogenerate a migration (`alembic revision "
        "--autogenerate`) and run it (`alembic upgrade head`)"
    )


async def nilo_job(*args: str, cwd: Path, url: str) -> tuple[int, str, str]:
    """`nilo-job *args` in a process of its own (over APP_DB=url): its status, stdout, stderr."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nilo_job", *args,
        cwd=cwd,
        env={**os.environ, "APP_DB": url},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(child.communicate(), timeout=60)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def refused_by_check(db: Db) -> str:
    table = job.Table(db.url)
    try:
        with pytest.raises(job.StoreUnavailable) as refused:
            await table.check()
        assert str(refused.value).startswith(f"the nilo_jobs table in {db.checked_in(table)} ")
        jobs = job.Jobs(kinds=[Mail], store=table)
        with pytest.raises(job.StoreUnavailable) as refused_serve:
            await jobs.serve()
        assert str(refused_serve.value) == str(refused.value)
        assert await jobs.ready() is False
        return str(refused.value)
    finally:
        await table.close()


@pytest.mark.parametrize("missing", SIDE_TABLES)
async def test_a_missing_table_is_named_by_check_serve_and_the_commands_and_migrate_makes_it(
    db: Db, missing: str, tmp_path: Path
) -> None:
    before = await fill(db)
    db.drop(missing)
    table = job.Table(db.url)
    try:
        said = lacks(db.checked_in(table), db.url, missing)
        assert await refused_by_check(db) == said

        (tmp_path / "app.py").write_text(APP)
        worker, check, stats = await asyncio.gather(
            nilo_job("worker", "app:jobs", cwd=tmp_path, url=db.url),
            nilo_job("check", "app:jobs", cwd=tmp_path, url=db.url),
            nilo_job("stats", db.url, cwd=tmp_path, url=db.url),
        )
        assert (worker[0], worker[1], worker[2].splitlines()[-1]) == (1, "", f"Error: {said}")
        assert check == (
            0,
            "ok: 1 kind (mail), lease 61000 ms\n",
            f"the table was not read ({said}): rows of old names are not counted\n",
        )
        assert stats == (1, "", f"Error: {said}\n")

        migrate = await nilo_job("migrate", db.url, cwd=tmp_path, url=db.url)
        assert migrate == (0, f"nilo_jobs is ready in {table!r}\n", "")
        # Every row of the other tables is kept; the one made again is empty, or holds the
        # record.
        kept = {**before, missing: before[missing] if missing == "nilo_jobs_version" else []}
        assert db.dump() == kept
        await table.check()
        assert await job.Jobs(kinds=[Mail], store=table).stats() == (2, 0, 1)
    finally:
        await table.close()


async def test_a_schema_alembic_made_before_three_tables_were_added_is_refused_naming_them(
    db: Db,
) -> None:
    """As Alembic leaves it: the version record empty, so the columns tell the version, and
    the registry, the attempts and the deaths not made (nilo-job upgraded, no migration)."""
    before = await fill(db)
    db.drop("nilo_jobs_workers", "nilo_jobs_attempts", "nilo_jobs_deaths")
    with db.connect() as conn:
        conn.execute("DELETE FROM nilo_jobs_version")
    table = job.Table(db.url)
    try:
        said = lacks(
            db.checked_in(table), db.url,
            "nilo_jobs_attempts", "nilo_jobs_deaths", "nilo_jobs_workers",
        )  # fmt: skip
        assert await refused_by_check(db) == said
        await table.create_missing()
        await table.check()
    finally:
        await table.close()
    after = db.dump()
    # The dead row's death, recorded as its last attempt and counted in its minute, as for a
    # table upgraded from version 6.
    assert {name: len(rows) for name, rows in after.items()} == {
        "nilo_jobs": 3, "nilo_jobs_done": 1, "nilo_jobs_paused": 1, "nilo_jobs_workers": 0,
        "nilo_jobs_attempts": 1, "nilo_jobs_deaths": 1, "nilo_jobs_version": 1,
    }  # fmt: skip
    for name in ("nilo_jobs", "nilo_jobs_done", "nilo_jobs_paused", "nilo_jobs_deaths",
                 "nilo_jobs_version"):  # fmt: skip
        assert after[name] == before[name]


async def test_migrate_on_a_table_with_no_version_record_records_no_death_twice(db: Db) -> None:
    """A table at version 7 whose record is empty (Alembic's) is upgraded from what its columns
    tell (version 5): the dead row's death, already recorded, is not recorded again."""
    before = await fill(db)
    with db.connect() as conn:
        conn.execute("DELETE FROM nilo_jobs_version")
    table = job.Table(db.url)
    try:
        await table.check()
        await table.create_missing()
        await table.check()
    finally:
        await table.close()
    assert db.dump() == before


async def test_a_statement_that_meets_a_missing_table_names_it(db: Db) -> None:
    """What a queue whose table was checked meets when a table beside it goes missing after."""
    await fill(db)
    table = job.Table(db.url)
    jobs = job.Jobs(kinds=[Mail], store=table)
    try:
        await table.check()
        db.drop("nilo_jobs_done")
        said = lacks(db.ran_in(table), db.url, "nilo_jobs_done")
        for call in (jobs.stats, lambda: jobs.row(1)):
            with pytest.raises(job.StoreUnavailable) as refused:
                await call()
            assert str(refused.value) == said
        db.drop("nilo_jobs")
        with pytest.raises(job.StoreUnavailable) as refused:
            await jobs.stats()
        assert str(refused.value) == (
            f"there is no nilo_jobs table in {db.ran_in(table)}: create it with "
            f"`nilo-job migrate {db.url}` (or await table.create_missing())"
        )
    finally:
        await table.close()
