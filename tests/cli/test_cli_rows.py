"""`nilo-job list` (filters, keyset pages) and `nilo-job show` (a row's whole story), on SQLite
and PostgreSQL, over a database URL and over `module:attr`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import socket
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.cli._text import utc_exact
from tests.helpers.attempts import Flaky, four_attempts
from tests.helpers.cli_ops import QUEUE_FILE, RAISE_LINE, T, nilo_job, rows_of
from tests.helpers.cli_ops_queue import URL_ENV, Mail, make

EVERY_ROW = (
    "ID  KIND      STATE   ATTEMPTS  WHEN (UTC)           ERROR     PAYLOAD\n"
    "3   ops-mail  queued  0         2023-11-14 23:13:20  -         "
    '{"to":"c@example.com","fail":false}\n'
    "5   ops-mail  queued  0         2023-11-15 00:13:20  -         "
    '{"to":"d@example.com","fail":false}\n'
    "2   ops-mail  dead    1         2023-11-14 22:13:21  Rejected  "
    '{"to":"b@example.com","fail":true}\n'
    "1   ops-mail  dead    1         2023-11-14 22:13:20  Rejected  "
    '{"to":"a@example.com","fail":true}\n'
    '4   ops-note  done    1         2023-11-14 22:13:22  -         {"text":"hi"}\n'
)


def listed(row: job.Row) -> dict[str, object]:
    """`row` as `list --json` prints it: a list reads no attempts (`jobs.row` does)."""
    return {**dataclasses.asdict(row), "attempts_log": []}


@pytest.mark.parametrize("through", ["url", "module"])
def test_list_filters_and_pages(url: str, through: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = rows_of(url)
    target = url
    if through == "module":
        monkeypatch.setenv(URL_ENV, url)
        target = "tests.helpers.cli_ops_queue:make"

    done = nilo_job("list", target)
    assert (done.exit_code, done.stdout) == (0, EVERY_ROW)
    filtered = {
        ("--kind", "ops-note"): (
            "ID  KIND      STATE  ATTEMPTS  WHEN (UTC)           ERROR  PAYLOAD\n"
            '4   ops-note  done   1         2023-11-14 22:13:22  -      {"text":"hi"}\n'
        ),
        ("--error", "Rejected"): (
            "ID  KIND      STATE  ATTEMPTS  WHEN (UTC)           ERROR     PAYLOAD\n"
            "2   ops-mail  dead   1         2023-11-14 22:13:21  Rejected  "
            '{"to":"b@example.com","fail":true}\n'
            "1   ops-mail  dead   1         2023-11-14 22:13:20  Rejected  "
            '{"to":"a@example.com","fail":true}\n'
        ),
        ("--key", "welcome-d"): (
            "ID  KIND      STATE   ATTEMPTS  WHEN (UTC)           ERROR  PAYLOAD\n"
            "5   ops-mail  queued  0         2023-11-15 00:13:20  -      "
            '{"to":"d@example.com","fail":false}\n'
        ),
        ("--state", "queued", "--kind", "ops-mail"): (
            "ID  KIND      STATE   ATTEMPTS  WHEN (UTC)           ERROR  PAYLOAD\n"
            "3   ops-mail  queued  0         2023-11-14 23:13:20  -      "
            '{"to":"c@example.com","fail":false}\n'
            "5   ops-mail  queued  0         2023-11-15 00:13:20  -      "
            '{"to":"d@example.com","fail":false}\n'
        ),
    }
    for args, table in filtered.items():
        done = nilo_job("list", target, *args)
        assert (done.exit_code, done.stdout) == (0, table), args

    # Keyset pages: the next cursor is printed, and --after continues from it.
    done = nilo_job("list", target, "--state", "dead", "--limit", "1")
    cursor = f"{T + 1_000_000}.2"
    assert (done.exit_code, done.stdout) == (
        0,
        "ID  KIND      STATE  ATTEMPTS  WHEN (UTC)           ERROR     PAYLOAD\n"
        "2   ops-mail  dead   1         2023-11-14 22:13:21  Rejected  "
        '{"to":"b@example.com","fail":true}\n'
        f"more: --after {cursor}\n",
    )
    done = nilo_job("list", target, "--state", "dead", "--limit", "1", "--after", cursor)
    assert done.stdout == (
        "ID  KIND      STATE  ATTEMPTS  WHEN (UTC)           ERROR     PAYLOAD\n"
        "1   ops-mail  dead   1         2023-11-14 22:13:20  Rejected  "
        '{"to":"a@example.com","fail":true}\n'
    )
    done = nilo_job("list", target, "--state", "dead", "--after", f"{T}.1")
    assert (done.exit_code, done.stdout) == (0, "no more dead rows\n")
    done = nilo_job("list", target, "--state", "done", "--kind", "ops-mail")
    assert (done.exit_code, done.stdout) == (0, "no done rows of ops-mail\n")

    done = nilo_job("list", target, "--state", "dead", "--limit", "1", "--json")
    assert done.exit_code == 0
    assert json.loads(done.stdout) == {"rows": [listed(rows[2])], "next": cursor}
    done = nilo_job("list", target, "--json")
    assert json.loads(done.stdout) == {
        "rows": [listed(rows[i]) for i in (3, 5, 2, 1, 4)],
        "next": None,
    }


def test_list_refuses_what_cannot_page(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/q.db"
    assert nilo_job("migrate", url).exit_code == 0
    done = nilo_job("list", url, "--after", "1.2")
    assert done.exit_code == 2
    assert done.stderr.endswith("Error: --after pages through one state: give --state too\n")
    done = nilo_job("list", url, "--state", "dead", "--after", "yesterday")
    assert done.exit_code == 2
    assert done.stderr.endswith(
        "Error: Invalid value for --after: 'yesterday' is not a cursor a page of `nilo-job list` "
        "gave (`more: --after …`)\n"
    )
    done = nilo_job("list", url, "--state", "lost")
    assert done.exit_code == 2
    assert "'lost' is not one of 'queued', 'running', 'dead', 'done'" in done.stderr
    assert nilo_job("list", url).stdout == "no rows\n"
    assert nilo_job("list", url, "--kind", "ops-mail").stdout == "no rows of ops-mail\n"


@pytest.mark.parametrize("through", ["url", "module"])
def test_show_tells_a_rows_whole_story(
    url: str, through: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = rows_of(url)
    target = url
    if through == "module":
        monkeypatch.setenv(URL_ENV, url)
        target = "tests.helpers.cli_ops_queue:make"

    dead = rows[1]
    assert dead.pushed_at is not None
    assert dead.worker is not None
    done = nilo_job("show", target, "1")
    assert (done.exit_code, done.stdout) == (
        0,
        "id           1\n"
        "kind         ops-mail\n"
        "state        dead\n"
        'payload      {"to":"a@example.com","fail":true}\n'
        "key          -\n"
        "attempts     1\n"
        "snoozes      0\n"
        f"pushed       {utc_exact(dead.pushed_at)}\n"
        "due          2023-11-14 22:13:20.000000 UTC\n"
        "started      2023-11-14 22:13:20.000000 UTC\n"
        "finished     -\n"
        "died         2023-11-14 22:13:20.000000 UTC\n"
        "lease until  -\n"
        f"worker       {dead.worker}\n"
        "error        Rejected\n"
        "message      550 a@example.com\n"
        "result       -\n"
        "traceback:\n"
        "  Traceback (most recent call last):\n"
        f'    File "{QUEUE_FILE}", line {RAISE_LINE}, in run\n'
        '      raise Rejected(f"550 {self.to}")\n'
        "  tests.helpers.cli_ops_queue.Rejected: 550 a@example.com\n"
        "attempts:\n"
        "   1  dead      2023-11-14 22:13:20.000000 UTC  2023-11-14 22:13:20.000000 UTC  "
        f"{dead.worker}  Rejected: 550 a@example.com\n",
    )

    finished = rows[4]
    assert finished.pushed_at is not None
    assert finished.started_at is not None
    assert finished.finished_at is not None
    assert 0 <= finished.finished_at - finished.started_at < 1_000_000
    done = nilo_job("show", target, "4")
    assert (done.exit_code, done.stdout) == (
        0,
        "id           4\n"
        "kind         ops-note\n"
        "state        done\n"
        'payload      {"text":"hi"}\n'
        "key          -\n"
        "attempts     1\n"
        "snoozes      -\n"  # a done row's history does not keep it
        f"pushed       {utc_exact(finished.pushed_at)}\n"
        "due          2023-11-14 22:13:22.000000 UTC\n"
        f"started      {utc_exact(finished.started_at)}\n"  # the run's real length before the end
        "finished     2023-11-14 22:13:22.000000 UTC\n"
        "died         -\n"
        "lease until  -\n"
        f"worker       {finished.worker}\n"
        "error        -\n"
        "message      -\n"
        'result       {"noted":"hi"}\n'
        "attempts:\n"
        f"   1  done      {utc_exact(finished.started_at)}  2023-11-14 22:13:22.000000 UTC  "
        f"{finished.worker}  -\n",
    )
    done = nilo_job("show", target, "5")
    assert done.exit_code == 0
    assert "key          welcome-d\n" in done.stdout
    assert "started      -\n" in done.stdout

    done = nilo_job("show", target, "4", "--json")
    assert done.exit_code == 0
    assert json.loads(done.stdout) == {
        "id": 4,
        "kind": "ops-note",
        "state": "done",
        "payload": {"text": "hi"},
        "attempts": 1,
        "run_at": T + 2_000_000,
        "unique_key": None,
        "pushed_at": finished.pushed_at,
        "started_at": finished.started_at,
        "finished_at": T + 2_000_000,
        "died_at": None,
        "lease_until": None,
        "worker": finished.worker,
        "error": None,
        "message": None,
        "traceback": None,
        "result": {"noted": "hi"},
        "unreadable": None,
        "payload_cut": False,
        "snoozes": None,
        "attempts_log": [
            {
                "attempt": 1,
                "outcome": "done",
                "started_at": finished.started_at,
                "ended_at": T + 2_000_000,
                "worker": finished.worker,
                "error": None,
                "message": None,
                "traceback": None,
            }
        ],
    }

    done = nilo_job("show", target, "99")
    assert (done.exit_code, done.stdout, done.stderr) == (
        1,
        "",
        "Error: no job 99: no row has that id (a done row is kept only for the queue's "
        "retention_ms)\n",
    )


HOSTILE = "x\x1b]0;owned\x07\x1b[2J\r\x9b31m\u202eevil\u2066"
"""A window title, a clear screen, a carriage return, a C1 CSI, a right-to-left override, an
isolate: what a row's writer could put in its text to drive the operator's terminal."""
SHOWN = "x\\x1b]0;owned\\x07\\x1b[2J\\x0d\\x9b31m\\u202eevil\\u2066"
UNPRINTABLE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_text_from_a_row_is_printed_escaped_and_json_exact(url: str) -> None:
    async def go() -> None:
        jobs = make(url)
        try:
            await jobs.store.create_missing()
            await jobs.push(Mail(HOSTILE, fail=True), at=T)
            await jobs.push(Mail("a@example.com"), at=T + 3_600_000_000, unique=HOSTILE)
            assert await jobs.drain_at(T) == 1
        finally:
            await jobs.store.close()

    asyncio.run(go())
    show = nilo_job("show", url, "1")
    assert show.exit_code == 0
    assert not UNPRINTABLE.search(show.stdout), repr(show.stdout)
    assert f"\nmessage      550 {SHOWN}\n" in show.stdout
    assert f"\nkey          {SHOWN}\n" in nilo_job("show", url, "2").stdout
    assert f"Rejected: 550 {SHOWN}" in show.stdout  # the traceback's last line
    for command in (("dead", url), ("list", url)):
        done = nilo_job(*command)
        assert done.exit_code == 0
        assert not UNPRINTABLE.search(done.stdout), repr(done.stdout)
        assert "\\u202eevil" in done.stdout
    exact = json.loads(nilo_job("show", url, "1", "--json").stdout)
    assert exact["message"] == "550 " + HOSTILE
    assert exact["payload"]["to"] == HOSTILE


@dataclasses.dataclass
class Snoozy:
    """Snoozes every time for a minute."""

    nilo_job = "ops-snoozy"
    retry = job.Retry.NONE

    def run(self) -> None:
        raise job.Snooze(ms=60_000)


def test_show_tells_how_many_times_a_row_snoozed(url: str) -> None:
    async def go() -> None:
        store = job.Table(url)
        try:
            await store.create_missing()
            jobs = job.Jobs(kinds=[Snoozy], store=store)
            assert await jobs.push(Snoozy(), at=T) == 1
            assert await jobs.drain_at(T) == 1
            assert await jobs.drain_at(T + 60_000_000) == 1
        finally:
            await store.close()

    asyncio.run(go())
    done = nilo_job("show", url, "1")
    assert done.exit_code == 0
    assert "\nattempts     0\nsnoozes      2\n" in done.stdout
    assert "\ndue          2023-11-14 22:15:20.000000 UTC\n" in done.stdout
    assert json.loads(nilo_job("show", url, "1", "--json").stdout)["snoozes"] == 2


def test_show_lists_every_attempt_one_line_each(url: str) -> None:
    t = (job.now_us() // 1_000_000 + 1) * 1_000_000  # soon (a retry is due now), on a second

    async def go() -> int:
        store = job.Table(url)
        try:
            await store.create_missing()
            jobs = job.Jobs(kinds=[Flaky], store=store)
            return await four_attempts(jobs, t, f"cli-{url}")
        finally:
            await store.close()

    row_id = asyncio.run(go())
    worker = f"{socket.gethostname()}:{os.getpid()}"
    at = [utc_exact(t + n * 1_000_000) for n in range(4)]
    shown = json.loads(nilo_job("show", url, str(row_id), "--json").stdout)
    started = shown["attempts_log"][3]["started_at"]  # the done run's start, as long ago as it took
    assert t + 2_900_000 < started <= t + 3_000_000
    down = "ConnectionError: the provider is down"
    done = nilo_job("show", url, str(row_id))
    assert done.exit_code == 0
    assert done.stdout.endswith(
        "\nattempts:\n"
        f"   1  retrying  {at[0]}  {at[0]}  {worker}  {down} (run 1)\n"
        f"   2  retrying  {at[1]}  {at[1]}  {worker}  {down} (run 2)\n"
        f"   3  dead      {at[2]}  {at[2]}  {worker}  {down} (run 3)\n"
        f"   1  done      {utc_exact(started)}  {at[3]}  {worker}  -\n"
    )
    assert "\nstate        done\n" in done.stdout
    assert at[0].endswith(".000000 UTC")
    shown = json.loads(nilo_job("show", url, str(row_id), "--json").stdout)
    assert [(a["attempt"], a["outcome"], a["ended_at"]) for a in shown["attempts_log"]] == [
        (1, "retrying", t),
        (2, "retrying", t + 1_000_000),
        (3, "dead", t + 2_000_000),
        (1, "done", t + 3_000_000),
    ]


async def _failed_once_then_done(jobs: job.Jobs, t: int) -> job.Row:
    """Push a `Flaky` that fails its first run (at t) and is done at its second (at t + 1 s):
    the done row, as `jobs.row` reads it."""
    row_id = await jobs.push(Flaky(f"once-{t}-{id(jobs)}", fails=1), at=t)
    assert row_id is not None
    assert await jobs.run_one_at(t) is True
    assert await jobs.run_one_at(t + 1_000_000) is True
    row = await jobs.row(row_id)
    assert row is not None
    return row


def _shown_done(row: job.Row, traceback: str = "") -> str:
    """What `show` prints of `row`, a done row whose first attempt failed and whose second was
    done (`traceback`: the lines a store that keeps the failure's traceback prints)."""
    assert row.pushed_at is not None
    assert row.started_at is not None
    assert row.finished_at is not None
    first, done = row.attempts_log
    assert done.started_at is not None
    return (
        f"id           {row.id}\n"
        "kind         flaky\n"
        "state        done\n"
        f"payload      {json.dumps(row.payload, separators=(',', ':'))}\n"
        "key          -\n"
        "attempts     2\n"
        "snoozes      -\n"
        f"pushed       {utc_exact(row.pushed_at)}\n"
        f"due          {utc_exact(row.run_at)}\n"
        f"started      {utc_exact(row.started_at)}\n"
        f"finished     {utc_exact(row.finished_at)}\n"
        "died         -\n"
        "lease until  -\n"
        f"worker       {row.worker}\n"
        "error        last failure (attempt 1): ConnectionError\n"
        "message      the provider is down (run 1)\n"
        'result       "sent"\n'
        f"{traceback}"
        "attempts:\n"
        f"   1  retrying  {utc_exact(first.ended_at)}  {utc_exact(first.ended_at)}  "
        f"{row.worker}  ConnectionError: the provider is down (run 1)\n"
        f"   2  done      {utc_exact(done.started_at)}  {utc_exact(done.ended_at)}  "
        f"{row.worker}  -\n"
    )


def test_a_done_row_that_failed_before_shows_that_failure_as_an_earlier_attempts(url: str) -> None:
    """A row that failed once and then succeeded keeps its last error: `list` shows no ERROR for
    it (it did not fail), `show` labels the error as an earlier attempt's failure, and --json
    prints every field as it is."""
    t = (job.now_us() // 1_000_000 + 1) * 1_000_000  # soon (a retry is due now), on a second

    async def go() -> job.Row:
        store = job.Table(url)
        try:
            await store.create_missing()
            return await _failed_once_then_done(job.Jobs(kinds=[Flaky], store=store), t)
        finally:
            await store.close()

    row = asyncio.run(go())
    assert (row.id, row.state, row.finished_at) == (1, "done", t + 1_000_000)
    assert (row.error, row.message, row.traceback) == (
        "ConnectionError",
        "the provider is down (run 1)",
        None,  # a table's done row keeps no traceback
    )
    assert [(a.attempt, a.outcome, a.ended_at) for a in row.attempts_log] == [
        (1, "retrying", t),
        (2, "done", t + 1_000_000),
    ]
    payload = json.dumps(row.payload, separators=(",", ":"))

    done = nilo_job("list", url)
    assert (done.exit_code, done.stdout) == (
        0,
        "ID  KIND   STATE  ATTEMPTS  WHEN (UTC)           ERROR  PAYLOAD\n"
        f"1   flaky  done   2         {utc_exact(t + 1_000_000)[:19]}  -      {payload}\n",
    )
    done = nilo_job("show", url, "1")
    assert (done.exit_code, done.stdout) == (0, _shown_done(row))

    # --json keeps the row's fields as they are: its last error included.
    done = nilo_job("show", url, "1", "--json")
    assert json.loads(done.stdout) == json.loads(json.dumps(dataclasses.asdict(row)))
    done = nilo_job("list", url, "--json")
    assert json.loads(done.stdout) == {"rows": [listed(row)], "next": None}


MEMORY: job.Jobs | None = None
"""A queue over a `job.Memory` store, for `nilo-job show tests.cli.test_cli_rows:MEMORY`."""


def test_show_heads_a_done_rows_traceback_as_the_earlier_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store that keeps a done row's last traceback (`job.Memory`): `show` heads it as the
    traceback of the earlier attempt's failure."""
    t = (job.now_us() // 1_000_000 + 1) * 1_000_000
    jobs = job.Jobs(kinds=[Flaky], store=job.Memory())
    row = asyncio.run(_failed_once_then_done(jobs, t))
    monkeypatch.setattr(f"{__name__}.MEMORY", jobs)
    raising = '            raise ConnectionError(f"the provider is down (run {n})")'
    path = Flaky.run.__code__.co_filename
    line = Path(path).read_text().splitlines().index(raising) + 1
    done = nilo_job("show", f"{__name__}:MEMORY", str(row.id))
    assert (done.exit_code, done.stdout) == (
        0,
        _shown_done(
            row,
            "traceback of the last failure (attempt 1):\n"
            "  Traceback (most recent call last):\n"
            f'    File "{path}", line {line}, in run\n'
            f"      {raising.strip()}\n"
            "  ConnectionError: the provider is down (run 1)\n",
        ),
    )
