"""What PostgreSQL's store says when a login is refused, and how it counts in its sentences.

A database or a role that does not exist, or a wrong password, is said as what it is, naming
the database or the role (never the password) and what to do, not as "cannot reach PostgreSQL".
The tests' server trusts every login from 127.0.0.1, so a wrong password is refused here by a
PgBouncer of the test's own that checks passwords (md5), as one in front of a server does.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

import nilo_job as job
from nilo_job.cli import main
from tests.conftest import PG_SERVER
from tests.helpers.proxy import Proxy


def place(url: str) -> str:
    read = conninfo_to_dict(url)
    return f"{read['host']}:{read.get('port', 5432)}/{read['dbname']}"


async def refusal(url: str) -> str:
    """What `stats()` on a table at `url` raises, as a sentence."""
    table = job.Table(url + "?connect_timeout=3")
    try:
        with pytest.raises(job.StoreUnavailable) as refused:
            await table.stats()
    finally:
        await table.close()
    return str(refused.value)


def printed(*args: str) -> str:
    done = CliRunner().invoke(main, list(args))
    assert done.exit_code == 1, done.output
    return done.output


async def test_a_database_that_does_not_exist_is_named_with_how_to_create_it(
    pg_template: str,
) -> None:
    name = f"nilo_absent_{uuid.uuid4().hex[:10]}"
    url = f"{PG_SERVER}/{name}"
    said = (
        f'PostgreSQL at {place(url)} has no database "{name}": create it (CREATE DATABASE '
        f'"{name}", or `createdb {name}` on that server), or name one that exists in the URL'
    )
    assert await refusal(url) == said
    assert await asyncio.to_thread(printed, "stats", url) == f"Error: {said}\n"


async def test_a_role_that_does_not_exist_is_named_with_how_to_create_it(pg_url: str) -> None:
    name = f"nilo_ghost_{uuid.uuid4().hex[:10]}"
    read = conninfo_to_dict(pg_url)
    url = f"postgresql://{name}:Gh1Gh2@{read['host']}:{read.get('port', 5432)}/{read['dbname']}"
    said = (
        f'PostgreSQL at {place(pg_url)} has no role "{name}": create it (CREATE ROLE "{name}" '
        f"LOGIN PASSWORD '…', or `createuser --pwprompt {name}` on that server), or name a "
        "role that exists in the URL"
    )
    assert await refusal(url) == said
    assert await asyncio.to_thread(printed, "stats", url) == f"Error: {said}\n"


@pytest.fixture
def role(pg_url: str) -> Iterator[str]:
    """A role with the password `Right-1` and the rights to the test's table."""
    name = f"nilo_pw_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        role_id = sql.Identifier(name)
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'Right-1'").format(role_id))
        conn.execute(sql.SQL("GRANT ALL ON ALL TABLES IN SCHEMA public TO {}").format(role_id))
    try:
        yield name
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


async def test_a_wrong_password_is_what_the_server_says_of_it(role: str, pg_url: str) -> None:
    """The tests' server trusts 127.0.0.1 (a password there is not asked for): whatever it
    does with a wrong one is said as it is."""
    read = conninfo_to_dict(pg_url)
    url = f"postgresql://{role}:Wr1Wr2@{read['host']}:{read.get('port', 5432)}/{read['dbname']}"
    with psycopg.connect(pg_url) as conn:
        trusted = conn.execute(
            "SELECT auth_method = 'trust' FROM pg_hba_file_rules WHERE type = 'host' "
            "AND address = %s ORDER BY line_number LIMIT 1",
            (read["host"],),
        ).fetchone()
    table = job.Table(url)
    try:
        if trusted is not None and trusted[0]:
            assert (await table.stats()).queued == 0  # let in: the password is not asked for
            return
        with pytest.raises(job.StoreUnavailable) as refused:
            await table.stats()
        assert str(refused.value).startswith(
            f'PostgreSQL at {place(pg_url)} refused the password of role "{role}": '
        )
        assert "Wr1" not in str(refused.value)
    finally:
        await table.close()


@pytest.fixture
def checking_bouncer(pg_url: str, role: str) -> Iterator[str]:
    """The test's database through a PgBouncer of its own that checks `role`'s password (md5
    against its own list, `Right-1`), as a pooler in front of a server does; its URL without
    the password."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs PgBouncer: apt-get install pgbouncer")
        pytest.skip("PgBouncer is not installed (apt-get install pgbouncer)")
    server = conninfo_to_dict(pg_url)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    folder = Path(tempfile.mkdtemp(prefix="nilo-pgbouncer-"))
    folder.chmod(0o755)  # PgBouncer will not run as root: `nobody` reads these
    (folder / "users.txt").write_text(f'"{role}" "Right-1"\n')
    config = folder / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        f"* = host={server.get('host', '127.0.0.1')} port={server.get('port', 5432)} "
        f"user={server.get('user', 'postgres')}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = md5\nauth_file = {folder / 'users.txt'}\npool_mode = session\n"
    )
    for path in (config, folder / "users.txt"):
        path.chmod(0o644)
    as_root = ["-u", "nobody"] if os.geteuid() == 0 else []
    log = (folder / "out.log").open("wb")
    proc = subprocess.Popen([binary, *as_root, str(config)], stdout=log, stderr=log)
    url = f"postgresql://{role}@127.0.0.1:{port}/{server['dbname']}"
    try:
        deadline = time.monotonic() + 10
        while True:  # until it accepts connections (bounded)
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
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


async def test_a_wrong_password_refused_is_said_with_the_role_and_what_to_check(
    checking_bouncer: str, role: str
) -> None:
    at = place(checking_bouncer)
    wrong = checking_bouncer.replace(f"{role}@", f"{role}:Wr1Wr2@")
    said = (
        f'PostgreSQL at {at} refused the password of role "{role}": check the password given '
        "in the URL (or PGPASSWORD, or ~/.pgpass), or set the role's with ALTER ROLE "
        f"\"{role}\" PASSWORD '…'"
    )
    assert await refusal(wrong) == said
    assert await asyncio.to_thread(printed, "stats", wrong) == f"Error: {said}\n"
    right = job.Table(checking_bouncer.replace(f"{role}@", f"{role}:Right-1@"))
    try:
        assert (await right.stats()).queued == 0  # the right one is let in
    finally:
        await right.close()


# ----------------------------------------------------------------------- counts in sentences


async def test_a_call_over_one_row_says_one_row(pg_url: str) -> None:
    """A retry of one dead row on a server that stopped answering: "a retry of 1 row"."""
    proxy = Proxy().start()
    table = job.Table(proxy.url(pg_url), answer_ms=200)
    try:
        assert await table.retry_many([1], job.now_us()) == []  # the pool has a connection
        proxy.pause()
        with pytest.raises(job.StoreUnavailable) as silent:
            await table.retry_many([1], job.now_us())
        assert str(silent.value).startswith(
            f"PostgreSQL at 127.0.0.1:{proxy.port}/{conninfo_to_dict(pg_url)['dbname']} did not "
            "answer a retry of 1 row within 0.2 s on a connection of the pool (server process "
        ), str(silent.value)
    finally:
        proxy.resume()
        await table.close()
        proxy.close()
