"""push_in on MariaDB through the caller's SQLAlchemy session or connection (`mysql+asyncmy`,
`mysql+pymysql`) and through Django's connection (its MySQL backend): the row is written in the
caller's transaction, gone with a rollback, there after a commit.

Django's settings are global to a process, so the Django scenario runs in a Python process of
its own, on Django's MySQL backend with PyMySQL standing in for mysqlclient (see `DJANGO`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import nilo_job as job
from tests.helpers import ROOT
from tests.helpers.mariadb import connect

pymysql = pytest.importorskip("pymysql")
pytest.importorskip("asyncmy")
pytest.importorskip("sqlalchemy")

from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

ran: list[int] = []


@dataclasses.dataclass
class Welcome:
    nilo_job = "welcome"
    retry = job.Retry.NONE

    user_id: int

    def run(self) -> None:
        ran.append(self.user_id)


@contextlib.contextmanager
def side(url: str) -> Iterator[Any]:
    """A PyMySQL connection of the test's own to the database at `url`, in autocommit."""
    conn = connect(url)
    try:
        yield conn
    finally:
        conn.close()


def users_in(url: str) -> list[int]:
    with side(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM users ORDER BY id")
        return [int(row[0]) for row in cur.fetchall()]


@pytest.fixture
def users(mariadb_url: str) -> str:
    with side(mariadb_url) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE users (id bigint PRIMARY KEY)")
    return mariadb_url


@pytest.fixture
async def jobs(mariadb_url: str) -> AsyncIterator[job.Jobs]:
    ran.clear()
    table = job.Table(mariadb_url)
    yield job.Jobs(kinds=[Welcome], store=table)
    await table.close()


def sqlalchemy_url(url: str, driver: str, dialect: str = "mysql") -> str:
    """`url` (`mariadb://…`) as SQLAlchemy's URL of `dialect` (`mysql` or `mariadb`) on
    `driver`."""
    return re.sub(r"^mariadb://", f"{dialect}+{driver}://", url)


# ------------------------------------------------------------------------------ SQLAlchemy


@pytest.mark.parametrize("dialect", ["mysql", "mariadb"])
def test_push_in_on_sqlalchemy_sessions_and_connections_of_pymysql(
    users: str, dialect: str
) -> None:
    ran.clear()
    jobs = job.Jobs(kinds=[Welcome], store=job.Table(users))
    engine = create_engine(sqlalchemy_url(users, "pymysql", dialect))
    try:
        with Session(engine) as session:
            session.execute(text("INSERT INTO users (id) VALUES (1)"))
            assert isinstance(jobs.sync.push_in(session, Welcome(1)), int)
            assert jobs.sync.stats() == (0, 0, 0)  # not committed: the session's transaction
            session.rollback()
        assert jobs.sync.stats() == (0, 0, 0)
        with Session(engine) as session, session.begin():
            session.execute(text("INSERT INTO users (id) VALUES (2)"))
            assert isinstance(jobs.sync.push_in(session, Welcome(2), unique="k"), int)
            # The key's duplicate undoes that INSERT alone: the session's transaction goes on.
            assert jobs.sync.push_in(session, Welcome(9), unique="k") is None
        with engine.connect() as conn:  # push_in begins its transaction, as execute would
            assert isinstance(jobs.sync.push_in(conn, Welcome(3)), int)
            assert conn.in_transaction()
            conn.commit()
        with engine.connect() as conn:
            jobs.sync.push_in(conn, Welcome(4))
            conn.rollback()
        with engine.connect() as conn:
            jobs.sync.push_in(conn, Welcome(5))  # closed without a commit: rolled back
        with engine.connect() as conn, conn.begin():
            jobs.sync.push_in(conn, Welcome(6))
        assert users_in(users) == [2]
        assert jobs.sync.stats() == (3, 0, 0)
        assert jobs.sync.drain() == 3
        assert sorted(ran) == [2, 3, 6]
    finally:
        engine.dispose()
        jobs.sync.close()


@pytest.mark.parametrize("dialect", ["mysql", "mariadb"])
async def test_push_in_on_sqlalchemy_async_sessions_and_connections_of_asyncmy(
    jobs: job.Jobs, users: str, dialect: str
) -> None:
    engine = create_async_engine(sqlalchemy_url(users, "asyncmy", dialect))
    try:
        async with AsyncSession(engine) as session:
            await session.execute(text("INSERT INTO users (id) VALUES (1)"))
            assert isinstance(await jobs.push_in(session, Welcome(1)), int)
            assert await jobs.stats() == (0, 0, 0)  # not committed: the session's transaction
            await session.rollback()
        assert await jobs.stats() == (0, 0, 0)
        async with AsyncSession(engine) as session, session.begin():
            await session.execute(text("INSERT INTO users (id) VALUES (2)"))
            assert isinstance(await jobs.push_in(session, Welcome(2), unique="k"), int)
            assert await jobs.push_in(session, Welcome(9), unique="k") is None
        async with engine.connect() as conn:  # push_in begins its transaction, as execute would
            assert isinstance(await jobs.push_in(conn, Welcome(3)), int)
            assert conn.in_transaction()
            await conn.commit()
        async with engine.connect() as conn:
            await jobs.push_in(conn, Welcome(4))
            await conn.rollback()
        async with engine.connect() as conn:
            await jobs.push_in(conn, Welcome(5))  # closed without a commit: rolled back
        async with engine.begin() as conn:
            await jobs.push_in(conn, Welcome(6))
        assert users_in(users) == [2]
        assert await jobs.stats() == (3, 0, 0)
        assert await jobs.drain() == 3
        assert sorted(ran) == [2, 3, 6]
    finally:
        await engine.dispose()


async def test_push_in_refuses_sqlalchemy_in_autocommit_awaited_or_not_and_another_driver(
    jobs: job.Jobs, mariadb_url: str
) -> None:
    autocommit = re.escape(
        "push_in got a SQLAlchemy session or connection whose isolation_level is AUTOCOMMIT, "
        "so the row would commit on its own: use one without it"
    )
    engine = create_async_engine(sqlalchemy_url(mariadb_url, "asyncmy"))
    sync_engine = create_engine(sqlalchemy_url(mariadb_url, "pymysql"))
    sqlite = create_engine("sqlite://")
    try:
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            with pytest.raises(job.Refusal, match=f"^{autocommit}$"):
                await jobs.push_in(conn, Welcome(1))
        with sync_engine.connect() as sync_conn:
            sync_conn = sync_conn.execution_options(isolation_level="AUTOCOMMIT")
            with pytest.raises(job.Refusal, match=f"^{autocommit}$"):
                await asyncio.to_thread(jobs.sync.push_in, sync_conn, Welcome(2))
        async with AsyncSession(engine) as session:
            with pytest.raises(
                job.Refusal,
                match=re.escape(
                    "jobs.sync.push_in got a SQLAlchemy AsyncSession, which must be awaited: use "
                    "await jobs.push_in(...)"
                ),
            ):
                await asyncio.to_thread(jobs.sync.push_in, session, Welcome(3))
        with Session(sqlite) as other, pytest.raises(job.Refusal) as refused:
            await jobs.push_in(other, Welcome(4))
        said = str(refused.value)
        assert said.startswith(
            "push_in got a SQLAlchemy session or connection on sqlite3; this store accepts "
        )
        for accepted in ("AsyncSession", "mysql+asyncmy", "mysql+pymysql", "Django's connection"):
            assert accepted in said
    finally:
        await engine.dispose()
        sync_engine.dispose()
        sqlite.dispose()
    assert await jobs.stats() == (0, 0, 0)


# ---------------------------------------------------------------------------------- Django

DJANGO = """\
import dataclasses
import json
import os
from urllib.parse import unquote, urlsplit

import pymysql

# Django's MySQL backend imports mysqlclient (MySQLdb), a C extension built against the MariaDB
# client's headers, which this machine lacks; PyMySQL stands in for it, as Django's docs allow.
pymysql.install_as_MySQLdb()

import django
from django.conf import settings

URL = os.environ["NILO_TEST_URL"]
parts = urlsplit(URL)
settings.configure(
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": parts.path.lstrip("/"),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname,
            "PORT": str(parts.port),
            "OPTIONS": {"charset": "utf8mb4"},
        }
    },
    USE_TZ=True,
)
django.setup()

from django.db import connection, transaction

import nilo_job as job

ran = []


@dataclasses.dataclass
class Welcome:
    nilo_job = "welcome"
    retry = job.Retry.NONE

    user_id: int

    def run(self) -> None:
        ran.append(self.user_id)


class Boom(Exception):
    pass


jobs = job.Jobs(kinds=[Welcome], store=job.Table(URL))
seen = {}


def add_user(user_id):
    with connection.cursor() as cur:
        cur.execute("INSERT INTO users (id) VALUES (%s)", [user_id])


def user_ids():
    with connection.cursor() as cur:
        cur.execute("SELECT id FROM users ORDER BY id")
        return [row[0] for row in cur.fetchall()]


try:
    with transaction.atomic():
        add_user(1)
        seen["pushed"] = type(jobs.sync.push_in(connection, Welcome(1))).__name__
        seen["driver"] = type(connection.connection).__module__
        seen["before_the_rollback"] = list(jobs.sync.stats())
        raise Boom
except Boom:
    pass
seen["after_the_rollback"] = [list(jobs.sync.stats()), user_ids()]

with transaction.atomic():
    add_user(2)
    seen["first_key"] = type(jobs.sync.push_in(connection, Welcome(2), unique="k")).__name__
    seen["same_key"] = jobs.sync.push_in(connection, Welcome(9), unique="k")
    seen["before_the_commit"] = list(jobs.sync.stats())
seen["after_the_commit"] = [list(jobs.sync.stats()), user_ids()]

try:
    jobs.sync.push_in(connection, Welcome(3))
except job.Refusal as refused:
    seen["outside_atomic"] = str(refused)

seen["drained"] = [jobs.sync.drain(), ran]
jobs.sync.close()
connection.close()
print(json.dumps(seen))
"""
"""The Django scenario, run as a script of its own (Django's settings are one per process)."""


def test_push_in_on_djangos_mysql_connection_commits_and_rolls_back_with_atomic(
    users: str, tmp_path: Path
) -> None:
    pytest.importorskip("django")
    script = tmp_path / "django_mysql_push_in.py"
    script.write_text(DJANGO)
    env = {**os.environ, "NILO_TEST_URL": users, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    assert json.loads(done.stdout) == {
        "pushed": "int",
        "driver": "pymysql.connections",
        "before_the_rollback": [0, 0, 0],
        "after_the_rollback": [[0, 0, 0], []],
        "first_key": "int",
        "same_key": None,
        "before_the_commit": [0, 0, 0],
        "after_the_commit": [[1, 0, 0], [2]],
        "outside_atomic": (
            "push_in got Django's connection outside transaction.atomic(), so the row would "
            "commit on its own: push inside `with transaction.atomic():`"
        ),
        "drained": [1, [2]],
    }
