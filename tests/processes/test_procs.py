"""Real worker processes on one SQLite file: concurrency, a killed worker, a graceful stop.

These start `nilo-job worker` as child processes, because several processes, a SIGKILL and a
SIGTERM are the point. Every wait is for an event (a file appearing, a count reaching zero) and
bounded in time; the clock of the lease is moved with `drain_at`, never slept through.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import nilo_job as job
from tests.helpers import workers

pytestmark = pytest.mark.procs


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A database file and an output folder shared by this test and its worker processes."""
    values = {"NILO_TEST_DB": str(tmp_path / "q.db"), "NILO_TEST_OUT": str(tmp_path)}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def start_worker(env: dict[str, str], *args: str, hang: bool = False) -> subprocess.Popen[bytes]:
    """A worker process on `env`'s file, its Hang rows hanging if `hang`."""
    return workers.start({**env, "NILO_TEST_HANG": "1" if hang else "0"}, *args)


async def until(what: str, check: Callable[[], bool], seconds: float = 30.0) -> None:
    """Wait for `check()` to hold, looking every 20 ms, for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what}")
        await asyncio.sleep(0.02)


async def until_settled(queue: job.Jobs, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while (await queue.stats())[:2] != (0, 0):
        if time.monotonic() > deadline:
            raise AssertionError(f"not settled after {seconds} s: {await queue.stats()}")
        await asyncio.sleep(0.05)


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, out.decode()


async def test_two_worker_processes_run_each_of_500_rows_exactly_once(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    workers = [start_worker(env, "--workers", "4") for _ in range(2)]
    try:
        # Eight rows that can only finish together: with four workers a process, both must
        # take part (the claim is shared, not owned by one of them), whichever starts first.
        await queue.push_many([procs_kinds.Meet(n=n, of=8) for n in range(8)])
        for n in range(500):
            await queue.push(procs_kinds.Record(n=n))
        await until_settled(queue)
    finally:
        results = [stop(proc) for proc in workers]
    runs = Counter[int]()
    for log in tmp_path.glob("runs-*.log"):
        for line in log.read_text().splitlines():
            n, _id, attempts = line.split()
            runs[int(n)] += 1
            assert attempts == "1"
    assert sorted(runs) == list(range(500))
    assert set(runs.values()) == {1}
    assert await queue.stats() == (0, 0, 0)
    for code, output in results:
        assert code == 0, output
        assert "locked" not in output, output
        assert "Traceback" not in output, output
    assert sorted(procs_kinds.met(tmp_path).values()) == [4, 4]
    assert set(procs_kinds.met(tmp_path)) == {proc.pid for proc in workers}


def records(out: Path) -> Counter[int]:
    """How many Record rows ran in each process (by pid)."""
    return Counter[int](
        {
            int(log.stem.split("-")[1]): len(log.read_text().splitlines())
            for log in out.glob("runs-*.log")
        }
    )


async def test_rows_claimed_ahead_of_long_runs_go_to_another_process(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    """A process whose workers are all on long runs does not keep the rows it claimed ahead: a
    second process runs them meanwhile."""
    from tests.helpers import procs_kinds

    first = start_worker(env, "--workers", "2")
    second = None
    try:
        for n in range(20):  # quick rows: the first process learns that runs are fast
            await queue.push(procs_kinds.Record(n=n))
        await until("the first quick rows", lambda: sum(records(tmp_path).values()) == 20)
        # Two long runs and 30 quick rows in one go: one claim takes the gates and, at the pace
        # it knows, quick rows ahead of them.
        await queue.push_many(
            [procs_kinds.Gate(n=0), procs_kinds.Gate(n=1)]
            + [procs_kinds.Record(n=n) for n in range(20, 50)]
        )
        await until("both gates to start", lambda: len(list(tmp_path.glob("gate-*"))) == 2)
        second = start_worker(env, "--workers", "2")
        # Both of the first process's workers stay on the gates until the test opens them.
        await until("every quick row", lambda: sum(records(tmp_path).values()) == 50)
        assert records(tmp_path)[second.pid] == 30
        (tmp_path / "open").write_text("")
        await until_settled(queue)
    finally:
        results = [stop(proc) for proc in (first, second) if proc is not None]
    assert {path.name.rsplit("-", 1)[1] for path in tmp_path.glob("gate-*")} == {str(first.pid)}
    assert await queue.stats() == (0, 0, 0)
    for code, output in results:
        assert code == 0, output


async def test_a_killed_worker_leaves_a_row_that_runs_again_after_its_lease(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    row = await queue.push(procs_kinds.Hang(n=1))
    pushed = job.now_us()
    proc = start_worker(env, hang=True)
    try:
        await until("the run to start", lambda: (tmp_path / f"started-{row}-1").exists())
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert await queue.stats() == (0, 1, 0)
    claimed_by = job.now_us()
    # Before the lease has passed nobody may take it; once it has, the next claim does.
    assert await queue.drain_at(pushed) == 0
    assert queue.lease_ms == 60_000 + 1_000  # the queue's default timeout is the longest
    assert await queue.drain_at(claimed_by + queue.lease_ms * 1_000) == 1
    assert (tmp_path / f"finished-{row}-2").exists()
    assert await queue.stats() == (0, 0, 0)


async def test_sigterm_lets_a_running_row_finish_and_exits_cleanly(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    proc = start_worker(env)
    try:
        row = await queue.push(procs_kinds.Brief(n=1))
        await until("the run to start", lambda: (tmp_path / f"started-{row}-1").exists())
    finally:
        code, output = stop(proc)
    assert code == 0, output
    assert (tmp_path / f"finished-{row}-1").exists()
    assert await queue.stats() == (0, 0, 0)


async def test_past_the_grace_period_a_running_row_is_queued_again_unrun(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    proc = start_worker(env, "--grace-ms", "100", hang=True)
    try:
        row = await queue.push(procs_kinds.Hang(n=1))
        assert row is not None
        await until("the run to start", lambda: (tmp_path / f"started-{row}-1").exists())
    finally:
        code, output = stop(proc)
    assert code == 0, output
    # Not stuck running: queued again, its attempt uncounted, so it runs now as attempt 1.
    assert await queue.stats() == (1, 0, 0)
    assert await queue.drain() == 1
    assert (tmp_path / f"finished-{row}-1").exists()
    assert f"cancelled 1 run past the grace period (100 ms): row {row} is queued again\n" in output


async def test_past_the_grace_period_the_log_says_a_sync_runs_row_stays_running(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    proc = start_worker(env, "--grace-ms", "100", "--workers", "3", hang=True)
    try:
        rows = [
            await queue.push(procs_kinds.Hang(n=1)),
            await queue.push(procs_kinds.HangInThread(n=2)),
            await queue.push(procs_kinds.HangInThread(n=3)),
        ]
        for row in rows:
            await until(
                "the runs to start", lambda row=row: (tmp_path / f"started-{row}-1").exists()
            )
    finally:
        code, output = stop(proc)
    assert code == 0, output
    a, b, c = rows
    assert (
        f"cancelled 3 runs past the grace period (100 ms): row {a} is queued again; rows {b}, {c} "
        "stay running until their lease ends, then run again: a sync run's thread cannot be "
        "stopped\n"
    ) in output
    assert await queue.stats() == (1, 2, 0)
    held = [await queue.row(b), await queue.row(c)]
    assert [(r.state, r.attempts) for r in held if r is not None] == [("running", 1)] * 2
