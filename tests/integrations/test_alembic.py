"""Alembic for real: a project whose metadata holds `nilo_jobs_table(metadata)` gets the tables
from `alembic revision --autogenerate`, makes them with `alembic upgrade head`, and has a queue
that works; then autogenerate finds nothing more to do, even after `create_missing()` recorded
the version, and a table an older migration made gets this version's columns from the next
autogenerate. On MariaDB, `nilo_jobs_table(metadata, database="mariadb")` makes the tables
`create_missing()` makes, and autogenerate finds nothing to do on a database `create_missing()`
made. Each test runs the `alembic` command (as the user would) on a fresh PostgreSQL or MariaDB
database, with the migrations folder in `tmp_path`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import nilo_job as job

MODELS = """\
from sqlalchemy import BigInteger, Column, MetaData, Table, Text

from nilo_job.sqlalchemy_table import nilo_jobs_table

metadata = MetaData()
users = Table(
    "users",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("email", Text, nullable=False),
)
nilo_jobs_table(metadata)
"""
"""The application's models: a table of its own, and nilo-job's beside it."""

ran: list[int] = []


@dataclasses.dataclass
class Welcome:
    nilo_job = "welcome"
    retry = job.Retry.NONE

    user_id: int

    def run(self) -> None:
        ran.append(self.user_id)


def alembic(project: Path, *args: str) -> str:
    """Run `alembic *args` in `project` and return what it printed (it logs to stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "error"},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


NILO_TABLES = (
    "nilo_jobs", "nilo_jobs_done", "nilo_jobs_paused", "nilo_jobs_workers", "nilo_jobs_attempts",
    "nilo_jobs_deaths", "nilo_jobs_version",
)  # fmt: skip


@pytest.fixture
def project(pg_url: str, tmp_path: Path) -> Path:
    """An application with an empty database and an Alembic environment over its models."""
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the fixture's table, made by nilo-job
        for table in NILO_TABLES:
            conn.execute(f"DROP TABLE {table}")  # type: ignore[arg-type]
    url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    return alembic_project(tmp_path, url, MODELS)


def alembic_project(tmp_path: Path, url: str, models: str) -> Path:
    """An Alembic environment in `tmp_path` over `models` (models.py), on the database `url`."""
    alembic(tmp_path, "init", "migrations")
    ini = tmp_path / "alembic.ini"
    text, found = re.subn(
        r"(?m)^sqlalchemy\.url = .*$", lambda _: f"sqlalchemy.url = {url}", ini.read_text()
    )
    assert found == 1
    ini.write_text(text)
    env = tmp_path / "migrations" / "env.py"
    assert env.read_text().count("\ntarget_metadata = None\n") == 1
    env.write_text(
        env.read_text().replace(
            "\ntarget_metadata = None\n",
            "\nfrom models import metadata\ntarget_metadata = metadata\n",
        )
    )
    (tmp_path / "models.py").write_text(models)
    return tmp_path


def tables(pg_url: str) -> set[str]:
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    return {row[0] for row in rows}


def version_rows(pg_url: str) -> list[tuple[int, int]]:
    with psycopg.connect(pg_url) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT * FROM nilo_jobs_version").fetchall()]


def the_migration(project: Path, message: str) -> str:
    """The text of the one migration whose message is `message`."""
    (found,) = (p for p in (project / "migrations" / "versions").glob("*.py") if message in p.name)
    return found.read_text()


async def test_autogenerate_makes_the_tables_upgrade_makes_them_and_the_queue_works(
    project: Path, pg_url: str
) -> None:
    said = alembic(project, "revision", "--autogenerate", "-m", "users_and_jobs")
    for table in (
        "users", "nilo_jobs", "nilo_jobs_done", "nilo_jobs_paused", "nilo_jobs_workers",
        "nilo_jobs_attempts", "nilo_jobs_deaths", "nilo_jobs_version",
    ):  # fmt: skip
        assert f"Detected added table '{table}'" in said
    for index in ("nilo_jobs_unique", "nilo_jobs_due", "nilo_jobs_lease", "nilo_jobs_dead"):
        assert f"Detected added index '{index}'" in said
    migration = the_migration(project, "users_and_jobs")
    assert "postgresql_where=sa.text(\"state = 'queued'\")" in migration
    assert "sa.Identity(always=True)" in migration
    assert tables(pg_url) == {"alembic_version"}  # autogenerate only wrote the file

    alembic(project, "upgrade", "head")
    assert tables(pg_url) == {
        "alembic_version", "users", "nilo_jobs", "nilo_jobs_done", "nilo_jobs_paused",
        "nilo_jobs_workers", "nilo_jobs_attempts", "nilo_jobs_deaths", "nilo_jobs_version",
    }  # fmt: skip
    assert version_rows(pg_url) == []  # the migration records no version: the columns tell it

    table = job.Table(pg_url)
    try:
        await table.check()
        jobs = job.Jobs(kinds=[Welcome], store=table)
        ran.clear()
        first = await jobs.push(Welcome(7), unique="welcome:7")
        assert first is not None
        assert await jobs.push(Welcome(7), unique="welcome:7") is None
        assert await jobs.drain() == 1
        assert ran == [7]
        done = await jobs.row(first)
        assert done is not None
        assert done.state == "done"

        assert "No new upgrade operations detected." in alembic(project, "check")
        await table.create_missing()  # what `nilo-job migrate` does: it records the version
        assert version_rows(pg_url) == [(7, 1)]
        assert "No new upgrade operations detected." in alembic(project, "check")
        await table.check()
    finally:
        await table.close()


async def test_a_table_an_older_migration_made_gets_this_versions_columns_from_autogenerate(
    project: Path, pg_url: str
) -> None:
    alembic(project, "revision", "--autogenerate", "-m", "first")
    alembic(project, "upgrade", "head")
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as an older nilo-job's metadata had it
        for column in ("pushed_at", "started_at", "worker", "snoozes", "trace"):
            conn.execute(f"ALTER TABLE nilo_jobs DROP COLUMN {column}")  # type: ignore[arg-type]
        conn.execute("DROP TABLE nilo_jobs_done")
        conn.execute("DROP TABLE nilo_jobs_workers")
        conn.execute("DROP TABLE nilo_jobs_attempts")
        conn.execute("DROP TABLE nilo_jobs_deaths")
        conn.execute(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at) "
            "VALUES ('welcome', '{\"user_id\": 9}', 'queued', 0)"
        )
    table = job.Table(pg_url)
    try:
        with pytest.raises(job.StoreUnavailable, match=r"is at version 2, from an older nilo-job"):
            await table.check()

        said = alembic(project, "revision", "--autogenerate", "-m", "nilo_job_6")
        for column in ("pushed_at", "started_at", "worker", "snoozes", "trace"):
            assert f"Detected added column 'nilo_jobs.{column}'" in said
        assert "Detected added table 'nilo_jobs_done'" in said
        assert "Detected added table 'nilo_jobs_workers'" in said
        assert "Detected added table 'nilo_jobs_attempts'" in said
        assert "Detected added table 'nilo_jobs_deaths'" in said
        migration = the_migration(project, "nilo_job_6")
        assert "op.drop" not in migration.split("def downgrade")[0]
        assert "server_default=sa.text('0')" in migration  # the rows it holds get 0 snoozes
        alembic(project, "upgrade", "head")

        await table.check()
        ran.clear()
        assert await job.Jobs(kinds=[Welcome], store=table).drain() == 1
        assert ran == [9]  # the row the older table held, kept and run
        assert "No new upgrade operations detected." in alembic(project, "check")
    finally:
        await table.close()


# ------------------------------------------------------------------------------- MariaDB

MARIADB_MODELS = MODELS.replace(
    "nilo_jobs_table(metadata)", 'nilo_jobs_table(metadata, database="mariadb")'
)
"""The same application on MariaDB: nilo-job's tables as the MariaDB store makes them."""


@contextlib.contextmanager
def mariadb(url: str) -> Iterator[Any]:
    """A PyMySQL cursor on the database at `url` (a `mariadb://` URL), in autocommit."""
    pymysql = pytest.importorskip("pymysql")
    from nilo_job.store.mysql.connections import server_of

    server = server_of(url)
    conn = pymysql.connect(
        host=server.host, port=server.port, user=server.user, password=server.password,
        database=server.database, autocommit=True,
    )  # fmt: skip
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


def mariadb_project(mariadb_url: str, tmp_path: Path) -> Path:
    return alembic_project(
        tmp_path, mariadb_url.replace("mariadb://", "mysql+pymysql://", 1), MARIADB_MODELS
    )


def drop_nilo_tables(mariadb_url: str) -> None:
    with mariadb(mariadb_url) as cur:
        cur.execute(f"DROP TABLE {', '.join(NILO_TABLES)}")


def catalog(mariadb_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """What the server says of nilo-job's tables: each table's engine and collation, each
    column's type, nullability, default, collation and extra, each index's columns in order,
    and the checks."""
    ours = f"table_name IN {NILO_TABLES!r}"
    with mariadb(mariadb_url) as cur:
        said: dict[str, list[tuple[Any, ...]]] = {}
        for name, query in {
            "tables": "SELECT table_name, engine, table_collation FROM information_schema.tables "
            "WHERE table_schema = DATABASE()",
            "columns": (
                "SELECT table_name, column_name, ordinal_position, column_type, is_nullable, "
                "column_default, collation_name, extra FROM information_schema.columns "
                "WHERE table_schema = DATABASE()"
            ),
            "indexes": (
                "SELECT table_name, index_name, non_unique, seq_in_index, column_name "
                "FROM information_schema.statistics WHERE table_schema = DATABASE()"
            ),
            "checks": (
                "SELECT table_name, constraint_name, check_clause "
                "FROM information_schema.check_constraints WHERE constraint_schema = DATABASE()"
            ),
        }.items():
            cur.execute(f"{query} AND {ours}")
            said[name] = sorted(cur.fetchall())
    return said


async def test_on_mariadb_upgrade_makes_the_tables_create_missing_makes_and_the_queue_works(
    mariadb_url: str, tmp_path: Path
) -> None:
    table = job.Table(mariadb_url)
    try:
        drop_nilo_tables(mariadb_url)
        await table.create_missing()
        made_by_nilo_job = catalog(mariadb_url)
        assert len(made_by_nilo_job["indexes"]) == 35  # (every column of every index)
        drop_nilo_tables(mariadb_url)

        project = mariadb_project(mariadb_url, tmp_path)
        said = alembic(project, "revision", "--autogenerate", "-m", "users_and_jobs")
        for name in ("users", *NILO_TABLES):
            assert f"Detected added table '{name}'" in said
        for index in (
            "nilo_jobs_unique", "nilo_jobs_due", "nilo_jobs_lease", "nilo_jobs_order",
            "nilo_jobs_dead", "nilo_jobs_dead_kind",
        ):  # fmt: skip
            assert f"Detected added index '{index}' on '(" in said
        migration = the_migration(project, "users_and_jobs")
        assert "mysql_collate='utf8mb4_nopad_bin'" in migration
        assert "mariadb_collate='utf8mb4_nopad_bin'" in migration
        assert "sa.Column('payload', mysql.LONGTEXT(), nullable=False)" in migration
        alembic(project, "upgrade", "head")
        assert catalog(mariadb_url) == made_by_nilo_job

        await table.check()
        jobs = job.Jobs(kinds=[Welcome], store=table)
        ran.clear()
        first = await jobs.push(Welcome(7), unique="welcome:7")
        assert first is not None
        assert await jobs.push(Welcome(7), unique="welcome:7") is None
        # A binary collation that does not pad: another case, or a trailing space, is another key.
        assert await jobs.push(Welcome(8), unique="Welcome:7") is not None
        assert await jobs.push(Welcome(9), unique="welcome:7 ") is not None
        assert await jobs.drain() == 3
        assert sorted(ran) == [7, 8, 9]

        assert "No new upgrade operations detected." in alembic(project, "check")
        await table.create_missing()  # what `nilo-job migrate` does: it records the version
        assert "No new upgrade operations detected." in alembic(project, "check")
    finally:
        await table.close()


def test_on_mariadb_autogenerate_finds_nothing_to_do_on_the_tables_create_missing_made(
    mariadb_url: str, tmp_path: Path
) -> None:
    # The fixture's database holds the tables create_missing() makes, with their version.
    project = mariadb_project(mariadb_url, tmp_path)
    said = alembic(project, "revision", "--autogenerate", "-m", "users")
    detected = [line for line in said.splitlines() if "Detected" in line]
    assert len(detected) == 1, said
    assert "Detected added table 'users'" in detected[0]
    alembic(project, "upgrade", "head")
    assert "No new upgrade operations detected." in alembic(project, "check")


def test_the_mysql_tables_carry_mysqls_own_collation_and_another_database_is_refused() -> None:
    from sqlalchemy import MetaData
    from sqlalchemy.dialects import mysql
    from sqlalchemy.dialects.mysql.mariadb import MariaDBDialect
    from sqlalchemy.schema import CreateTable

    from nilo_job.sqlalchemy_table import nilo_jobs_table

    # Both of SQLAlchemy's names for the server (mysql+… and mariadb+… URLs) get the collation.
    for database, collation in (("mysql", "utf8mb4_0900_bin"), ("mariadb", "utf8mb4_nopad_bin")):
        nilo_jobs = nilo_jobs_table(MetaData(), database=database)
        for dialect in (mysql.dialect(), MariaDBDialect()):
            ddl = str(CreateTable(nilo_jobs).compile(dialect=dialect))
            assert ddl.endswith(f")ENGINE=InnoDB CHARSET=utf8mb4 COLLATE {collation}\n\n"), ddl
    with pytest.raises(
        job.Refusal,
        match=re.escape(
            "nilo_jobs_table(database='sqlite'): the tables are for 'postgresql', 'mariadb' or "
            "'mysql'"
        ),
    ):
        nilo_jobs_table(MetaData(), database="sqlite")
