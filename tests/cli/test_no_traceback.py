"""The command line and the dashboard never answer with a traceback or a 500: a bad option, an
id no store can hold, a URL PostgreSQL cannot read, a row another program wrote, a cookie that is
not one of ours, a store that fails in the middle of an action; each gets a sentence."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner, Result

import nilo_job as job
from nilo_job.cli import main
from nilo_job.dashboard import dashboard_app
from nilo_job.store.contract import NewRow
from tests.helpers import ROOT
from tests.helpers.dashboard import SECRET, client
from tests.helpers.mariadb import connect


def nilo_job(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str

    def run(self) -> None:
        pass


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A SQLite file with the table, a foreign row with a BLOB payload and a text run_at, and a
    dead one whose payload is not UTF-8."""
    path = tmp_path / "q.db"
    assert nilo_job("migrate", f"sqlite:///{path}").exit_code == 0
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts) "
            "VALUES ('mail', x'7b7d', 'queued', 'tomorrow', 0)"
        )
        conn.execute(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, error, detail, "
            "died_at) VALUES (CAST(x'6dff' AS TEXT), CAST(x'7bff7d' AS TEXT), 'dead', 1, 1, "
            "'Boom', CAST(x'ff' AS TEXT), 5)"
        )
    conn.close()
    return path


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--log-level", "NOPE", "stats", "sqlite:///x.db"], "'NOPE' is not one of"),
        (["cancel", "sqlite:///x.db", "99999999999999999999"], "is not in the range 1<="),
        (["retry", "sqlite:///x.db", "0"], "is not in the range 1<="),
        (["dead", "sqlite:///x.db", "--limit", "0"], "is not in the range 1<="),
        (["cancel", "sqlite:///x.db", "--kind", "mail"], "the filters pick rows with --all"),
        (["worker", "tests.helpers.kinds_ok:jobs", "--kinds", ""], "--kinds names no kind"),
    ],
)
def test_a_bad_option_is_a_usage_error_not_a_traceback(args: list[str], said: str) -> None:
    done = nilo_job(*args)
    assert done.exit_code == 2
    assert said in done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)


def test_a_postgresql_url_with_a_space_is_one_sentence() -> None:
    done = nilo_job("stats", "postgresql://me:secret@127.0.0.1/x y")
    assert done.exit_code == 1
    assert done.output == (
        "Error: job.Table('postgresql://me@127.0.0.1/x y') is not a connection string "
        'PostgreSQL reads: unexpected spaces found in "x y", use percent-encoded spaces (%20) '
        "instead\n"
    )


def test_dead_over_rows_another_program_wrote_prints_what_it_can(db: Path) -> None:
    done = nilo_job("dead", f"sqlite:///{db}", "--json")
    assert done.exit_code == 0, done.output
    assert done.output == (
        '[{"id": 2, "kind": "m\ufffd", "error": "Boom", "attempts": 1, "died_at": 5, '
        '"payload": "{\ufffd}", "payload_cut": false, "message": "\ufffd", "traceback": ""}]\n'
    )
    table = nilo_job("dead", f"sqlite:///{db}")
    assert table.exit_code == 0
    assert "Boom" in table.output


async def test_the_dashboard_shows_a_row_it_cannot_read_as_unreadable(db: Path) -> None:
    table = job.Table(f"sqlite:///{db}")
    jobs = job.Jobs(kinds=[Mail], store=table)
    try:
        async with client(dashboard_app(jobs, payloads=True)) as http:
            page = await http.get("/")
    finally:
        await table.close()
    assert page.status_code == 200
    assert (
        '<span class="unreadable">unreadable: its payload is stored as a BLOB, not text; '
        "run_at is not a whole number (&#x27;tomorrow&#x27;)</span>"
    ) in page.text
    assert (
        '<span class="unreadable">unreadable: its payload is not UTF-8 text; kind is not UTF-8 '
        "text; detail is not UTF-8 text</span>"
    ) in page.text


@pytest.mark.parametrize(
    "cookie",
    [
        b"nilo_job_dashboard=v1.1.\xc3\xa9.abc",
        b"nilo_job_dashboard=\xff\xfe",
        b"nilo_job_dashboard=v1",
    ],
)
async def test_a_cookie_that_is_not_ours_is_no_session_and_no_500(cookie: bytes) -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        page = await http.get("/", headers={b"cookie": cookie})
    assert page.status_code == 401  # not logged in: the login form, and nothing else
    assert 'id="login-form"' in page.text


async def test_a_store_that_fails_during_an_action_is_a_503_with_a_sentence() -> None:
    store = job.Memory()
    jobs = job.Jobs(kinds=[Mail], store=store)

    async def broken(row_id: int) -> bool:
        raise job.StoreUnavailable("the database went away")

    store.cancel = broken  # type: ignore[method-assign]
    row = await jobs.push(Mail("a@example.com"))
    origin = {"origin": "http://testserver"}
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        await http.post("/login", data={"secret": SECRET}, headers=origin)
        page = (await http.get("/")).text
        token = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        answer = await http.post(f"/rows/{row}/cancel", data={"csrf": token}, headers=origin)
    assert answer.status_code == 503
    assert answer.text == "the dashboard could not do that: the database went away"


FREEZE = {
    "sqlite": [
        "CREATE TRIGGER frozen_update BEFORE UPDATE ON nilo_jobs "
        "BEGIN SELECT RAISE(ABORT, 'frozen by the operator'); END",
        "CREATE TRIGGER frozen_delete BEFORE DELETE ON nilo_jobs "
        "BEGIN SELECT RAISE(ABORT, 'frozen by the operator'); END",
    ],
    "postgres": [
        "CREATE FUNCTION frozen() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'frozen by the operator'; END $$",
        "CREATE TRIGGER frozen BEFORE UPDATE OR DELETE ON nilo_jobs "
        "FOR EACH ROW EXECUTE FUNCTION frozen()",
    ],
    "mariadb": [
        f"CREATE TRIGGER frozen_{what} BEFORE {what.upper()} ON nilo_jobs FOR EACH ROW "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'frozen by the operator'"
        for what in ("update", "delete")
    ],
}
"""Triggers that make the server refuse every change to a row of `nilo_jobs`, on each store."""


def _side_run(store: str, url: str, statements: list[str]) -> None:
    """Run `statements` on the database at `url` through the store's driver, as its owner."""
    if store == "sqlite":
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            for statement in statements:
                conn.execute(statement)
    elif store == "postgres":
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            for statement in statements:
                pg.execute(statement)
    else:
        maria = connect(url)
        with contextlib.closing(maria), maria.cursor() as cur:
            for statement in statements:
                cur.execute(statement)


@pytest.mark.parametrize("store", ["sqlite", "postgres", "mariadb"])
def test_a_statement_the_database_refuses_is_a_sentence_and_changes_nothing(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if store == "sqlite":
        url = f"sqlite:///{tmp_path}/q.db"
        assert nilo_job("migrate", url).exit_code == 0
    else:
        url = request.getfixturevalue("pg_url" if store == "postgres" else "mariadb_url")

    async def push() -> int:
        table = job.Table(url)
        try:
            (row,) = await table.push([NewRow("mail", b'{"to":"a@example.com"}', 0)])
        finally:
            await table.close()
        assert row is not None
        return row

    async def state(row: int) -> str | None:
        table = job.Table(url)
        try:
            found = await table.row(row)
        finally:
            await table.close()
        return None if found is None else found.state

    row = asyncio.run(push())
    _side_run(store, url, FREEZE[store])
    for args in (["cancel", url, str(row)], ["cancel", url, "--all"]):
        answer = nilo_job(*args)
        assert (answer.exit_code, answer.output) == (
            1,
            "Error: the database refused the command: frozen by the operator\n",
        ), args
    assert asyncio.run(state(row)) == "queued"


APP = "tests.helpers.app_from_env:jobs"
"""A queue with a renamed kind, on the store `NILO_TEST_APP_URL` names."""


TABLES = (
    "nilo_jobs", "nilo_jobs_attempts", "nilo_jobs_deaths", "nilo_jobs_done", "nilo_jobs_paused",
    "nilo_jobs_version", "nilo_jobs_workers",
)  # fmt: skip
"""The queue's tables."""
ALL_BUT_DONE = tuple(table for table in TABLES if table != "nilo_jobs_done")


@pytest.mark.parametrize(
    ("store", "granted", "refused"),
    [
        ("postgres", ("nilo_jobs_version",), "nilo_jobs"),
        ("postgres", ("nilo_jobs",), "nilo_jobs_version"),
        ("postgres", ALL_BUT_DONE, "nilo_jobs_done"),
        ("mariadb", ("nilo_jobs_version",), "nilo_jobs"),
        ("mariadb", ("nilo_jobs",), "nilo_jobs_attempts"),
        ("mariadb", ALL_BUT_DONE, "nilo_jobs_done"),
    ],
)
def test_a_user_who_may_not_read_the_table_is_told_the_server_s_refusal(
    store: str, granted: tuple[str, ...], refused: str, request: pytest.FixtureRequest
) -> None:
    """information_schema hides a table the user may not read, which looked like no table at
    all ("create it with nilo-job migrate"), or like a table beside it that a migration would
    make: `worker`, `ready` and `check` say the server's refusal of the first table it may not
    read (`refused`) instead, and what to grant, without a traceback. (SQLite has no users.)"""
    url = request.getfixturevalue("pg_url" if store == "postgres" else "mariadb_url")
    user = f"nilo_nr_{uuid.uuid4().hex[:8]}"
    parts = urlsplit(url)
    as_user = parts._replace(netloc=f"{user}@{parts.netloc.rsplit('@', 1)[-1]}").geturl()
    database = parts.path.lstrip("/")
    if store == "postgres":
        grant = [f"CREATE ROLE {user} LOGIN", f"GRANT SELECT ON {', '.join(granted)} TO {user}"]
        revoke = [f"DROP OWNED BY {user}", f"DROP ROLE {user}"]
    else:
        grant = [f"CREATE USER '{user}'@'%'"] + [
            f"GRANT SELECT ON {database}.{table} TO '{user}'@'%'" for table in granted
        ]
        revoke = [f"DROP USER '{user}'@'%'"]
    _side_run(store, url, grant)
    try:
        if store == "postgres":
            where = f"job.Table({as_user!r})"
            refusal = f"permission denied for table {refused}"
        else:
            maria = connect(as_user)
            with contextlib.closing(maria), maria.cursor() as cur:
                cur.execute("SELECT USER()")
                (seen_as,) = cur.fetchone()  # user@host, the host as the server sees the client
            client = seen_as.rsplit("@", 1)[1]
            where = f"MariaDB at {parts.netloc.rsplit('@', 1)[-1]}/{database}"
            refusal = (
                f"SELECT command denied to user '{user}'@'{client}' for table "
                f"`{database}`.`{refused}`"
            )
        said = (
            f"the queue's tables in {where} may not be read by this user ({refusal}): grant it "
            "SELECT, INSERT, UPDATE and DELETE on nilo_jobs and the tables beside it"
        )

        def run(command: str) -> tuple[int, str, str]:
            done = subprocess.run(
                [sys.executable, "-m", "nilo_job", command, APP],
                cwd=ROOT,
                env={**os.environ, "NILO_TEST_APP_URL": as_user, "NILO_JOB_LOOP": "asyncio"},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            lines = [line for line in done.stderr.splitlines() if "event loop:" not in line]
            return done.returncode, done.stdout, "\n".join(lines)

        assert run("worker") == (1, "", f"Error: {said}")
        assert run("ready") == (1, "", f"Error: {APP} is not ready: {said}")
        assert run("check") == (
            0,
            "ok: 1 kind (welcome-mail), lease 61000 ms\n",
            f"the table was not read ({said}): rows of old names are not counted",
        )
    finally:
        _side_run(store, url, revoke)
