"""nilo-job behind a real PgBouncer in transaction pooling mode.

The `bouncer` fixture starts PgBouncer (`pool_mode = transaction`, two server connections per
database, so that many client connections take turns on the same few sessions) in front of the
test's database, and stops it after. Through it: pushes one at a time (more than psycopg's
prepare threshold, which would otherwise prepare statements on sessions that are not the
client's), push_many, push_in on an application's connection, claims and ends by drain; serve
polling only, and serve listening on a direct URL, woken at once by another process's push; and
two worker processes of four workers on 1,000 rows, each run exactly once.

A store not told of PgBouncer (no `nilo_pooler=true`) finds it as it opens, behind a PgBouncer
that refuses the `options` startup parameter (as it does by default) and behind one that ignores
it (`ignore_startup_parameters = options`, where the workers' sessions would otherwise open and
their prepared statements meet each other's); and, should a pooler hide itself from that look,
at the first error of a prepared statement, with the call that met it made again. Each way every
row runs exactly once, in one process and in two worker processes, with one WARNING per store.

Without PgBouncer (`/usr/sbin/pgbouncer`, Debian's `pgbouncer` package) the tests skip with the
reason, except in CI (CI=true), where that is a failure.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

import nilo_job as job
from tests.helpers.serving import listeners, until
from tests.helpers.workers import procs_queue, start, stop

ROWS = 1_000

pytestmark = pytest.mark.postgres


def _pgbouncer() -> str:
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
    )
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs PgBouncer: apt-get install pgbouncer")
        pytest.skip("PgBouncer is not installed (apt-get install pgbouncer)")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def bouncer(pg_url: str) -> Iterator[str]:
    """The URL of the test's database through a PgBouncer of its own in transaction mode."""
    yield from _bouncer(pg_url)


@pytest.fixture
def lenient_bouncer(pg_url: str) -> Iterator[str]:
    """The same, through a PgBouncer that ignores the `options` startup parameter rather than
    refusing the connection (a common setting: the session then has the server's defaults)."""
    yield from _bouncer(pg_url, "ignore_startup_parameters = extra_float_digits,options\n")


@pytest.fixture
def session_bouncer(pg_url: str) -> Iterator[str]:
    """The same, through a PgBouncer in session mode: each client keeps one server session."""
    yield from _bouncer(pg_url, "default_pool_size = 40\n", mode="session")


def _bouncer(pg_url: str, extra: str = "", mode: str = "transaction") -> Iterator[str]:
    binary = _pgbouncer()
    server = conninfo_to_dict(pg_url)
    port = _free_port()
    # PgBouncer will not run as root: it is told to become `nobody`, who must read its config.
    folder = Path(tempfile.mkdtemp(prefix="nilo-pgbouncer-"))
    folder.chmod(0o755)
    config = folder / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        f"* = host={server.get('host', '127.0.0.1')} port={server.get('port', 5432)} "
        f"user={server.get('user', 'postgres')}"
        + (f" password={server['password']}" if server.get("password") else "")
        + "\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = any\npool_mode = {mode}\nmax_client_conn = 500\n"
        + (extra if "default_pool_size" in extra else "default_pool_size = 2\n" + extra)
    )
    config.chmod(0o644)
    as_root = ["-u", "nobody"] if os.geteuid() == 0 else []
    log = (folder / "out.log").open("wb")
    proc = subprocess.Popen([binary, *as_root, str(config)], stdout=log, stderr=log)
    url = f"postgresql://{server.get('user', 'postgres')}@127.0.0.1:{port}/{server['dbname']}"
    try:
        deadline = time.monotonic() + 10
        while True:  # until it accepts connections (bounded)
            try:
                psycopg.connect(url, connect_timeout=2, prepare_threshold=None).close()
                break
            except psycopg.OperationalError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"PgBouncer did not start: {(folder / 'out.log').read_text()}"
                    ) from None
                time.sleep(0.05)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


_ran: list[int] = []


@dataclass
class Note:
    nilo_job = "note"
    retry = job.Retry.NONE

    n: int

    async def run(self) -> None:
        _ran.append(self.n)


def _server_sessions(pg_url: str) -> int:
    """How many sessions the server holds on the test's database, besides this one."""
    with psycopg.connect(pg_url, autocommit=True) as admin:
        found = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchone()
    return 0 if found is None else int(found[0])


async def test_pushes_push_in_claims_and_ends_go_through_pgbouncer(
    bouncer: str, pg_url: str
) -> None:
    _ran.clear()
    queue = job.Jobs(kinds=[Note], store=job.Table(bouncer, pooler=True))
    other = job.Jobs(kinds=[Note], store=job.Table(bouncer, pooler=True))
    try:
        # Two stores pushing at once, one row at a time, share PgBouncer's two sessions: with
        # prepared statements they would meet each other's `_pg3_0` and fail.
        ids = await asyncio.gather(
            *(queue.push(Note(n)) for n in range(20)),
            *(other.push(Note(n)) for n in range(20, 40)),
        )
        assert len(set(ids)) == 40
        many = await queue.push_many([Note(n) for n in range(40, 140)])
        assert len(set(many)) == 100
        unique = [await queue.push(Note(140), unique="one") for _ in range(3)]
        assert unique[0] is not None
        assert unique[1:] == [None, None]
        async with await psycopg.AsyncConnection.connect(bouncer, prepare_threshold=None) as conn:
            async with conn.transaction():
                for n in range(141, 151):
                    await queue.push_in(conn, Note(n))
            async with conn.transaction():
                await queue.push_in(conn, Note(999))
                raise psycopg.Rollback()  # a rolled-back push is never there
        assert await queue.drain() == 151
        assert sorted(_ran) == list(range(151))
        assert await queue.stats() == (0, 0, 0)
        assert _server_sessions(pg_url) <= 2  # every client connection took turns on two
        # The workers' settings lasted only for their own transactions: the sessions PgBouncer
        # lends to everyone else next have the server's own.
        async with await psycopg.AsyncConnection.connect(
            bouncer, prepare_threshold=None, autocommit=True
        ) as conn:
            for _ in range(4):
                cur = await conn.execute(
                    "SELECT current_setting('synchronous_commit'), "
                    "current_setting('enable_bitmapscan')"
                )
                assert await cur.fetchone() == ("on", "on")
    finally:
        await queue.store.close()
        await other.store.close()


def test_the_url_can_say_pooler_and_listen_url(pg_url: str) -> None:
    url = f"{pg_url}?connect_timeout=5&nilo_pooler=true&nilo_listen_url={quote(pg_url, safe='')}"
    table = job.Table(url)
    assert (table.pooler, table.listen_url) == (True, pg_url)  # type: ignore[attr-defined]
    assert table.conninfo == f"{pg_url}?connect_timeout=5"  # type: ignore[attr-defined]
    plain = job.Table(f"{pg_url}?nilo_pooler=false")
    assert (plain.pooler, plain.listen_url) == (False, None)  # type: ignore[attr-defined]
    with pytest.raises(job.Refusal, match=r"nilo_pooler='yes' in the URL: write nilo_pooler=true"):
        job.Table(f"{pg_url}?nilo_pooler=yes")
    with pytest.raises(job.Refusal, match=r"two listen URLs"):
        job.Table(f"{pg_url}?nilo_listen_url={quote(pg_url)}", listen_url=pg_url + "x")
    with pytest.raises(job.Refusal, match=r"pooler='yes'\): pass True, False or None"):
        job.Table(pg_url, pooler="yes")
    with pytest.raises(job.Refusal, match=r"listen_url='mysql://db': pass the direct"):
        job.Table(pg_url, pooler=True, listen_url="mysql://db")


async def test_an_application_pool_behind_pgbouncer_must_not_prepare(bouncer: str) -> None:
    preparing = AsyncConnectionPool(bouncer, open=False)
    with pytest.raises(job.Refusal, match=r"kwargs=\{'prepare_threshold': None\}"):
        job.Table(preparing, pooler=True)
    _ran.clear()
    pool = AsyncConnectionPool(bouncer, open=False, kwargs={"prepare_threshold": None})
    await pool.open()
    try:
        queue = job.Jobs(kinds=[Note], store=job.Table(pool, pooler=True))
        for n in range(12):
            await queue.push(Note(n))
        assert await queue.drain() == 12
        assert sorted(_ran) == list(range(12))
    finally:
        await pool.close()


async def test_serve_behind_pgbouncer_without_listen_url_polls_and_says_so(
    bouncer: str, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nilo_job")
    _ran.clear()
    queue = job.Jobs(kinds=[Note], store=job.Table(bouncer, pooler=True), poll_ms=100)
    pusher = job.Jobs(kinds=[Note], store=job.Table(bouncer, pooler=True))  # another producer
    serving = asyncio.create_task(queue.serve())
    try:
        await until("serve to start", lambda: "serving note" in caplog.text)
        await pusher.push(Note(1))
        await until("the poll to find the row", lambda: _ran == [1], seconds=10)
        assert listeners(pg_url) == 0  # nothing listens: a pooler cannot carry LISTEN
    finally:
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        await queue.store.close()
        await pusher.store.close()
    where = f"127.0.0.1:{conninfo_to_dict(bouncer)['port']}/{conninfo_to_dict(bouncer)['dbname']}"
    assert (
        f"not listening for other processes' pushes: PostgreSQL at {where} is behind a pooler "
        "(pooler=True) and no listen_url was given; their rows are found by the poll (poll_ms)"
    ) in caplog.messages


# --------------------------------------------------------------------- real worker processes


def worker_env(
    monkeypatch: pytest.MonkeyPatch, store: str, out: Path, poll_ms: int
) -> dict[str, str]:
    """The environment the worker processes read (tests/helpers/procs_kinds.py), set here too."""
    values = {
        "NILO_TEST_STORE": store,
        "NILO_TEST_OUT": str(out),
        "NILO_TEST_TIMEOUT_MS": "20000",
        "NILO_TEST_POLL_MS": str(poll_ms),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


@pytest.fixture
def env(
    bouncer: str, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """The worker processes' environment: the store is PgBouncer's URL, saying the pooler and
    the direct URL to listen on in its own query (as a deployment's one setting would)."""
    told = f"{bouncer}?nilo_pooler=true&nilo_listen_url={quote(pg_url, safe='')}"
    return worker_env(monkeypatch, told, tmp_path, poll_ms=200)


@pytest.fixture
async def queue(env: dict[str, str]) -> AsyncIterator[job.Jobs]:
    async for jobs in procs_queue():
        yield jobs


async def wait_stamp(out: Path, n: int, seconds: float) -> None:
    path = out / f"stamp-{n}"
    await until(f"row {n} to start", path.exists, seconds=seconds)


@pytest.mark.procs
async def test_a_worker_behind_pgbouncer_listens_on_the_direct_url_and_wakes_at_once(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path, pg_url: str
) -> None:
    from tests.helpers import procs_kinds

    # A poll of ten minutes: a row that starts within a tenth of it was woken by the NOTIFY,
    # which went through PgBouncer with the push and reached the listener on the direct URL.
    poll_ms = 600_000
    worker = start(env, poll_ms=poll_ms)
    try:
        await until("the worker to listen on the server", lambda: listeners(pg_url) == 1)
        for n in range(1, 6):
            await queue.push(procs_kinds.Stamp(n=n))
            await wait_stamp(tmp_path, n, poll_ms / 1_000 / 10)
    finally:
        code, output = stop(worker)
    assert code == 0, output
    server = conninfo_to_dict(pg_url)
    assert (
        f"listening for other processes' pushes on PostgreSQL at "
        f"{server['host']}:{server['port']}/{server['dbname']} (direct, beside the pooler)"
    ) in output, output
    assert "Traceback" not in output, output


def _runs(out: Path) -> Counter[int]:
    count: Counter[int] = Counter()
    for log in out.glob("work-*.log"):
        for line in log.read_text().splitlines():
            count[int(line.split()[0])] += 1
    return count


@pytest.mark.procs
async def test_two_processes_of_four_workers_behind_pgbouncer_run_1000_rows_exactly_once(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path, bouncer: str, pg_url: str
) -> None:
    from tests.helpers import procs_kinds

    workers = [start(env, "--workers", "4") for _ in range(2)]
    try:
        await until("the two workers to listen", lambda: listeners(pg_url) == 2, seconds=30)
        # Eight rows that can only finish together: both processes take part in the claims.
        await queue.push_many([procs_kinds.Meet(n=n, of=8) for n in range(8)])
        async with (
            await psycopg.AsyncConnection.connect(bouncer, prepare_threshold=None) as conn,
            conn.transaction(),
        ):
            for n in range(ROWS):
                await queue.push_in(conn, procs_kinds.Work(n=n))
        deadline = time.monotonic() + 120
        while (stats := await queue.stats()).queued or stats.running:
            assert time.monotonic() < deadline, f"not settled: {stats}"
            await asyncio.sleep(0.1)
    finally:
        results = [stop(proc) for proc in workers]
    count = _runs(tmp_path)
    assert sorted(count) == list(range(ROWS))
    assert set(count.values()) == {1}
    assert procs_kinds.met(tmp_path) == {proc.pid: 4 for proc in workers}
    for code, output in results:
        assert code == 0, output
        assert "Traceback" not in output, output
        assert "event loop:" in output, output
    assert await queue.stats() == (0, 0, 0)


# ------------------------------------------------------------- a store not told of PgBouncer


def _where(url: str) -> str:
    found = conninfo_to_dict(url)
    return f"{found['host']}:{found['port']}/{found['dbname']}"


def _found(url: str, how: str) -> str:
    """The WARNING of a store opened from `url` (no listen URL) that found a pooler by `how`."""
    return (
        f"PostgreSQL at {_where(url)} answers through a pooler ({how}), which nilo-job was not "
        "told: the store now prepares no statement on the server and keeps no setting on a "
        "session, as with nilo_pooler=true, and serve does not LISTEN through it (other "
        "processes' rows are found by the poll); to say so yourself, put nilo_pooler=true in "
        "the URL (or pass pooler=True), and nilo_listen_url=<the server's direct URL, "
        "percent-encoded> (or listen_url=) for serve to be woken by other processes' pushes at "
        "once; a pooler in session mode keeps sessions: nilo_pooler=false (or pooler=False) "
        "keeps them in use"
    )


LOOKED = (
    "the server process id a connection is given at its start is not the one that runs its "
    "statements"
)
NOT_LISTENING = (
    "not listening for other processes' pushes: PostgreSQL at {} is behind a pooler (found, not "
    "told) and no listen_url was given; their rows are found by the poll (poll_ms)"
)


def _said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "nilo_job" and r.levelno == level]


async def _push_and_serve(url: str, rows: int, caplog: pytest.LogCaptureFixture) -> None:
    """Push `rows` rows one at a time through a store opened from `url`, then serve them with
    four workers until every one has run and serve has said it does not listen."""
    table = job.Table(url)
    queue = job.Jobs(kinds=[Note], store=table, workers=4, poll_ms=50)
    try:
        for n in range(rows):  # one at a time: far past psycopg's threshold for preparing
            await queue.push(Note(n))
        async with queue.serving(grace_ms=5_000):
            await until("every row to run", lambda: len(_ran) >= rows, 30)
            said = NOT_LISTENING.format(_where(url))
            await until("serve to say it does not listen", lambda: said in caplog.messages)
        assert await queue.stats() == (0, 0, 0)
    finally:
        await table.close()


@pytest.mark.parametrize("pgbouncer", ["bouncer", "lenient_bouncer"])
async def test_a_store_not_told_of_pgbouncer_finds_it_as_it_opens_and_runs_every_row_once(
    pgbouncer: str, request: pytest.FixtureRequest, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A URL without nilo_pooler=true: the store looks as it opens, before any statement is
    prepared or any worker's session is asked for the `options` PgBouncer refuses (or drops)."""
    url = request.getfixturevalue(pgbouncer)
    caplog.set_level(logging.INFO, logger="nilo_job")
    _ran.clear()
    await _push_and_serve(url, 550, caplog)
    assert sorted(_ran) == list(range(550))  # each exactly once
    assert _said(caplog, logging.WARNING) == [_found(url, LOOKED)]
    assert NOT_LISTENING.format(_where(url)) in _said(caplog, logging.INFO)
    assert "cannot reach PostgreSQL" not in caplog.text


async def test_a_pooler_hidden_from_that_look_is_found_at_its_first_prepared_statement_error(
    lenient_bouncer: str,
    pg_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Should a pooler pass the server's process ids on, the store finds it at the first error
    of a statement prepared on a session PgBouncer lends to another client (already there, not
    there, with other parameters, or reading ours as other types), and makes that call again,
    preparing nothing: it had not run, so nothing runs twice."""

    async def hidden(conn: psycopg.AsyncConnection[object]) -> bool:
        return False

    monkeypatch.setattr("nilo_job.store.postgres.connections.through_pooler", hidden)
    caplog.set_level(logging.INFO, logger="nilo_job")
    _ran.clear()
    await _push_and_serve(lenient_bouncer, 550, caplog)
    assert sorted(_ran) == list(range(550))  # each exactly once
    [warning] = _said(caplog, logging.WARNING)
    errors = (
        r'prepared statement "_pg3_\d+" (already exists|does not exist)'
        r'|bind message supplies \d+ parameters, but prepared statement "_pg3_\d+" requires \d+'
        r'|invalid byte sequence for encoding "UTF8": 0x00'
        r"|incorrect binary data format in bind parameter \d+"
        # our values bound to another client's statement of the same name, read as its types
        r"|invalid input syntax for type \w+.*|.*out of range.*|.*violates .* constraint.*"
    )
    pattern = re.escape(_found(lenient_bouncer, "HOW")).replace("HOW", f"({errors})")
    assert re.fullmatch(pattern, warning), warning
    assert NOT_LISTENING.format(_where(lenient_bouncer)) in _said(caplog, logging.INFO)
    assert "cannot reach PostgreSQL" not in caplog.text


async def _swap_prepared(conn: psycopg.AsyncConnection[Any]) -> None:
    """Put another client's statement under the name of each statement psycopg prepared on
    `conn`'s session, with as many parameters, all of type json: what a pooler lending that
    session to both does. Our values bound to it are not JSON."""
    cur = await conn.execute(
        "SELECT name, cardinality(parameter_types) FROM pg_prepared_statements", prepare=False
    )
    prepared = await cur.fetchall()
    assert prepared, "psycopg prepared nothing yet"
    for name, count in prepared:
        await conn.execute(f"DEALLOCATE {name}", prepare=False)
        types = ", ".join(["json"] * count)
        await conn.execute(f"PREPARE {name} ({types}) AS SELECT 1", prepare=False)


async def _notes(url: str) -> list[int]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT (payload->>'n')::int FROM nilo_jobs WHERE kind = 'note' ORDER BY 1"
        )
        return [n for (n,) in await cur.fetchall()]


@pytest.mark.parametrize("opened", ["url", "pool"])
async def test_a_push_bound_to_another_clients_statement_is_made_again_and_finds_the_pooler(
    opened: str, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Should a pooler keep the server's process ids, a statement psycopg prepared may be lent
    a session where another client's of the same name reads our values as other types (`invalid
    input syntax for type json`): that statement failed whole, so the store makes the call again
    preparing nothing, it runs once, and the store says it found a pooler. (Here the other
    client's statement is put on the store's own session by hand, on a direct connection.)"""
    caplog.set_level(logging.WARNING, logger="nilo_job")
    pool = AsyncConnectionPool(pg_url, min_size=1, max_size=1, open=False)
    table = job.Table(pg_url) if opened == "url" else job.Table(pool)
    queue = job.Jobs(kinds=[Note], store=table)
    try:
        await pool.open()
        for n in range(8):  # past psycopg's prepare threshold (5)
            await queue.push(Note(n))
        if opened == "url":
            kept = table._connections.kept["push"].conn  # type: ignore[attr-defined]
            await _swap_prepared(kept)
        else:
            async with pool.connection() as conn:
                await _swap_prepared(conn)
        await queue.push(Note(8))
        await queue.push(Note(9))
        if opened == "pool":
            async with pool.connection() as conn:
                assert conn.prepare_threshold == 5  # lent back as the application opened it
    finally:
        await table.close()
        await pool.close()
    assert await _notes(pg_url) == list(range(10))  # each once
    [warning] = _said(caplog, logging.WARNING)
    how = "invalid input syntax for type json"
    if opened == "url":
        assert warning == _found(pg_url, how)
    else:
        assert warning.startswith(
            f"PostgreSQL at {_where(pg_url)} answers through a pooler ({how}), which nilo-job "
            "was not told: the store now prepares no statement on the server"
        ), warning
        assert "pass job.Table(pool, pooler=True)" in warning, warning


@pytest.mark.parametrize("opened", ["url", "pool"])
async def test_values_the_server_refuses_for_themselves_are_not_taken_for_a_pooler(
    opened: str, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A push the server refuses for its own values (here a CHECK the application added) is
    refused again when made without preparing: the server's error is raised as it is, nothing
    is written, no pooler is said to be there, and the next pushes are made as before."""
    caplog.set_level(logging.WARNING, logger="nilo_job")
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
        await admin.execute(
            "ALTER TABLE nilo_jobs ADD CONSTRAINT no_666 CHECK (payload::text NOT LIKE '%666%')"
        )
    pool = AsyncConnectionPool(pg_url, min_size=1, max_size=1, open=False)
    table = job.Table(pg_url) if opened == "url" else job.Table(pool)
    queue = job.Jobs(kinds=[Note], store=table)
    try:
        await pool.open()
        for n in range(8):
            await queue.push(Note(n))
        with pytest.raises(psycopg.errors.CheckViolation, match="no_666"):
            await queue.push(Note(666))
        for n in range(8, 16):
            await queue.push(Note(n))
        if opened == "pool":  # the store prepares on the application's connection, as before
            async with pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM pg_prepared_statements", prepare=False
                )
                assert await cur.fetchone() == (1,)
    finally:
        await table.close()
        await pool.close()
    assert await _notes(pg_url) == list(range(16))
    assert _said(caplog, logging.WARNING) == []


def test_a_bind_read_under_another_clients_parameter_types_is_a_collision() -> None:
    """A statement of the same name another client prepared with other parameter types reads
    the bind's binary values as those types: the server's words are an encoding or binary format
    error, before the statement runs."""
    from nilo_job.store.postgres.pooler import collided

    misread = 'invalid byte sequence for encoding "UTF8": 0x00'
    assert collided(psycopg.errors.CharacterNotInRepertoire(misread))
    binary = "incorrect binary data format in bind parameter 2"
    assert collided(psycopg.errors.InvalidBinaryRepresentation(binary))
    assert collided(psycopg.errors.DuplicatePreparedStatement('"_pg3_0" already exists'))
    assert not collided(psycopg.errors.UniqueViolation("duplicate key value"))
    assert not collided(psycopg.errors.ProtocolViolation("unexpected message type"))


async def test_an_application_pool_not_said_to_be_behind_pgbouncer_is_lent_back_as_it_was(
    bouncer: str, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Over the application's own pool (which prepares, as psycopg does by default) the store
    prepares nothing on the pool's connections, and leaves them as it found them; the WARNING
    says what the pool needs for the application's own statements."""
    caplog.set_level(logging.INFO, logger="nilo_job")
    _ran.clear()
    async with AsyncConnectionPool(bouncer, min_size=1, max_size=4, open=False) as pool:
        queue = job.Jobs(kinds=[Note], store=job.Table(pool), workers=4, poll_ms=50)
        for n in range(200):
            await queue.push(Note(n))
        async with queue.serving(grace_ms=5_000):
            await until("every row to run", lambda: len(_ran) >= 200, 30)
        assert await queue.stats() == (0, 0, 0)
        async with pool.connection() as conn:
            assert conn.prepare_threshold == 5  # psycopg's own, as the application opened it
    assert sorted(_ran) == list(range(200))
    assert _said(caplog, logging.WARNING) == [
        f"PostgreSQL at {_where(bouncer)} answers through a pooler ({LOOKED}), which nilo-job "
        "was not told: the store now prepares no statement on the server and keeps no setting "
        "on a session, as with nilo_pooler=true, and serve does not LISTEN through it (other "
        "processes' rows are found by the poll); to say so yourself, pass job.Table(pool, "
        "pooler=True), open the pool with AsyncConnectionPool(url, kwargs={'prepare_threshold': "
        "None}) for your own statements through it, and nilo_listen_url=<the server's direct "
        "URL, percent-encoded> (or listen_url=) for serve to be woken by other processes' "
        "pushes at once; a pooler in session mode keeps sessions: job.Table(pool, "
        "pooler=False) keeps them in use"
    ]
    assert "cannot reach PostgreSQL" not in caplog.text


@pytest.fixture
def untold_env(
    lenient_bouncer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """The worker processes' environment: PgBouncer's URL, with nothing said about it, through
    the PgBouncer that lets the workers' sessions open (so, without the look, their statements
    prepared on shared sessions would meet each other's)."""
    return worker_env(monkeypatch, lenient_bouncer, tmp_path, poll_ms=100)


@pytest.fixture
async def untold_queue(untold_env: dict[str, str]) -> AsyncIterator[job.Jobs]:
    async for jobs in procs_queue():
        yield jobs


@pytest.mark.procs
async def test_two_processes_not_told_of_pgbouncer_find_it_and_run_1000_rows_exactly_once(
    untold_env: dict[str, str], untold_queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    workers = [start(untold_env, "--workers", "4") for _ in range(2)]
    try:
        # Eight rows that can only finish together: both processes take part in the claims.
        await untold_queue.push_many([procs_kinds.Meet(n=n, of=8) for n in range(8)])
        for n in range(ROWS):  # one at a time, from a third process, while they claim
            await untold_queue.push(procs_kinds.Work(n=n))
        deadline = time.monotonic() + 120
        while (stats := await untold_queue.stats()).queued or stats.running:
            assert time.monotonic() < deadline, f"not settled: {stats}"
            await asyncio.sleep(0.1)
    finally:
        results = [stop(proc) for proc in workers]
    count = _runs(tmp_path)
    assert sorted(count) == list(range(ROWS))
    assert set(count.values()) == {1}
    assert procs_kinds.met(tmp_path) == {proc.pid: 4 for proc in workers}
    for code, output in results:
        assert code == 0, output
        assert output.count("answers through a pooler") == 1, output
        assert "cannot reach PostgreSQL" not in output, output
        assert "Traceback" not in output, output


async def test_a_store_told_of_no_transaction_pooler_keeps_sessions_behind_one_in_session_mode(
    session_bouncer: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`nilo_pooler=false` says a pooler in session mode (or none) is in between: the store does
    not look, says nothing, and serve listens through it, woken by another store's push."""
    caplog.set_level(logging.INFO, logger="nilo_job")
    _ran.clear()
    table = job.Table(f"{session_bouncer}?nilo_pooler=false")
    queue = job.Jobs(kinds=[Note], store=table, workers=4, poll_ms=60_000)
    other = job.Jobs(kinds=[Note], store=job.Table(f"{session_bouncer}?nilo_pooler=false"))
    try:
        async with queue.serving(grace_ms=5_000):
            at = _where(session_bouncer)
            said = f"listening for other processes' pushes on PostgreSQL at {at}"
            await until("serve to listen", lambda: said in caplog.messages)
            for n in range(20):
                await other.push(Note(n))  # found at once: the poll is a minute away
            await until("every row to run", lambda: len(_ran) >= 20, 10)
        assert sorted(_ran) == list(range(20))
        assert _said(caplog, logging.WARNING) == []
    finally:
        await table.close()
        await other.store.close()
