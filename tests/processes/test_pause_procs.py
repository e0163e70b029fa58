"""Pausing a kind with real worker processes, on SQLite and PostgreSQL: two `nilo-job worker`
processes stop claiming the kind within their poll, pushes still land, the other kinds go on,
a worker started while the kind is paused keeps it paused, and resuming starts the rows again.
Every wait is bounded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import nilo_job as job
from tests.helpers.workers import start, stop

POLL_MS = 100
FOUR = ("--workers", "4")

pytestmark = pytest.mark.procs


@pytest.fixture(params=["sqlite", "postgres"])
def env(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    values = {"NILO_TEST_OUT": str(tmp_path), "NILO_TEST_POLL_MS": str(POLL_MS)}
    if request.param == "postgres":
        values["NILO_TEST_STORE"] = request.getfixturevalue("pg_url")
    else:
        values["NILO_TEST_DB"] = str(tmp_path / "q.db")
        values["NILO_TEST_STORE"] = f"sqlite:///{tmp_path / 'q.db'}"
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def runs(out: Path) -> list[int]:
    """The numbers of the Record rows every process ran, in no order."""
    found = []
    for log in out.glob("runs-*.log"):
        found += [int(line.split()[0]) for line in log.read_text().splitlines()]
    return found


async def until(what: str, check: Callable[[], object], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not await _value(check):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what}")
        await asyncio.sleep(0.02)


async def _value(check: Callable[[], object]) -> object:
    value = check()
    if asyncio.iscoroutine(value):
        return await value
    return value


async def test_a_pause_stops_every_worker_process_within_its_poll_and_resume_starts_them(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    workers = [start(env, *FOUR), start(env, *FOUR)]
    try:
        await queue.push(procs_kinds.Record(0))
        await until("a worker to run the first row", lambda: runs(tmp_path) == [0])
        assert await queue.pause("record") is True
        # Every process reads the pause within its poll; wait for two polls and a margin.
        await asyncio.sleep(3 * POLL_MS / 1_000)
        for n in range(1, 21):
            assert await queue.push(procs_kinds.Record(n)) is not None  # pushes still land
        await queue.push(procs_kinds.Stamp(1))  # another kind
        await until(
            "the other kind to run",
            lambda: queue.count(job.Where(kind="stamp", state="done")),
        )
        await asyncio.sleep(10 * POLL_MS / 1_000)  # ten polls: nothing of the paused kind starts
        assert runs(tmp_path) == [0]
        assert await queue.count(job.Where(kind="record", state="queued")) == 20
        # A worker started now reads the pause from the table as it starts.
        workers.append(start(env, *FOUR))
        await asyncio.sleep(10 * POLL_MS / 1_000)
        assert runs(tmp_path) == [0]
        resumed = time.monotonic()
        assert await queue.resume("record") is True
        every = list(range(21))
        await until("every paused row to run once", lambda: sorted(runs(tmp_path)) == every)
        # Resumed within the poll, plus the runs themselves (generous: the machine is shared).
        assert time.monotonic() - resumed < 5.0
    finally:
        outputs = [stop(proc)[1] for proc in workers]
    assert all("Traceback" not in out for out in outputs), outputs
    assert await queue.count(job.Where(kind="record", state="done")) == 21
