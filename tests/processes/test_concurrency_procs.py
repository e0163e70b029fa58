"""A kind's concurrency limit across real worker processes, on a SQLite file and on PostgreSQL:
four `nilo-job worker` processes of four workers each race for the rows of a kind that allows
two runs at once, and the runs' own records show exactly two at a time at most, and two reached.

Every wait is for a condition, bounded in time.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import nilo_job as job
from tests.helpers import ROOT
from tests.helpers.limited_kinds import LOG, Paced
from tests.helpers.workers import stop

pytestmark = pytest.mark.procs

ROWS = 30
PROCESSES = 4


@pytest.fixture(params=["sqlite", "postgres"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The store, the output folder and the poll the test shares with its worker processes."""
    if request.param == "postgres":
        store = request.getfixturevalue("pg_url")
    else:
        store = f"sqlite:///{tmp_path / 'q.db'}"
    return {"NILO_TEST_STORE": store, "NILO_TEST_OUT": str(tmp_path), "NILO_TEST_POLL_MS": "20"}


@pytest.fixture
async def queue(env: dict[str, str]) -> AsyncIterator[job.Jobs]:
    """The worker processes' queue, opened in this process, its table made."""
    jobs = job.Jobs(kinds=[Paced], store=job.Table(env["NILO_TEST_STORE"]))
    await jobs.store.create_missing()
    try:
        yield jobs
    finally:
        await jobs.store.close()


def start(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A worker process of four workers serving `tests.helpers.limited_kinds:jobs`."""
    queue = "tests.helpers.limited_kinds:jobs"
    return subprocess.Popen(
        [sys.executable, "-m", "nilo_job", "worker", queue, "--workers", "4"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


async def until_settled(queue: job.Jobs, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while (await queue.stats())[:2] != (0, 0):
        if time.monotonic() > deadline:
            raise AssertionError(f"not settled after {seconds} s: {await queue.stats()}")
        await asyncio.sleep(0.05)


def most_at_once(lines: list[str]) -> int:
    """The most runs between their "start" and "end" lines at one moment. Of a start and an end
    at the same nanosecond, the end counts first."""
    moments = []
    for line in lines:
        what, _n, _pid, at = line.split()
        moments.append((int(at), 0 if what == "end" else 1))
    now = most = 0
    for _at, starts in sorted(moments):
        now += 1 if starts else -1
        most = max(most, now)
    return most


def test_most_at_once_counts_overlaps() -> None:
    lines = ["start 1 9 10", "start 2 9 20", "end 1 9 30", "start 3 9 30", "end 2 9 40"]
    assert most_at_once(lines) == 2
    assert most_at_once([*lines, "start 4 9 35", "end 4 9 36", "end 3 9 50"]) == 3


async def test_four_processes_never_run_more_than_the_limit_at_once(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    await queue.push_many([Paced(n) for n in range(ROWS)])
    procs = [start(env) for _ in range(PROCESSES)]  # sixteen workers race for two places
    try:
        await until_settled(queue)
    finally:
        results = [stop(proc) for proc in procs]
    for code, output in results:
        assert code == 0, output
        assert "Traceback" not in output, output
    lines = (tmp_path / LOG).read_text().splitlines()
    started = sorted(int(line.split()[1]) for line in lines if line.startswith("start"))
    assert started == list(range(ROWS))  # each row ran once, and ended
    assert len(lines) == 2 * ROWS
    assert most_at_once(lines) == 2
