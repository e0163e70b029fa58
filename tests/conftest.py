"""Fixtures shared by every tier of the tests (unit, stores, processes, cli, dashboard,
integrations); each tier's own are in its conftest.py, and what is not a fixture in
`tests.helpers`.

`store` runs a test once on each store that ships: `job.Memory`, and `job.Table` on SQLite,
PostgreSQL and MariaDB. Every behaviour of the queue is a promise of the contract, so each test
that takes `store` is a contract test of each. `t` is a fixed moment a second after the test
started, in microseconds since the epoch: rows pushed without `at=` are due by then, and
`drain_at(t + …)` moves the clock exactly.
"""

import asyncio
import concurrent.futures
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.store.contract import Store

PG_SERVER = os.environ.get("NILO_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
"""The PostgreSQL server the tests use: trust auth, user postgres (this machine's and CI's)."""
TEMPLATE = f"nilo_template_{os.getpid()}"  # one per test session: sessions may run side by side
MARIADB_SERVER = os.environ.get("NILO_TEST_MARIADB_URL", "mariadb://root@127.0.0.1:3306")
"""The MariaDB server the tests use: user root with no password (this machine's and CI's)."""
STORES = ["memory", "sqlite", "postgres", "mariadb"]


def _admin() -> object:
    import psycopg

    return psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True, connect_timeout=3)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A template database holding an empty nilo_jobs table, made once per test session.

    Without a server the PostgreSQL tests skip with the reason, except in CI (CI=true), where
    a missing server is a failure.
    """
    try:
        import psycopg

        admin = _admin()
    except Exception as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs PostgreSQL at {PG_SERVER}: {error}")
        pytest.skip(f"no PostgreSQL at {PG_SERVER}: {error}")
    assert isinstance(admin, psycopg.Connection)
    with admin:
        admin.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {TEMPLATE}")
    from nilo_job.store.postgres import SQL

    with psycopg.connect(f"{PG_SERVER}/{TEMPLATE}", autocommit=True) as conn:
        for statement in SQL["create"].split(";"):
            if statement.strip():
                conn.execute(statement)  # type: ignore[call-overload]
    yield TEMPLATE
    with _admin() as admin:  # type: ignore[attr-defined]
        admin.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")


@pytest.fixture
def pg_url(pg_template: str) -> Iterator[str]:
    """The URL of a fresh database with an empty nilo_jobs table, dropped after the test."""
    import psycopg

    name = f"nilo_t_{uuid.uuid4().hex[:12]}"
    admin = _admin()
    assert isinstance(admin, psycopg.Connection)
    with admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE {pg_template}")
    try:
        yield f"{PG_SERVER}/{name}"
    finally:
        with _admin() as admin:  # type: ignore[attr-defined]
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _mariadb(*statements: str, database: str | None = None) -> None:
    """Run `statements` on the MariaDB server (in `database`), on a connection of their own, in
    a thread with a loop of its own (a fixture may be asked for from inside a running loop)."""

    async def run() -> None:
        from tests.helpers.mariadb import side

        async with side(f"{MARIADB_SERVER}/{database or 'mysql'}") as conn, conn.cursor() as cur:
            for statement in statements:
                await cur.execute(statement, ())

    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, run()).result()


@pytest.fixture(scope="session")
def mariadb_server() -> str:
    """The MariaDB server's URL, once it answered. Without a server (or without asyncmy) the
    MariaDB tests skip with the reason, except in CI (CI=true), where it is a failure."""
    try:
        _mariadb("SELECT 1")
    except Exception as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs MariaDB at {MARIADB_SERVER}: {error!r}")
        pytest.skip(f"no MariaDB at {MARIADB_SERVER}: {error!r}")
    return MARIADB_SERVER


@pytest.fixture(scope="session")
def mariadb_runtime() -> Iterator[str]:
    """A runtime folder for the session's MariaDB stores (`XDG_RUNTIME_DIR`), where the wake-up
    folder of each test's database goes, removed after the session: short, as a Unix socket's
    path must be."""
    folder = tempfile.mkdtemp(prefix="nw")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def mariadb_url(
    mariadb_server: str, mariadb_runtime: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The URL of a fresh database with empty nilo-job tables, dropped after the test."""
    from nilo_job.store.mysql import SQL

    monkeypatch.setenv("XDG_RUNTIME_DIR", mariadb_runtime)
    name = f"nilo_t_{uuid.uuid4().hex[:12]}"
    _mariadb(f"CREATE DATABASE {name}")
    try:
        creates = [part for part in SQL["create"].split(";") if part.strip()]
        _mariadb(*creates, "INSERT INTO nilo_jobs_version VALUES (7, 1)", database=name)
        yield f"{mariadb_server}/{name}"
    finally:
        _mariadb(f"DROP DATABASE IF EXISTS {name}")


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh, empty store of each kind that ships."""
    if request.param == "memory":
        yield job.Memory(bytes=1 << 20)
        return
    if request.param in ("postgres", "mariadb"):
        url = "pg_url" if request.param == "postgres" else "mariadb_url"
        table = job.Table(request.getfixturevalue(url))
        try:
            yield table
        finally:
            await table.close()
        return
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    await table.create_missing()
    try:
        yield table
    finally:
        await table.close()


@pytest.fixture
async def table(tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh SQLite store, for what only a database can do (push_in, check)."""
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    await table.create_missing()
    try:
        yield table
    finally:
        await table.close()


@pytest.fixture
def t() -> int:
    """A fixed clock reading, a second after now, in microseconds since the epoch."""
    return job.now_us() + 1_000_000


PG_FIXTURES = frozenset({"pg_url", "pg_template"})
MARIADB_FIXTURES = frozenset({"mariadb_url", "mariadb_server"})


def _needs(item: pytest.Item, fixtures: frozenset[str], param: str) -> bool:
    if fixtures & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    values = list(callspec.params.values()) if callspec is not None else []
    return any(
        (isinstance(v, str) and v == param) or (isinstance(v, tuple) and param in v) for v in values
    )


def _needs_postgres(item: pytest.Item) -> bool:
    return _needs(item, PG_FIXTURES, "postgres")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `postgres` every test that needs the server: those that use `pg_url` (or the
    template), and the postgres case of a fixture or parametrize over store kinds; `mariadb`
    alike. So `pytest -m "not postgres and not mariadb"` deselects them (it does not skip them)
    where only the Memory and SQLite tests run (`dev.py test --all-pythons`, on the Pythons other
    than .venv's)."""
    for item in items:
        if _needs_postgres(item):
            item.add_marker(pytest.mark.postgres)
        if _needs(item, MARIADB_FIXTURES, "mariadb"):
            item.add_marker(pytest.mark.mariadb)
