"""Fixtures shared by every tier of the tests (unit, stores, processes, cli, dashboard,
integrations); each tier's own are in its conftest.py, and what is not a fixture in
`tests.helpers`.

`store` runs a test once on each store that ships: `job.Memory` and the SQLite `job.Table`. Every
behaviour of the queue is a promise of the contract, so each test that takes `store` is a contract
test of both. `t` is a fixed moment a second after the test started, in microseconds since the
epoch: rows pushed without `at=` are due by then, and `drain_at(t + …)` moves the clock exactly.
"""

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.store.contract import Store

PG_SERVER = os.environ.get("NILO_TEST_PG", "postgresql://postgres@127.0.0.1:5432")
"""The PostgreSQL server the tests use: trust auth, user postgres (this machine's and CI's)."""
TEMPLATE = f"nilo_template_{os.getpid()}"  # one per test session: sessions may run side by side


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


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh, empty store of each kind that ships."""
    if request.param == "memory":
        yield job.Memory(bytes=1 << 20)
        return
    if request.param == "postgres":
        table = job.Table(request.getfixturevalue("pg_url"))
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


def _needs_postgres(item: pytest.Item) -> bool:
    if PG_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    values = list(callspec.params.values()) if callspec is not None else []
    return any(
        (isinstance(v, str) and v == "postgres") or (isinstance(v, tuple) and "postgres" in v)
        for v in values
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `postgres` every test that needs the server: those that use `pg_url` (or the
    template), and the postgres case of a fixture or parametrize over store kinds. So
    `pytest -m "not postgres"` deselects them (it does not skip them) where only the Memory and
    SQLite tests run (`dev.py test --all-pythons`, on the Pythons other than .venv's)."""
    for item in items:
        if _needs_postgres(item):
            item.add_marker(pytest.mark.postgres)
