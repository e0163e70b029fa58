"""Rows another program wrote that the queue cannot read as its own: a kind no queue has, a
payload not of its kind's shape, a moment no date holds, NULLs where the queue writes values,
and on SQLite a kind, payload or time that is not text or not a number. Each row is shown and
counted, and no dashboard page, metrics scrape or command fails, on SQLite and PostgreSQL."""

import asyncio
import contextlib
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import nilo_job as job
from nilo_job.dashboard import dashboard_app
from nilo_job.metrics import Metrics
from tests.helpers.cli_ops import nilo_job
from tests.helpers.dashboard import SECRET, client, counts, listed, login

T = 1_700_000_000_000_000  # 2023-11-14 22:13:20 UTC
LAST = 2**63 - 1  # past the year 9999: no date holds it
FIRST = -(2**63)  # before the year 1

COLUMNS = "kind, payload, state, run_at, lease_until, attempts, error, detail, died_at"
EVERY_STORE = [  # each row's values as SQL both databases read, and why it is foreign
    f"'ghost', '{{\"a\": 1}}', 'queued', {T}, NULL, 0, NULL, NULL, NULL",  # no such kind
    f"'mail', '[1, 2]', 'dead', {T}, NULL, 1, 'Boom', 'm', {LAST}",  # not a Mail; died past 9999
    f"'mail', '{{\"to\": 5}}', 'running', {T}, NULL, 1, NULL, NULL, NULL",  # no lease; an int
    f"'mail', '{{\"to\": \"x\"}}', 'dead', {T}, NULL, 1, NULL, NULL, NULL",  # no time, no error
    f"'mail', '{{\"to\": \"y\"}}', 'queued', {FIRST}, NULL, -5, NULL, NULL, NULL",  # due before 1
]
SQLITE_ONLY = [
    "x'6dff', '{}', 'queued', 1, NULL, 0, NULL, NULL, NULL",  # a BLOB kind, not UTF-8
    "'mail', CAST(x'ff' AS TEXT), 'dead', 'tomorrow', NULL, 'many', x'ff', 3, 'never'",
]
DONE = f"900, 'ghost', '{{}}', 1, {LAST}, 1, 'not json'"  # finished past 9999; result not JSON
PAUSED = f"'ghost', {LAST}"


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str

    def run(self) -> None:
        pass


@pytest.fixture(params=["sqlite", "postgres"])
def foreign(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, int]:
    """A table holding the foreign rows, written with SQL: its URL, and its rows in nilo_jobs."""
    rows = [*EVERY_STORE, *(SQLITE_ONLY if request.param == "sqlite" else [])]
    statements = [f"INSERT INTO nilo_jobs ({COLUMNS}) VALUES ({row})" for row in rows] + [
        "INSERT INTO nilo_jobs_done (id, kind, payload, run_at, finished_at, attempts, result) "
        f"VALUES ({DONE})",
        f"INSERT INTO nilo_jobs_paused (kind, paused_at) VALUES ({PAUSED})",
    ]
    if request.param == "postgres":
        import psycopg

        url: str = request.getfixturevalue("pg_url")
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[call-overload]
        return url, len(rows)
    url = f"sqlite:///{tmp_path}/q.db"
    assert nilo_job("migrate", url).exit_code == 0
    with contextlib.closing(sqlite3.connect(tmp_path / "q.db")) as conn, conn:
        for statement in statements:
            conn.execute(statement)
    return url, len(rows)


def test_foreign_rows_are_shown_and_counted_and_fail_no_page(foreign: tuple[str, int]) -> None:
    url, n = foreign
    pages, scraped = asyncio.run(_read(url, n))
    for path, (status, page) in pages.items():
        assert status == 200, (path, status)
        assert 'class="problem"' not in page, path  # no part of the page failed
    more = n - len(EVERY_STORE)  # SQLite's two: one queued, one dead
    assert counts(pages["/"][1]) == {"queued": 2 + more // 2, "running": 1, "dead": 2 + more // 2,
                                     "done": 1}  # fmt: skip
    queued = [5, 1] + ([6] if more else [])  # by due time; SQLite's BLOB kind is due at 1
    assert sorted(listed(pages["/rows?state=queued"][1])) == sorted(queued)
    assert sorted(listed(pages["/rows?state=dead"][1])) == [2, 4] + ([7] if more else [])
    assert listed(pages["/rows?state=running"][1]) == [3]
    assert listed(pages["/rows?state=done"][1]) == [900]
    assert "not a kind of this queue" in pages["/"][1]
    # The metrics: the store is up, every row counted under its kind, the pause seen.
    assert scraped["up"] == 1.0
    assert scraped["rows"] == {
        ("ghost", "queued"): 1.0,
        ("ghost", "done"): 1.0,
        ("mail", "queued"): 1.0,
        ("mail", "running"): 1.0,
        ("mail", "dead"): 2.0 + more // 2,
        **({("m\\xff", "queued"): 1.0} if more else {}),
    }
    assert scraped["paused"]["ghost"] == 1.0
    # The command line lists and shows each row, a moment no date holds as its µs.
    for args in (
        ("stats",),
        ("dead",),
        ("list",),
        *(("list", "--state", state) for state in ("queued", "running", "dead", "done")),
        *(("show", str(row)) for row in [*range(1, n + 1), 900]),
    ):
        done = nilo_job(args[0], url, *args[1:])
        assert (done.exit_code, done.stderr) == (0, ""), (args, done.output)
    assert "\ndied         9223372036854775807 µs\n" in nilo_job("show", url, "2").stdout
    assert "\ndue          -9223372036854775808 µs\n" in nilo_job("show", url, "5").stdout
    assert "\nfinished     9223372036854775807 µs\n" in nilo_job("show", url, "900").stdout
    assert re.search(
        r"\n2 +mail +dead +1 +9223372036854775807 µs +Boom +\[1,2\]\n",
        nilo_job("list", url, "--state", "dead").stdout,
    )


async def _read(url: str, n: int) -> tuple[dict[str, tuple[int, str]], dict[str, object]]:
    """Every page of the dashboard over the table, and a metrics scrape."""
    table = job.Table(url)
    jobs = job.Jobs(kinds=[Mail], store=table)
    paths = ["/", "/rows", *(f"/rows?state={s}" for s in ("queued", "running", "dead", "done"))]
    paths += ["/rows?state=queued&kind=ghost", "/rows?state=done&kind=ghost"]
    paths += [f"/rows/{row}" for row in [*range(1, n + 1), 900]]
    try:
        async with client(dashboard_app(jobs, secret=SECRET, payloads=True)) as http:
            await login(http)
            pages = {}
            for path in paths:
                answer = await http.get(path)
                pages[path] = (answer.status_code, answer.text)
        body, _type = await Metrics(jobs).exposition()
    finally:
        await table.close()
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    scraped: dict[str, object] = {
        "up": families["nilo_job_store_up"].samples[0].value,
        "rows": {
            (s.labels["kind"], s.labels["state"]): s.value
            for s in families["nilo_job_rows"].samples
            if s.value
        },
        "paused": {s.labels["kind"]: s.value for s in families["nilo_job_paused"].samples},
    }
    return pages, scraped


async def test_a_read_that_fails_unexpectedly_is_a_store_down_not_a_failed_scrape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Garbled(job.Memory):
        """A store whose counts meet a row they cannot read and fail as no store should."""

        async def counts(self) -> dict[tuple[str, str], int]:
            raise ValueError("invalid literal for int() with base 10: 'tomorrow'")

    metrics = Metrics(job.Jobs(kinds=[Mail], store=Garbled()))
    body, _type = await metrics.exposition()
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert [s.value for s in families["nilo_job_store_up"].samples] == [0.0]
    assert families["nilo_job_rows"].samples == []
    assert [r.getMessage() for r in caplog.records if r.name == "nilo_job"] == [
        'metrics: the store cannot be read: ValueError("invalid literal for int() with base '
        "10: 'tomorrow'\")"
    ]
