"""What only the MariaDB/MySQL store does: its URL, its tables made and checked, its sentences,
its bounds, push_in on the caller's asyncmy or PyMySQL transaction, unique and claims under real
concurrency (processes, stores, forks, loops), wake-ups between processes on one host, and the
server's clock. The contract itself runs on MariaDB in test_contract.py and the other tests that
take `store` (with NILO_TEST_MARIADB=1)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import nilo_job as job
from nilo_job._worker.holdback import described
from nilo_job.store.contract import HeldBack, NewRow
from tests.helpers import ROOT
from tests.helpers.forks import pushed_from_forks
from tests.helpers.mariadb import side

asyncmy = pytest.importorskip("asyncmy")

from nilo_job.store._target import shown  # noqa: E402
from nilo_job.store.mysql.connections import Server, server_of  # noqa: E402

ran: list[int] = []


@dataclasses.dataclass
class Welcome:
    nilo_job = "welcome"
    retry = job.Retry.NONE

    user_id: int

    def run(self) -> None:
        ran.append(self.user_id)


async def sql(url: str, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
    """`statement` on a connection of its own; the rows it answers."""
    async with side(url) as conn, conn.cursor() as cur:
        await cur.execute(statement, params)
        return list(await cur.fetchall())


TABLES = [
    "nilo_jobs", "nilo_jobs_attempts", "nilo_jobs_deaths", "nilo_jobs_done", "nilo_jobs_paused",
    "nilo_jobs_version", "nilo_jobs_workers",
]  # fmt: skip


async def drop_tables(url: str) -> None:
    await sql(url, f"DROP TABLE IF EXISTS {', '.join(TABLES)}")


@pytest.fixture
async def jobs(mariadb_url: str) -> AsyncIterator[job.Jobs]:
    ran.clear()
    table = job.Table(mariadb_url)
    queue = job.Jobs(kinds=[Welcome], store=table)
    yield queue
    await table.close()


async def user_ids(url: str) -> list[int]:
    """The user ids of the pushed rows, by id."""
    rows = await sql(url, "SELECT payload FROM nilo_jobs ORDER BY id")
    return [int(re.findall(r"\d+", row[0])[0]) for row in rows]


# ------------------------------------------------------------------------- the URL


def test_a_url_gives_its_user_password_port_database_and_options() -> None:
    url = "mysql://app:p%40ss%2Fw@db.example:3307/shop?connect_timeout=2.5"
    assert server_of(url) == Server("MySQL", "db.example", 3307, "app", "p@ss/w", "shop", 2.5)
    assert server_of("mariadb://db/app?unix_socket=/sockets/mysqld.sock") == Server(
        "MariaDB", "db", 3306, "", "", "app", 10.0, "/sockets/mysqld.sock"
    )
    assert repr(job.Table(url)) == "job.Table('mysql://app@db.example:3307/shop')"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://someuser@127.0.0.1:3306/db", "job.Table('mysql://someuser@127.0.0.1:3306/db')"),
        (
            "mariadb://app:Se1cret@db/shop?connect_timeout=2",
            "job.Table('mariadb://app@db:3306/shop')",
        ),
        ("mysql://a%40b:Se1cret@[::1]/shop", "job.Table('mysql://a%40b@[::1]:3306/shop')"),
        ("mysql://db/shop", "job.Table('mysql://db:3306/shop')"),
    ],
    ids=["user", "password", "encoded user", "no user"],
)
def test_the_repr_keeps_the_user_never_the_password_as_postgresql_does(url: str, said: str) -> None:
    assert repr(job.Table(url)) == said


def test_a_socket_is_where_the_sentences_say_the_server_is() -> None:
    server = server_of("mariadb://app@db:3307/shop?unix_socket=/sockets/mysqld.sock")
    assert server.where == "/sockets/mysqld.sock (unix_socket)/shop"
    assert server_of("mariadb://app@[::1]:3307/shop").where == "[::1]:3307/shop"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "mysql://app:Se1cret@db/",
            "job.Table('mysql://app@db/') names no database: write "
            "'mysql://user:password@host:3306/database'",
        ),
        (
            "mariadb://app:Se1cret@db/shop?ssl=1",
            "job.Table('mariadb://app@db/shop?ssl=1'): 'ssl' is not an option a MariaDB/MySQL URL "
            "takes here; it takes connect_timeout, ssl_ca, ssl_cert, ssl_key, ssl_mode, "
            "unix_socket",
        ),
        (
            "mysql://app:Se1cret@db/shop?connect_timeout=0",
            "job.Table('mysql://app@db/shop?connect_timeout=0'): connect_timeout is seconds, "
            "more than 0 and at most 3600",
        ),
        (
            "mysql://app:Se1cret@db:99999/shop",
            "job.Table('mysql://app@db:99999/shop') is not a URL MariaDB/MySQL can use: Port out "
            "of range 0-65535",
        ),
        (
            "mysql://root:Se1cret@x@127.0.0.1/db",
            "job.Table('mysql://root@127.0.0.1/db') cannot be read as meant: its user or password "
            "holds an '@' that is not percent-encoded, so a piece of the password may be read as "
            "the host; percent-encode the user and the password (urllib.parse.quote(password, "
            "safe='') writes '@' as %40, ':' as %3A and '/' as %2F)",
        ),
        (
            "mariadb://root:Se1/cret@127.0.0.1/db",
            "job.Table('mariadb://root@127.0.0.1/db') cannot be read as meant: its user or "
            "password holds a '/' that is not percent-encoded, so a piece of the password may be "
            "read as the host; percent-encode the user and the password "
            "(urllib.parse.quote(password, safe='') writes '@' as %40, ':' as %3A and '/' as %2F)",
        ),
        (
            "mysql://root:Se1?c@ret@127.0.0.1/db",
            "job.Table('mysql://root@127.0.0.1/db') cannot be read as meant: its user or password "
            "holds an '@' and a '?' that are not percent-encoded, so a piece of the password may "
            "be read as the host; percent-encode the user and the password "
            "(urllib.parse.quote(password, safe='') writes '@' as %40, ':' as %3A and '/' as %2F)",
        ),
    ],
    ids=["no database", "unknown option", "no timeout", "no port", "raw @", "raw /", "raw @ ?"],
)
def test_a_url_the_store_cannot_use_is_refused_in_a_sentence_without_its_password(
    url: str, said: str
) -> None:
    with pytest.raises(job.Refusal) as refused:
        job.Table(url)
    assert str(refused.value) == said
    assert "Se1" not in str(refused.value)


def test_a_raw_at_in_the_password_is_refused_as_postgresql_refuses_it() -> None:
    for url in ("mysql://root:p@ss@127.0.0.1/db", "postgresql://root:p@ss@127.0.0.1/db"):
        with pytest.raises(job.Refusal) as refused:
            job.Table(url)
        assert "cannot be read as meant: its user or password holds an '@'" in str(refused.value)
        assert "'@' as %40" in str(refused.value)
    encoded = job.Table("mysql://root:p%40ss@127.0.0.1/db")
    assert (encoded.server.user, encoded.server.password, encoded.server.host) == (  # type: ignore[attr-defined]
        "root", "p@ss", "127.0.0.1",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ({"answer_ms": 99}, "job.Table(..., answer_ms=99) is below 100"),
        ({"max_size": 0}, "job.Table(..., max_size=0) is below 1"),
    ],
    ids=["answer_ms", "max_size"],
)
def test_an_option_out_of_its_range_is_refused(option: dict[str, int], said: str) -> None:
    with pytest.raises(job.Refusal, match=re.escape(said)):
        job.Table("mysql://db/shop", **option)


# ------------------------------------------------------------------------- the tables


async def test_create_missing_makes_every_table_at_this_version(mariadb_url: str) -> None:
    await drop_tables(mariadb_url)
    table = job.Table(mariadb_url)
    try:
        with pytest.raises(job.StoreUnavailable) as missing:
            await table.check()
        assert str(missing.value) == (
            f"there is no nilo_jobs table in MariaDB at {server_of(mariadb_url).where}: create "
            f"it with `nilo-job migrate {shown(mariadb_url)}` (or await table.create_missing())"
        )
        await table.create_missing()
        await table.create_missing()  # idempotent
        await table.check()
        assert await table.stats() == (0, 0, 0)
    finally:
        await table.close()
    found = await sql(
        mariadb_url,
        "SELECT table_name, table_collation FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name <> 'nilo_jobs_version' ORDER BY 1",
    )
    assert found == [(name, "utf8mb4_nopad_bin") for name in TABLES if name != "nilo_jobs_version"]
    assert await sql(mariadb_url, "SELECT version, compatible_from FROM nilo_jobs_version") == [
        (7, 1)
    ]


async def test_three_migrations_at_once_record_one_version(mariadb_url: str) -> None:
    await drop_tables(mariadb_url)
    tables = [job.Table(mariadb_url) for _ in range(3)]
    try:
        async with asyncio.timeout(30):
            await asyncio.gather(*(table.create_missing() for table in tables))
        await tables[0].check()
    finally:
        for table in tables:
            await table.close()
    assert await sql(mariadb_url, "SELECT version, compatible_from FROM nilo_jobs_version") == [
        (7, 1)
    ]


async def test_check_names_a_table_beside_it_that_is_missing(mariadb_url: str) -> None:
    await sql(mariadb_url, "DROP TABLE nilo_jobs_attempts")
    table = job.Table(mariadb_url)
    try:
        with pytest.raises(job.StoreUnavailable, match="lacks nilo_jobs_attempts, a table beside"):
            await table.check()
        await table.create_missing()
        await table.check()
    finally:
        await table.close()


async def test_check_of_a_table_that_is_not_nilo_jobs_names_what_it_lacks(mariadb_url: str) -> None:
    await drop_tables(mariadb_url)
    await sql(mariadb_url, "CREATE TABLE nilo_jobs (id bigint PRIMARY KEY, name text)")
    table = job.Table(mariadb_url)
    try:
        with pytest.raises(job.StoreUnavailable) as refused:
            await table.check()
        assert str(refused.value).endswith(
            "is not nilo-job's: it lacks attempts, detail, died_at, error, kind, lease_until, "
            "payload, run_at, state, unique_key"
        )
    finally:
        await table.close()


async def test_a_table_of_a_newer_nilo_job_is_refused_and_left_as_it_is(mariadb_url: str) -> None:
    await sql(mariadb_url, "UPDATE nilo_jobs_version SET version = 9, compatible_from = 8")
    table = job.Table(mariadb_url)
    try:
        for call in (table.check, table.create_missing):
            with pytest.raises(job.StoreUnavailable, match="is at version 9, from a newer"):
                await call()
    finally:
        await table.close()
    assert await sql(mariadb_url, "SELECT version, compatible_from FROM nilo_jobs_version") == [
        (9, 8)
    ]


async def test_the_ddl_is_offered_as_text(mariadb_url: str) -> None:
    table = job.Table(mariadb_url)
    assert "CREATE TABLE IF NOT EXISTS nilo_jobs" in table.ddl  # type: ignore[attr-defined]
    await table.close()


# ------------------------------------------------------------------------- sentences, bounds


async def test_the_server_is_named_in_what_it_refuses(mariadb_server: str) -> None:
    server = server_of(f"{mariadb_server}/mysql")
    at = f"{server.host}:{server.port}"
    cases = {
        f"{mariadb_server}/nilo_nowhere": (
            f"MariaDB at {at} has no database 'nilo_nowhere': create it (CREATE DATABASE "
            f"nilo_nowhere), then `nilo-job migrate {shown(mariadb_server)}/nilo_nowhere`"
        ),
        f"mariadb://{server.user}:Wr0ngPass@{at}/mysql": (
            f"MariaDB at {at}/mysql refused the login of user {server.user!r}: check the user, "
            "its password and its grants"
        ),
        "mariadb://root@127.0.0.1:1/shop?connect_timeout=2": "cannot reach MariaDB at "
        "127.0.0.1:1/shop: ",
    }
    for url, said in cases.items():
        table = job.Table(url)
        try:
            with pytest.raises(job.StoreUnavailable) as refused:
                await table.ping()
            assert str(refused.value).startswith(said), str(refused.value)
            assert "Wr0ngPass" not in str(refused.value)
            assert await job.Jobs(kinds=[Welcome], store=table).ready() is False
        finally:
            await table.close()


async def test_a_socket_that_cannot_be_reached_is_named_in_the_sentence() -> None:
    table = job.Table("mariadb://root@127.0.0.1:3306/shop?unix_socket=/nonexistent")
    try:
        with pytest.raises(job.StoreUnavailable) as refused:
            await table.ping()
        assert str(refused.value) == (
            "cannot reach MariaDB at /nonexistent (unix_socket)/shop: Can't connect to MySQL "
            "server on '/nonexistent' ([Errno 2] No such file or directory)"
        )
    finally:
        await table.close()


@contextlib.asynccontextmanager
async def locked_row(table: job.Store, url: str) -> AsyncIterator[tuple[int, Any]]:
    """A row pushed through `table`, and a transaction of the test's own on the database at
    `url` that holds its lock (`FOR UPDATE`) until it rolls back or the block ends."""
    (row,) = await table.push([NewRow("welcome", b'{"user_id":1}', 0)])
    assert row is not None
    async with side(url, autocommit=False) as holder, holder.cursor() as cur:
        await cur.execute("SELECT id FROM nilo_jobs WHERE id = %s FOR UPDATE", (row,))
        yield row, holder


async def test_a_call_not_answered_within_answer_ms_is_a_store_error_naming_it(
    mariadb_url: str,
) -> None:
    table = job.Table(mariadb_url, answer_ms=300)
    try:
        async with locked_row(table, mariadb_url) as (row, holder):
            with pytest.raises(job.StoreUnavailable) as late:
                await table.cancel(row)  # waits for the row's lock
            assert str(late.value) == (
                f"MariaDB at {table.server.where} did not answer a cancel within "  # type: ignore[attr-defined]
                "0.3 s; its connection was closed"
            )
            await holder.rollback()
        await table.cancel(row)  # on a new connection: the store works again
        assert await table.row(row) is None  # cancelled by this call, or by the first (the
        # server may finish a statement it was sent, once its lock is free)
    finally:
        await table.close()


async def _until_a_lock_wait(url: str) -> None:
    """Until a transaction on the database at `url` waits for a row's lock (within 10 s). The
    server refreshes `information_schema.innodb_trx` only when it was not read for 100 ms, so
    it is read every 150 ms."""
    async with side(url) as looker, looker.cursor() as cur:
        for _ in range(66):
            await cur.execute(
                "SELECT COUNT(*) FROM information_schema.innodb_trx AS trx "
                "JOIN information_schema.processlist AS p ON p.id = trx.trx_mysql_thread_id "
                "WHERE trx.trx_state = 'LOCK WAIT' AND p.db = DATABASE()"
            )
            if (await cur.fetchone())[0]:
                return
            await asyncio.sleep(0.15)
    raise AssertionError("no call waited for the lock")


async def test_a_call_cancelled_from_outside_is_a_cancel_and_the_store_goes_on(
    mariadb_url: str,
) -> None:
    # A stop lands on a call that waits for a row's lock, well inside answer_ms: the caller
    # sees the cancellation itself (not a store error), and the store's next call is answered.
    table = job.Table(mariadb_url, answer_ms=5_000)
    try:
        async with locked_row(table, mariadb_url) as (row, holder):
            waiting = asyncio.ensure_future(table.cancel(row))
            await _until_a_lock_wait(mariadb_url)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await holder.rollback()
        (other,) = await table.push([NewRow("welcome", b'{"user_id":2}', 0)])
        assert other is not None
        assert await table.row(other) is not None
    finally:
        await table.close()


async def test_a_call_waits_for_a_free_connection_within_the_connect_timeout(
    mariadb_url: str,
) -> None:
    # Every connection of the store is held by a call that waits for a lock: the next call
    # waits for one to come free, for the URL's connect_timeout at most, and says so.
    table = job.Table(f"{mariadb_url}?connect_timeout=1", max_size=1, answer_ms=5_000)
    try:
        async with locked_row(table, mariadb_url) as (row, holder):
            blocked = asyncio.ensure_future(table.cancel(row))  # holds the one connection
            await _until_a_lock_wait(mariadb_url)
            with pytest.raises(job.StoreUnavailable) as full:
                await table.row(row)
            assert str(full.value) == (
                f"MariaDB at {table.server.where}: no connection of the store's 1 came free "  # type: ignore[attr-defined]
                "within 1 s"
            )
            await holder.rollback()
            assert await blocked is True  # the held call went on, and cancelled the row
        assert await table.row(row) is None
    finally:
        await table.close()


@pytest.mark.parametrize(
    ("given", "bound_ms"),
    [({}, 30_015), ({"answer_ms": 100}, 315), ({"answer_ms": 20_000}, 60_015)],
)
def test_the_bound_on_one_call_is_answer_ms_for_each_of_its_three_tries(
    mariadb_url: str, given: dict[str, int], bound_ms: int
) -> None:
    """`bound_ms`, which `nilo-job worker` waits for past its grace period on a stop: answer_ms
    for each of the three tries a call that meets a deadlock is given, and the two pauses
    between them (5 ms, then 10 ms)."""
    assert job.Table(mariadb_url, **given).bound_ms == bound_ms  # type: ignore[attr-defined]


def slow_answers() -> job.Jobs:
    """A queue on the MariaDB database `NILO_TEST_SLOW_URL` names, whose server has 20 s to
    answer a call (for `nilo-job worker`)."""
    return job.Jobs(
        kinds=[Welcome], store=job.Table(os.environ["NILO_TEST_SLOW_URL"], answer_ms=20_000)
    )


class _Stopped(Exception):
    """Raised where the worker promises its exit, once the promise is seen."""


def test_the_worker_waits_on_a_stop_for_the_store_s_bound(
    mariadb_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nilo-job worker` on a MariaDB queue whose answer_ms is 20 s promises to exit within its
    grace period and the store's bound, 60.015 s (three tries of 20 s), not the 10 s of a store
    that says no bound."""
    from click.testing import CliRunner

    from nilo_job.cli import _worker, main

    promised: list[tuple[int, int]] = []

    def exits(grace_ms: int, bound_ms: int) -> None:
        promised.append((grace_ms, bound_ms))
        raise _Stopped  # before the worker serves

    monkeypatch.setattr(_worker, "Exits", exits)
    monkeypatch.setenv("NILO_TEST_SLOW_URL", mariadb_url)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        done = CliRunner().invoke(
            main, ["worker", "tests.stores.test_mariadb:slow_answers", "--grace-ms", "1000"]
        )
    finally:  # the worker takes the signals as it starts: the test's runner gets them back
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert isinstance(done.exception, _Stopped), done.output
    assert promised == [(1_000, 60_015)]


# ---------------------------------------------------------------------------- refusals


REFUSE_PUSHES = (
    "CREATE TRIGGER nilo_test_refuse BEFORE INSERT ON nilo_jobs FOR EACH ROW "
    "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the test refuses pushes'"
)


async def test_a_push_the_server_refuses_raises_the_server_s_error_and_writes_nothing(
    jobs: job.Jobs, mariadb_url: str
) -> None:
    """A trigger refuses every row: a push, alone or many, raises the driver's error with the
    server's words, as PostgreSQL's store raises psycopg's, not a `StoreUnavailable` that says
    the server cannot be reached; nothing is written, and the store goes on once the trigger
    is gone."""
    await sql(mariadb_url, REFUSE_PUSHES)
    with pytest.raises(asyncmy.errors.OperationalError) as refused:
        await jobs.push(Welcome(1))
    assert refused.value.args == (1644, "the test refuses pushes")
    assert not isinstance(refused.value, job.StoreUnavailable)
    with pytest.raises(asyncmy.errors.OperationalError) as refused:
        await jobs.push_many([Welcome(2), Welcome(3)])  # one multi-row INSERT
    assert refused.value.args == (1644, "the test refuses pushes")
    assert await jobs.stats() == (0, 0, 0)
    await sql(mariadb_url, "DROP TRIGGER nilo_test_refuse")
    assert await jobs.push(Welcome(4)) is not None
    assert await user_ids(mariadb_url) == [4]


@pytest.fixture
async def grantee(mariadb_url: str) -> AsyncIterator[tuple[str, str]]:
    """A user of the server's, `(its URL to the test's database, its name)`, granted SELECT on
    that database and INSERT on its nilo_jobs table alone; dropped after the test."""
    server = server_of(mariadb_url)
    name = f"nilo_u_{os.urandom(4).hex()}"
    await sql(mariadb_url, f"CREATE USER '{name}'@'%' IDENTIFIED BY 'pw'", None)  # (no params)
    try:
        for grant in (f"SELECT ON {server.database}.*", f"INSERT ON {server.database}.nilo_jobs"):
            await sql(mariadb_url, f"GRANT {grant} TO '{name}'@'%'", None)
        yield f"mariadb://{name}:pw@{server.address}/{server.database}", name
    finally:
        await sql(mariadb_url, f"DROP USER '{name}'@'%'", None)


async def test_a_privilege_the_user_lacks_is_the_server_s_refusal_not_an_outage(
    mariadb_url: str, grantee: tuple[str, str]
) -> None:
    """A user without UPDATE on the table: its claim is refused with the server's error (1142),
    not a `StoreUnavailable`; once its INSERT is revoked, so is its push (a change of a table's
    grants applies to the next statement of connections already open)."""
    url, name = grantee
    database = server_of(mariadb_url).database
    table = job.Table(url)
    try:
        (row,) = await table.push([NewRow("welcome", b'{"user_id":1}', 0)])
        assert row == 1
        with pytest.raises(asyncmy.errors.OperationalError) as refused:
            await table.claim(["welcome"], 1, 1_000_000, 1)
        assert refused.value.args[0] == 1142
        assert refused.value.args[1].startswith(f"UPDATE command denied to user '{name}'@")
        await sql(mariadb_url, f"REVOKE INSERT ON {database}.nilo_jobs FROM '{name}'@'%'", None)
        with pytest.raises(asyncmy.errors.OperationalError) as refused:
            await table.push([NewRow("welcome", b'{"user_id":2}', 0)])
        assert refused.value.args[0] == 1142
        assert refused.value.args[1].startswith(f"INSERT command denied to user '{name}'@")
        assert await table.stats() == (1, 0, 0)  # the store's reads go on
        # Tables as this version wants them: nothing to write, so no CREATE needed. With one
        # missing, the CREATE is refused, and `nilo-job migrate` says it.
        await table.create_missing()
        await sql(mariadb_url, "DROP TABLE nilo_jobs_deaths", None)
        with pytest.raises(job.StoreUnavailable) as unmade:
            await table.create_missing()
        assert str(unmade.value).startswith(
            f"MariaDB at {table.server.where} failed the creation of the table: CREATE "  # type: ignore[attr-defined]
            f"command denied to user '{name}'@"
        )
    finally:
        await table.close()


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (1040, "failed a test call"),  # too many connections
        (1053, "failed a test call"),  # the server is shutting down
        (1205, "failed a test call"),  # lock wait timeout
        (1213, "failed a test call"),  # a deadlock, three times
        (1317, "failed a test call"),  # KILL QUERY
        (1927, "failed a test call"),  # KILL CONNECTION
        (1969, "failed a test call"),  # max_statement_time
        (2013, "cannot reach"),  # the driver: the connection was lost
        (1142, None),  # a privilege the user lacks
        (1290, None),  # --read-only
        (1644, None),  # a trigger's SIGNAL
        (1792, None),  # a read-only transaction
        (4025, None),  # a CHECK constraint
    ],
)
async def test_the_server_s_errors_are_told_apart_by_their_numbers(
    mariadb_url: str, code: int, said: str | None
) -> None:
    """What a call raises for each error the driver gives it: a server out of reach, going away
    or short of something for now is a `StoreUnavailable` naming the server (a deadlock after
    three tries, every other error at the first); a statement the server refuses outright is
    the driver's error itself, at the first try."""
    table = job.Table(mariadb_url)
    tries: list[int] = []
    error = asyncmy.errors.OperationalError(code, "the server's words")

    async def call(cur: Any) -> None:
        await cur.execute("SELECT 1")
        await cur.fetchall()
        tries.append(code)
        raise error

    try:
        raised: pytest.ExceptionInfo[Exception]
        with pytest.raises(Exception) as raised:  # noqa: PT011
            await table._db.run(call, "a test call", transaction=True)  # type: ignore[attr-defined]
        if said is None:
            assert raised.value is error
        else:
            where = table.server.where  # type: ignore[attr-defined]
            words = {
                "cannot reach": f"cannot reach MariaDB at {where}: the server's words",
                "failed a test call": f"MariaDB at {where} failed a test call: the server's words",
            }
            assert isinstance(raised.value, job.StoreUnavailable)
            assert str(raised.value) == words[said]
            assert raised.value.__cause__ is error
        assert len(tries) == (3 if code == 1213 else 1)
        assert await table.ping() is None  # the store goes on
    finally:
        await table.close()


# ------------------------------------------------------------------------------ push_in


@pytest.fixture
async def users(mariadb_url: str) -> str:
    await sql(mariadb_url, "CREATE TABLE users (id bigint PRIMARY KEY)")
    return mariadb_url


async def test_push_in_on_an_asyncmy_connection_commits_or_rolls_back_with_it(
    jobs: job.Jobs, users: str
) -> None:
    async with side(users) as conn, conn.cursor() as cur:
        await conn.begin()
        await cur.execute("INSERT INTO users (id) VALUES (1)")
        assert await jobs.push_in(conn, Welcome(1)) is not None
        await conn.commit()
        await conn.begin()
        await jobs.push_in(conn, Welcome(2))
        with pytest.raises(asyncmy.errors.IntegrityError):
            await cur.execute("INSERT INTO users (id) VALUES (1)")
        await conn.rollback()
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.drain() == 1
    assert ran == [1]


async def test_push_in_on_a_pymysql_connection(jobs: job.Jobs, users: str) -> None:
    pymysql = pytest.importorskip("pymysql")
    server = server_of(users)
    conn = pymysql.connect(
        host=server.host, port=server.port, user=server.user, password=server.password,
        database=server.database, autocommit=False,
    )  # fmt: skip
    with contextlib.closing(conn):
        with conn.cursor() as cur:  # not autocommit: the INSERT opens the transaction
            cur.execute("INSERT INTO users (id) VALUES (1)")
        await asyncio.to_thread(jobs.sync.push_in, conn, Welcome(1))
        conn.rollback()
        assert await jobs.stats() == (0, 0, 0)
        await asyncio.to_thread(jobs.sync.push_in, conn, Welcome(2), unique="k")
        assert await asyncio.to_thread(jobs.sync.push_in, conn, Welcome(3), unique="k") is None
        conn.commit()
    assert await jobs.drain() == 1
    assert ran == [2]


async def test_push_in_refuses_an_autocommit_connection_outside_a_transaction(
    jobs: job.Jobs, mariadb_url: str
) -> None:
    async with side(mariadb_url) as conn:
        with pytest.raises(job.Refusal, match=re.escape("`await conn.begin()` first")):
            await jobs.push_in(conn, Welcome(1))
    with pytest.raises(job.Refusal) as refused:
        await jobs.push_in(object(), Welcome(1))
    for accepted in ("asyncmy Connection", "PyMySQL", "mysqlclient", "Django's connection"):
        assert accepted in str(refused.value)
    assert await jobs.stats() == (0, 0, 0)


async def test_a_key_pushed_in_a_rolled_back_transaction_is_free_for_the_next_push(
    jobs: job.Jobs, mariadb_url: str
) -> None:
    async with side(mariadb_url, autocommit=False) as conn:
        assert await jobs.push_in(conn, Welcome(1), unique="k") is not None
        await conn.rollback()
    assert await jobs.push(Welcome(1), unique="k") is not None
    assert await jobs.push(Welcome(1), unique="k") is None


# -------------------------------------------------------------------------- connections


async def test_pushes_recover_by_themselves_after_the_server_cuts_the_connections(
    jobs: job.Jobs, mariadb_url: str
) -> None:
    assert await jobs.push(Welcome(1)) is not None
    async with side(mariadb_url) as admin, admin.cursor() as cur:
        await cur.execute(
            "SELECT id FROM information_schema.processlist WHERE db = DATABASE() "
            "AND id <> CONNECTION_ID()"
        )
        for (thread,) in await cur.fetchall():
            await cur.execute(f"KILL CONNECTION {int(thread)}")
    written = [1]
    for user_id in range(2, 6):
        try:
            await jobs.push(Welcome(user_id))
        except job.StoreUnavailable:
            continue  # a push on a cut connection fails with a store error and writes nothing
        written.append(user_id)
    assert written[-3:] == [3, 4, 5]  # the store needed one failure at most to notice the cut
    assert await user_ids(mariadb_url) == written


async def test_a_push_cancelled_while_its_insert_waits_leaves_the_next_push_working(
    jobs: job.Jobs, mariadb_url: str
) -> None:
    assert await jobs.push(Welcome(1)) is not None
    async with side(mariadb_url) as blocker, blocker.cursor() as cur:
        await cur.execute("LOCK TABLES nilo_jobs WRITE")
        stuck = asyncio.create_task(jobs.push(Welcome(2)))
        await asyncio.sleep(0.3)  # real concurrency: the INSERT waits on the lock
        assert not stuck.done()
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        await cur.execute("UNLOCK TABLES")
    async with asyncio.timeout(10):
        assert await jobs.push(Welcome(3)) is not None
    assert await user_ids(mariadb_url) in ([1, 3], [1, 2, 3])  # the server may finish it


def test_pushes_from_the_sync_face_and_then_from_an_application_loop(mariadb_url: str) -> None:
    queue = job.Jobs(kinds=[Welcome], store=job.Table(mariadb_url))
    assert queue.sync.push(Welcome(1)) is not None  # the store opens on the sync face's loop

    async def app() -> list[int | None]:
        async with asyncio.timeout(10):
            return [await queue.push(Welcome(2)), await queue.push(Welcome(3))]

    assert None not in asyncio.run(app())  # that loop is closed with a connection of its own
    queue.sync.close()  # which this closes too, with the sync face's
    assert asyncio.run(user_ids(mariadb_url)) == [1, 2, 3]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_processes_forked_after_pushes_each_push_on_connections_of_their_own(
    mariadb_url: str,
) -> None:
    """A pre-forking server: the parent pushes once at start (its loop then closed), then forks
    workers that push. Each child must get its own connection, and its own row's id."""
    table = job.Table(mariadb_url)
    queue = job.Jobs(kinds=[Welcome], store=table)
    asyncio.run(queue.push(Welcome(0)))
    answers = pushed_from_forks(queue, Welcome, range(101, 107))
    rows = asyncio.run(sql(mariadb_url, "SELECT id, payload FROM nilo_jobs WHERE id > 1"))
    assert {row_id: int(re.findall(r"\d+", payload)[0]) for row_id, payload in rows} == answers
    asyncio.run(table.close())  # the parent's connection, of a closed loop: closed all the same


def test_ten_processes_pushing_one_key_at_once_make_one_row(
    mariadb_url: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    script = (
        "import asyncio, os, sys, time\n"
        "import nilo_job as job\n"
        "from tests.stores.test_mariadb import Welcome\n"
        "async def main():\n"
        "    jobs = job.Jobs(kinds=[Welcome], store=job.Table(sys.argv[1]))\n"
        "    await jobs.store.open()\n"
        "    while not os.path.exists(sys.argv[2]):\n"
        "        time.sleep(0.001)\n"
        "    print(await jobs.push(Welcome(1), unique='only-one'))\n"
        "    await jobs.store.close()\n"
        "asyncio.run(main())\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, mariadb_url, str(go)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(10)
    ]
    go.touch()
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        answers.append(out.strip())
    assert answers.count("None") == 9
    rows = asyncio.run(sql(mariadb_url, "SELECT kind, unique_key FROM nilo_jobs"))
    assert rows == [("welcome", "only-one")]


# ---------------------------------------------------------------- claims at once, for real


async def test_claims_at_once_from_two_stores_never_take_one_row_twice(mariadb_url: str) -> None:
    stores = [job.Table(mariadb_url), job.Table(mariadb_url)]
    try:
        pushed = await stores[0].push([NewRow("a", b"{}", 0) for _ in range(300)])
        taken: list[int] = []

        async def claimer(store: job.Store) -> None:
            while rows := await store.claim(["a"], 1, 1_000_000, 7):
                taken.extend(row.id for row in rows)

        async with asyncio.timeout(60):
            await asyncio.gather(*(claimer(stores[n % 2]) for n in range(6)))
        assert sorted(taken) == pushed
        assert await stores[1].stats() == (0, 300, 0)
    finally:
        for store in stores:
            await store.close()


async def _waits_for_a_named_lock(url: str) -> bool:
    rows = await sql(
        url,
        "SELECT count(*) FROM information_schema.PROCESSLIST "
        "WHERE DB = DATABASE() AND STATE LIKE %s",
        ("%user lock%",),
    )
    return rows == [(1,)]


async def test_a_claim_held_open_keeps_no_row_of_another_kind_from_its_claims(
    mariadb_url: str,
) -> None:
    """A claim of kind `a` that is still in its transaction (here it waits for the named lock of
    limited kind `c`, which another process's claim holds) has read past the end of `a`'s due
    rows: the next entry of the index is `b`'s most due row. It locks only what it takes, so a
    claim of `b` meanwhile takes that row first, as it would with no claim of `a` under way."""
    from nilo_job.store.mysql import SQL

    stores = [job.Table(mariadb_url), job.Table(mariadb_url)]
    try:
        (a,) = await stores[0].push([NewRow("a", b"{}", 5)])
        b = await stores[0].push([NewRow("b", b"{}", at) for at in (1, 2, 3)])
        async with side(mariadb_url) as other, other.cursor() as cur:
            await cur.execute(SQL["lock_kind"], {"kind": "c", "wait": 5})
            assert await cur.fetchone() == (1,)
            held_open = asyncio.create_task(
                stores[0].claim(["a", "c"], 10, 1_000_000, 5, limits={"a": 5, "c": 5})
            )
            for _ in range(1_000):  # up to 10 s
                if await _waits_for_a_named_lock(mariadb_url):
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the claim of a and c never waited for c's named lock")
            taken = await stores[1].claim(["b"], 10, 1_000_000, 1)
            assert [row.id for row in taken] == b[:1]
            await cur.execute("DO RELEASE_ALL_LOCKS()")
            assert [row.id for row in await held_open] == [a]
    finally:
        for store in stores:
            await store.close()


async def test_a_claim_reads_on_past_the_rows_other_claims_hold(mariadb_url: str) -> None:
    """Rows another claim holds are skipped: a claim takes as many as it asked for from the
    rows after them, in their order."""
    store = job.Table(mariadb_url)
    try:
        ids = await store.push([NewRow("a", b"{}", at) for at in range(1, 9)])
        async with side(mariadb_url, autocommit=False) as other, other.cursor() as cur:
            # as another store's claim: READ COMMITTED, the rows locked by their key alone
            await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            await cur.execute(
                "SELECT id FROM nilo_jobs FORCE INDEX (PRIMARY) WHERE id IN (%s, %s, %s) "
                "FOR UPDATE",
                ids[:3],
            )
            taken = await store.claim(["a"], 10, 1_000_000, 4)
            assert [row.id for row in taken] == ids[3:7]
            await other.rollback()
        assert [row.id for row in await store.claim(["a"], 10, 1_000_000, 4)] == [
            *ids[:3],
            ids[7],
        ]
    finally:
        await store.close()


async def test_a_limited_kind_is_claimed_within_its_limit_by_claims_at_once(
    mariadb_url: str,
) -> None:
    stores = [job.Table(mariadb_url), job.Table(mariadb_url)]
    try:
        await stores[0].push([NewRow(kind, b"{}", 0) for kind in ("a", "b") for _ in range(20)])

        async def claim(store: job.Store) -> list[str]:
            rows = await store.claim(["a", "b"], 1, 1_000_000, 5, limits={"a": 3})
            return [row.kind for row in rows]

        async with asyncio.timeout(30):
            kinds = await asyncio.gather(*(claim(stores[n % 2]) for n in range(8)))
        assert sum(found.count("a") for found in kinds) == 3  # never more, however they meet
        assert sum(len(found) for found in kinds) == 23
    finally:
        for store in stores:
            await store.close()


# ------------------------------------------------------------ wake-ups, the clock, payloads


async def test_a_push_in_another_process_on_this_host_wakes_a_store_that_watches_at_once(
    mariadb_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = (
        "import asyncio, sys\n"
        "import nilo_job as job\n"
        "from nilo_job.store.contract import NewRow\n"
        "async def main():\n"
        "    table = job.Table(sys.argv[1])\n"
        "    await table.push([NewRow('a', b'{}', 123_456_789)])\n"
        "    table.wake_others()  # as after a push_in\n"
        "    await table.close()\n"
        "asyncio.run(main())\n"
    )
    with tempfile.TemporaryDirectory(prefix="nw") as runtime:  # short: a socket's path is
        monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
        watcher = job.Table(mariadb_url)
        heard: asyncio.Queue[int | None] = asyncio.Queue()
        watching = asyncio.create_task(watcher.watch(heard.put_nowait))
        try:
            async with asyncio.timeout(20):
                assert await heard.get() is None  # as its socket is bound: a claim at once
                assert await heard.get() is None  # and again a moment later
                pusher = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", script, mariadb_url, cwd=ROOT,
                    stderr=subprocess.PIPE,
                )  # fmt: skip
                _, err = await pusher.communicate()
                assert pusher.returncode == 0, err
                assert [await heard.get(), await heard.get()] == [123_456_789, None]
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            await watcher.close()


async def test_serve_follows_the_database_clock(mariadb_url: str) -> None:
    table = job.Table(mariadb_url)
    jobs = job.Jobs(kinds=[Welcome], store=table)
    database_now = await table.now_us()
    assert database_now is not None
    assert abs(database_now - job.now_us()) < 5_000_000
    await jobs._parts.clock.follow(jobs.store.now_us)
    assert abs(jobs._parts.clock.now() - job.now_us()) < 1_000_000
    await table.close()


async def test_a_payload_of_a_mebibyte_comes_back_whole(mariadb_url: str) -> None:
    table = job.Table(mariadb_url)
    payload = b'{"s":"' + "é".encode() * 524_284 + b'"}'
    assert len(payload) == table.max_payload == 1_048_576  # type: ignore[attr-defined]
    try:
        (row,) = await table.push([NewRow("a", payload, 0)])
        (claimed,) = await table.claim(["a"], 1, 1_000_000, 1)
        assert (claimed.id, claimed.payload) == (row, payload)
    finally:
        await table.close()


async def test_a_transaction_held_open_is_named_as_what_holds_back_the_cleanup(
    mariadb_url: str,
) -> None:
    table = job.Table(mariadb_url)
    try:
        assert await table.held_back() is None
        async with side(mariadb_url) as report, report.cursor() as cur:
            await cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            await cur.execute("SELECT count(*) FROM nilo_jobs")
            await cur.fetchall()
            await cur.execute("SELECT CONNECTION_ID()")
            (thread,) = await cur.fetchone()
            held = await seen(table, lambda hold: hold is not None)
            assert held is not None
            assert (held.pid, held.state, held.user, held.application, held.wal_bytes) == (
                thread, "idle in transaction", server_of(mariadb_url).user, None, None,
            )  # fmt: skip
            assert 0 <= held.age_s < 5
            assert held.end_it == f"KILL {thread}"
            assert described(held, "the table").endswith(
                f"end it (COMMIT or ROLLBACK in that session, or KILL {thread})"
            )
            await report.commit()
        assert await seen(table, lambda hold: hold is None) is None
    finally:
        await table.close()


async def seen(table: job.Store, wanted: Callable[[HeldBack | None], bool]) -> HeldBack | None:
    """What `table.held_back()` answers once it is `wanted`: InnoDB refreshes what it shows of
    its transactions only once nobody has read it for 100 ms, so a look soon after another
    answers what that one saw. (Serve looks every 15 s.)"""
    async with asyncio.timeout(5):
        while not wanted(found := await table.held_back()):  # noqa: ASYNC110 (no event to wait)
            await asyncio.sleep(0.15)
    return found


async def _pings(url: str) -> int:
    """The server's count of pings (`Com_admin_commands`), from every client."""
    async with side(url) as conn, conn.cursor() as cur:
        await cur.execute("SHOW GLOBAL STATUS LIKE 'Com_admin_commands'", ())
        row = await cur.fetchone()
    return int(row[1])


async def test_a_connection_used_a_moment_ago_is_not_pinged_before_each_call(
    mariadb_url: str,
) -> None:
    store = job.Table(mariadb_url)
    await store.open()
    try:
        await store.push([NewRow("k", b"{}", 1, None)])  # its connection is made and used
        before = await _pings(mariadb_url)
        for _ in range(20):
            await store.push([NewRow("k", b"{}", 1, None)])
        after = await _pings(mariadb_url)
    finally:
        await store.close()
    assert after - before == 0
