"""Real worker processes under `heartbeat_ms` (200 ms) on a SQLite file and on PostgreSQL, with
a kind whose timeout is an hour: a running row's lease is renewed by its process's beats past
its first lease; a SIGKILLed worker is shown lost in the registry and `nilo-job workers`, and its
row is retaken and run by another worker within the window, not an hour later; a clean stop
leaves no entry.

Every wait is for an event (a file, an entry, a lease moving on) and bounded in time.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

import nilo_job as job
from nilo_job._worker.beat import is_alive
from nilo_job.store.contract import WorkerEntry
from tests.helpers import ROOT
from tests.helpers.heartbeat_kinds import HEARTBEAT_MS, Long

pytestmark = pytest.mark.procs

R = TypeVar("R")
WINDOW_US = 3 * HEARTBEAT_MS * 1_000  # the lease: three beats


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The table the test and its worker processes share."""
    if request.param == "postgres":
        found: str = request.getfixturevalue("pg_url")
        return found
    return f"sqlite:///{tmp_path}/q.db"


@pytest.fixture
async def jobs(url: str) -> AsyncIterator[job.Jobs]:
    """The queue the workers serve, opened in the test's process, its table made."""
    table = job.Table(url)
    await table.create_missing()
    try:
        yield job.Jobs(kinds=[Long], store=table, heartbeat_ms=HEARTBEAT_MS)
    finally:
        await table.close()


def start(url: str, out: Path, *, hang: bool) -> subprocess.Popen[bytes]:
    """`nilo-job worker tests.helpers.heartbeat_kinds:jobs` on `url`, its runs hanging if
    `hang`."""
    env = {
        "NILO_TEST_STORE": url,
        "NILO_TEST_OUT": str(out),
        "NILO_TEST_HANG": "1" if hang else "0",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "nilo_job", "worker", "tests.helpers.heartbeat_kinds:jobs"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


async def wait_for(what: str, read: Callable[[], Awaitable[R | None]], seconds: float = 30) -> R:
    """What `read()` answers once it is truthy, asking every 20 ms, for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while not (found := await read()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what}")
        await asyncio.sleep(0.02)
    return found


async def file(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def entry_of(pid: int) -> Callable[[job.Jobs], Awaitable[WorkerEntry | None]]:
    async def read(jobs: job.Jobs) -> WorkerEntry | None:
        return next((e for e in await jobs.store.workers() if e.pid == pid), None)

    return read


def workers_command(url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nilo_job", "workers", url, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_killed_worker_is_shown_lost_and_its_row_is_run_again_within_the_window(
    url: str, jobs: job.Jobs, tmp_path: Path
) -> None:
    assert jobs.lease_ms == 600  # three beats, though the kind's timeout is an hour
    hanging = start(url, tmp_path, hang=True)
    other: subprocess.Popen[bytes] | None = None
    try:
        row_id = await jobs.push(Long(1))
        await wait_for("the first run to start", lambda: file(tmp_path / f"started-{row_id}-1"))

        async def holding() -> WorkerEntry | None:
            found = await entry_of(hanging.pid)(jobs)
            return found if found is not None and found.running == (row_id,) else None

        await wait_for("the worker's beat to name its row", holding)

        async def renewed() -> job.Row | None:
            row = await jobs.row(row_id)
            assert row is not None
            assert row.attempts == 1  # never retaken while its process beats
            assert row.lease_until is not None
            assert row.started_at is not None
            return row if row.lease_until > row.started_at + 3 * WINDOW_US else None

        await wait_for("its lease to be renewed past three first leases", renewed)

        other = start(url, tmp_path, hang=False)
        await wait_for("the second worker's entry", lambda: entry_of(other.pid)(jobs))
        killed_at = job.now_us()
        hanging.kill()
        hanging.communicate(timeout=30)
        assert hanging.returncode == -signal.SIGKILL

        async def lost() -> WorkerEntry | None:
            found = await entry_of(hanging.pid)(jobs)
            assert found is not None  # a killed process cannot remove its entry
            return found if not is_alive(found, job.now_us()) else None

        gone = await wait_for("the killed worker's entry to be lost", lost)
        # Its last beat came within a beat or two of the kill: it is lost three beats after.
        assert gone.beat_at >= killed_at - 2 * HEARTBEAT_MS * 1_000

        shown = json.loads(workers_command(url, "--json"))
        states = {entry["pid"]: entry["alive"] for entry in shown["workers"]}
        assert states == {hanging.pid: False, other.pid: True}
        (killed,) = [e for e in shown["workers"] if e["pid"] == hanging.pid]
        assert killed["running"] == [row_id]
        assert (killed["kinds"], killed["beat_ms"]) == (["long"], HEARTBEAT_MS)
        text = workers_command(url)
        assert text.splitlines()[0].split() == [
            "host", "pid", "version", "kinds", "workers", "started", "last", "beat", "state",
            "running",
        ]  # fmt: skip
        lines = {int(line.split()[1]): line for line in text.splitlines()[1:]}
        assert lines[hanging.pid].split()[-2:] == ["lost", str(row_id)]
        # The other is alive, holding nothing yet or the row it has just taken.
        assert lines[other.pid].split()[-2:] in (["alive", "-"], ["alive", str(row_id)])

        ran_by = await wait_for(
            "the row to run again in the other worker",
            lambda: file(tmp_path / f"finished-{row_id}-2"),
        )
        retaken_s = (job.now_us() - killed_at) / 1_000_000
        assert ran_by == str(other.pid)
        assert retaken_s < 30  # within the window and a poll, not the kind's hour
        row = await jobs.row(row_id)
        assert row is not None
        assert (row.state, row.attempts) == ("done", 2)
    finally:
        if hanging.poll() is None:
            hanging.kill()
            hanging.communicate(timeout=30)
        if other is not None and other.poll() is None:
            other.send_signal(signal.SIGTERM)
            out, _ = other.communicate(timeout=30)
            assert other.returncode == 0, out.decode()
    # The clean stop removed its entry; the killed one's stays, lost, until it is forgotten.
    assert [e.pid for e in await jobs.store.workers()] == [hanging.pid]


async def test_a_clean_stop_leaves_no_entry(url: str, jobs: job.Jobs, tmp_path: Path) -> None:
    proc = start(url, tmp_path, hang=False)
    try:
        found = await wait_for("the worker's entry", lambda: entry_of(proc.pid)(jobs))
        assert is_alive(found, job.now_us())
        assert f"{proc.pid}" in workers_command(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()
    assert await jobs.store.workers() == []
    assert workers_command(url) == "no worker process is registered\n"


async def test_a_worker_paused_past_the_window_says_so_when_it_resumes_not_the_store(
    url: str, jobs: job.Jobs, tmp_path: Path
) -> None:
    """A worker stopped by SIGSTOP while it holds a row: another worker runs the row again
    within the window; once resumed (SIGCONT), the paused one says its event loop ran late (the
    process was paused, or its loop blocked), not that the store could not be reached, and
    what that means for its row."""
    paused = start(url, tmp_path, hang=True)
    other: subprocess.Popen[bytes] | None = None
    try:
        row_id = await jobs.push(Long(1))
        await wait_for("the first run to start", lambda: file(tmp_path / f"started-{row_id}-1"))

        async def holding() -> WorkerEntry | None:
            found = await entry_of(paused.pid)(jobs)
            return found if found is not None and found.running == (row_id,) else None

        await wait_for("the worker's beat to name its row", holding)
        other = start(url, tmp_path, hang=False)
        await wait_for("the second worker's entry", lambda: entry_of(other.pid)(jobs))
        paused.send_signal(signal.SIGSTOP)
        try:
            await wait_for(
                "the row to run again in the other worker",
                lambda: file(tmp_path / f"finished-{row_id}-2"),
            )
        finally:
            paused.send_signal(signal.SIGCONT)
        resumed_at = job.now_us()

        async def beaten_again() -> WorkerEntry | None:
            found = await entry_of(paused.pid)(jobs)
            return found if found is not None and found.beat_at > resumed_at else None

        await wait_for("the resumed worker's next beat", beaten_again)
    finally:
        paused.kill()
        out, _ = paused.communicate(timeout=30)
        if other is not None and other.poll() is None:
            other.send_signal(signal.SIGTERM)
            other.communicate(timeout=30)
    said = [
        line.partition(" WARNING nilo_job: ")[2]
        for line in out.decode().splitlines()
        if " WARNING nilo_job: this process could not beat" in line
    ]
    assert len(said) == 1, out.decode()
    assert re.fullmatch(
        r"this process could not beat for \d+\.\d s and the lease is 600 ms: its event loop ran "
        r"\d+\.\d s late \(the process was paused, or its event loop was blocked\); of the 1 row "
        rf"this process holds \({row_id}\), any whose lease runs out before a beat renews it may "
        r"be taken and run again by another worker \(an end this process writes after that is "
        r"refused as a lost lease\)",
        said[0],
    ), said[0]
