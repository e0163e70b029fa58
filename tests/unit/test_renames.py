"""Kind renames (`aliases`): rows pushed under a kind's old name are claimed and run as the renamed
kind, on a `drain_at` clock and under serve; a push writes the new name; pausing the kind holds
its old name's rows too; the setting's refusals; `nilo-job check` counts the rows of each old
name and the rows no kind answers to.

On Memory, SQLite and PostgreSQL (`store`), and the command line on SQLite and PostgreSQL (`url`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.store.contract import Store

ran: list[tuple[str, str]] = []


@pytest.fixture(autouse=True)
def _forget_runs() -> None:
    ran.clear()


@dataclass
class SendWelcome:
    """The kind as deployed before the rename."""

    nilo_job = "send-welcome"
    retry = job.Retry.NONE

    to: str

    def run(self) -> None:
        ran.append(("send-welcome", self.to))


@dataclass
class WelcomeMail:
    """The same job after deploy 1: a new name, the old one kept in aliases."""

    nilo_job = "welcome-mail"
    aliases = ("send-welcome",)
    retry = job.Retry.NONE

    to: str

    def run(self) -> None:
        ran.append(("welcome-mail", self.to))


@dataclass
class Report:
    nilo_job = "report"
    retry = job.Retry.NONE

    def run(self) -> None:
        ran.append(("report", ""))


async def old_rows(store: Store, t: int, *to: str) -> list[int | None]:
    """Rows pushed by the deploy before the rename, under the old name."""
    before = job.Jobs(kinds=[SendWelcome], store=store)
    return [await before.push(SendWelcome(to=name), at=t) for name in to]


async def test_rows_of_the_old_name_run_as_the_renamed_kind(store: Store, t: int) -> None:
    await old_rows(store, t, "ada", "bob")
    jobs = job.Jobs(kinds=[WelcomeMail, Report], store=store)
    await jobs.push(WelcomeMail(to="cy"), at=t)
    assert await store.counts() == {("send-welcome", "queued"): 2, ("welcome-mail", "queued"): 1}
    assert await jobs.drain_at(t) == 3
    assert sorted(ran) == [("welcome-mail", "ada"), ("welcome-mail", "bob"), ("welcome-mail", "cy")]
    done = {("send-welcome", "done"): 2, ("welcome-mail", "done"): 1}
    assert await store.counts() == done  # the history keeps the name each row carried


async def test_run_one_takes_a_row_of_the_old_name(store: Store, t: int) -> None:
    await old_rows(store, t, "ada")
    jobs = job.Jobs(kinds=[WelcomeMail], store=store)
    assert await jobs.run_one_at(t) is True
    assert ran == [("welcome-mail", "ada")]


async def test_a_queue_without_the_alias_leaves_the_old_rows_queued(store: Store, t: int) -> None:
    await old_rows(store, t, "ada")
    plain = job.Jobs(kinds=[Report], store=store)
    assert await plain.drain_at(t) == 0
    assert await store.counts() == {("send-welcome", "queued"): 1}


async def test_pausing_the_kind_holds_the_rows_of_its_old_name(store: Store, t: int) -> None:
    await old_rows(store, t, "ada")
    jobs = job.Jobs(kinds=[WelcomeMail, Report], store=store)
    await jobs.push(Report(), at=t)
    assert await jobs.pause("welcome-mail") is True
    assert await jobs.drain_at(t) == 1
    assert ran == [("report", "")]
    assert await jobs.resume("welcome-mail") is True
    assert await jobs.drain_at(t) == 1
    assert ran == [("report", ""), ("welcome-mail", "ada")]


async def test_a_pause_made_under_the_old_name_still_holds_the_renamed_kind(
    store: Store, t: int
) -> None:
    await old_rows(store, t, "ada")
    assert await store.pause("send-welcome", t) is True  # paused before the rename's deploy
    jobs = job.Jobs(kinds=[WelcomeMail], store=store)
    await jobs.push(WelcomeMail(to="bob"), at=t)
    assert await jobs.drain_at(t) == 0
    assert await store.resume("send-welcome") is True
    assert await jobs.drain_at(t) == 2


async def test_serve_runs_the_rows_of_the_old_name(store: Store, t: int) -> None:
    await old_rows(store, job.now_us(), "ada", "bob")
    jobs = job.Jobs(kinds=[WelcomeMail], store=store, poll_ms=20)
    task = asyncio.create_task(jobs.serve())
    try:
        async with asyncio.timeout(10):
            while len(ran) < 2:  # noqa: ASYNC110 (a run in a thread: a bounded poll)
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert sorted(ran) == [("welcome-mail", "ada"), ("welcome-mail", "bob")]


def kind_with(name: str, aliases: object) -> type:
    @dataclass
    class Renamed:
        nilo_job = name
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    Renamed.aliases = aliases  # type: ignore[attr-defined]
    return Renamed


@pytest.mark.parametrize(
    ("aliases", "said"),
    [
        (
            "send-welcome",
            "Renamed.aliases is 'send-welcome'; aliases is a tuple of the kind's old names "
            '(str), like aliases = ("send-welcome",)',
        ),
        (
            ["send-welcome"],
            "Renamed.aliases is ['send-welcome']; aliases is a tuple of the kind's old names "
            '(str), like aliases = ("send-welcome",)',
        ),
        (
            ("send-welcome", 3),
            "Renamed.aliases is ('send-welcome', 3); aliases is a tuple of the kind's old names "
            '(str), like aliases = ("send-welcome",)',
        ),
        (
            ("welcome-mail",),
            "Renamed.aliases holds 'welcome-mail', its own nilo_job name: an alias is a name the "
            "kind had before, so remove it from aliases",
        ),
        (("  ",), "Renamed.aliases holds an empty name; each alias is an old kind name"),
        (
            ("send\x00welcome",),
            "Renamed.aliases holds 'send\\x00welcome', which cannot be a kind's name: it holds a "
            "NUL character, which PostgreSQL cannot keep in text",
        ),
        (
            ("x" * 65,),
            f"Renamed.aliases holds {'x' * 65!r}, which cannot be a kind's name: it is 65 bytes, "
            "and at most 64 bytes are kept",
        ),
        (
            ("send-welcome", "send-welcome"),
            "Renamed.aliases holds 'send-welcome' twice: list each old name once",
        ),
    ],
)
def test_aliases_that_cannot_work_are_refused(aliases: object, said: str) -> None:
    with pytest.raises(job.Refusal) as refused:
        job.Jobs(kinds=[kind_with("welcome-mail", aliases)], store=job.Memory())
    assert str(refused.value) == said


def test_two_kinds_answering_to_one_name_are_refused() -> None:
    with pytest.raises(job.Refusal) as refused:
        job.Jobs(kinds=[WelcomeMail, kind_with("greeting", ("send-welcome",))], store=job.Memory())
    assert str(refused.value) == (
        "Renamed.aliases holds 'send-welcome', and WelcomeMail aliases holds 'send-welcome' too: "
        "a row of that name would be run by both kinds, so only one kind may answer to it"
    )
    with pytest.raises(job.Refusal) as refused:
        job.Jobs(kinds=[SendWelcome, WelcomeMail], store=job.Memory())
    assert str(refused.value) == (
        "WelcomeMail.aliases holds 'send-welcome', and SendWelcome nilo_job = 'send-welcome' "
        "too: a row of that name would be run by both kinds, so only one kind may answer to it"
    )


def test_a_kind_keeps_its_aliases() -> None:
    jobs = job.Jobs(kinds=[WelcomeMail, Report], store=job.Memory())
    assert [kind.aliases for kind in jobs.kinds] == [("send-welcome",), ()]


# ------------------------------------------------------------------------------ nilo-job check


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database's URL: a SQLite file not made yet, or a PostgreSQL database with its
    empty table."""
    if request.param == "postgres":
        pg_url: str = request.getfixturevalue("pg_url")
        return pg_url
    return f"sqlite:///{tmp_path}/q.db"


APP = """
from dataclasses import dataclass

import nilo_job as job


@dataclass
class WelcomeMail:
    nilo_job = "welcome-mail"
    aliases = ("send-welcome", "welcome")
    retry = job.Retry.NONE

    to: str

    def run(self) -> None:
        pass


jobs = job.Jobs(kinds=[WelcomeMail], store=job.Table({url!r}))
"""


def check(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "renamed_app.py").write_text(APP.format(url=url))
    return subprocess.run(
        [sys.executable, "-m", "nilo_job", "check", "renamed_app:jobs", *args],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@dataclass
class OldReport:
    nilo_job = "old-report"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


async def test_check_counts_the_rows_of_old_names_and_the_stranded_ones(
    url: str, tmp_path: Path, t: int
) -> None:
    table = job.Table(url)
    try:
        await table.create_missing()
        await old_rows(table, t, *(f"user{n}" for n in range(12)))
        others = job.Jobs(kinds=[OldReport], store=table)
        for _ in range(3):
            await others.push(OldReport(), at=t)
        assert await others.drain_at(t) == 3  # done rows are history: not counted
        await others.push(OldReport(), at=t)
    finally:
        await table.close()
    done = check(tmp_path, url)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "ok: 1 kind (welcome-mail), lease 61000 ms\n"
        "12 rows of send-welcome are run as welcome-mail\n"
        "no row of welcome is left: welcome-mail may drop it from its aliases\n"
        "1 row of old-report is stranded: no kind answers to old-report (name it in a kind's "
        "aliases, or cancel them)\n"
    )
    done = check(tmp_path, url, "--json")
    assert json.loads(done.stdout) == {
        "ok": True,
        "kinds": ["welcome-mail"],
        "lease_ms": 61_000,
        "renamed": [
            {"name": "send-welcome", "kind": "welcome-mail", "rows": 12},
            {"name": "welcome", "kind": "welcome-mail", "rows": 0},
        ],
        "stranded": [{"name": "old-report", "rows": 1}],
    }


def test_check_without_its_table_says_the_rows_were_not_counted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/missing.db"
    done = check(tmp_path, url)
    assert done.returncode == 0
    assert done.stdout == "ok: 1 kind (welcome-mail), lease 61000 ms\n"
    assert done.stderr.startswith("the table was not read (")
    assert done.stderr.endswith("): rows of old names are not counted\n")


# ---------------------------------------------------------------------- nilo-job worker --kinds


def start_worker(tmp_path: Path, url: str, *args: str) -> subprocess.Popen[str]:
    """`nilo-job worker renamed_app:jobs` on `url` with `args`, its stderr piped."""
    (tmp_path / "renamed_app.py").write_text(APP.format(url=url))
    return subprocess.Popen(
        [sys.executable, "-m", "nilo_job", "worker", "renamed_app:jobs", *args],
        cwd=tmp_path,
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_worker_kinds_naming_an_old_name_serves_the_renamed_kind_and_says_so(
    url: str, tmp_path: Path, t: int
) -> None:
    table = job.Table(url)
    try:
        await table.create_missing()
        (old,) = await old_rows(table, t, "ada")
        new = await job.Jobs(kinds=[WelcomeMail], store=table).push(WelcomeMail(to="bob"), at=t)
    finally:
        await table.close()
    proc = start_worker(tmp_path, url, "--kinds", "send-welcome")
    try:
        table = job.Table(url)
        try:

            async def both_done() -> bool:
                rows = [await table.row(row_id) for row_id in (old, new) if row_id is not None]
                return len(rows) == 2 and all(r is not None and r.state == "done" for r in rows)

            deadline = asyncio.get_running_loop().time() + 30
            while not await both_done():  # the row of each name, run by the one kind
                assert proc.poll() is None, proc.communicate(timeout=30)[1]
                assert asyncio.get_running_loop().time() < deadline, "the rows did not run"
                await asyncio.sleep(0.05)
        finally:
            await table.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    said = [line.partition(" nilo_job: ")[::2] for line in err.splitlines()]
    warned = [text for level, text in said if level.endswith(" WARNING")]
    assert warned == [
        "--kinds send-welcome: send-welcome is an old name of welcome-mail (in its aliases): "
        "serving welcome-mail, which runs the rows of both names; write --kinds welcome-mail, "
        "since --kinds send-welcome is refused once the alias is dropped"
    ]
    assert any(text.startswith("serving welcome-mail with ") for _level, text in said), err
