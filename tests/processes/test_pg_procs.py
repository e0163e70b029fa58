"""Real worker processes on one PostgreSQL table, under real faults, each bounded in time.

Four `nilo-job worker` processes share the table; the faults are a SIGKILL, terminated backends
and a server restart. Rows record their number, attempt and process in a file per process, so
the test can say which ran, how often, and where. The lease here is the queue's timeout (2 s)
plus a second, so a killed worker's rows come back in about three seconds of real time.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

import nilo_job as job
from tests.helpers.serving import listeners, listening
from tests.helpers.workers import start, stop

HERE = Path(__file__).resolve().parent
ROWS = 5_000

pytestmark = pytest.mark.procs


@pytest.fixture
def env(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        "NILO_TEST_STORE": pg_url,
        "NILO_TEST_OUT": str(tmp_path),
        "NILO_TEST_TIMEOUT_MS": "2000",
        "NILO_TEST_POLL_MS": "200",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


async def until(what: str, check: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what}")
        await asyncio.sleep(0.02)


async def settled(queue: job.Jobs, seconds: float = 90.0) -> None:
    """Wait until nothing is queued or running; the store may be away for a while meanwhile."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            stats = await queue.stats()
        except job.StoreUnavailable:
            stats = None
        if stats is not None and (stats.queued, stats.running) == (0, 0):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not settled after {seconds} s: {stats}")
        await asyncio.sleep(0.1)


async def push_rows(url: str, count: int) -> None:
    from tests.helpers import procs_kinds

    async with await psycopg.AsyncConnection.connect(url) as conn, conn.transaction():
        for n in range(count):
            await procs_kinds.jobs.push_in(conn, procs_kinds.Work(n=n))


def runs(out: Path) -> tuple[Counter[int], dict[int, set[int]]]:
    """How often each number ran, and in which processes."""
    count: Counter[int] = Counter()
    where: dict[int, set[int]] = defaultdict(set)
    for log in out.glob("work-*.log"):
        pid = int(log.stem.split("-")[1])
        for line in log.read_text().splitlines():
            n = int(line.split()[0])
            count[n] += 1
            where[n].add(pid)
    return count, where


def done_so_far(out: Path) -> int:
    return sum(len(log.read_text().splitlines()) for log in out.glob("work-*.log"))


async def test_four_processes_of_four_workers_run_5000_rows_exactly_once(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path, pg_url: str
) -> None:
    from tests.helpers import procs_kinds

    workers = [start(env, "--workers", "4") for _ in range(4)]
    try:
        await until("the four workers to listen", lambda: listeners(pg_url) == 4)
        # Sixteen rows that can only finish together: with four workers a process, every
        # process must take part (the claim is shared), whichever claims first.
        await queue.push_many([procs_kinds.Meet(n=n, of=16) for n in range(16)])
        await push_rows(env["NILO_TEST_STORE"], ROWS)
        await settled(queue)
    finally:
        results = [stop(proc) for proc in workers]
    count, _where = runs(tmp_path)
    assert sorted(count) == list(range(ROWS))
    assert set(count.values()) == {1}
    assert procs_kinds.met(tmp_path) == {proc.pid: 4 for proc in workers}
    for code, output in results:
        assert code == 0, output
        assert "Traceback" not in output, output
    assert await queue.stats() == (0, 0, 0)


async def test_a_killed_worker_loses_nothing_and_only_its_running_rows_run_again(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    workers = [start(env, "--workers", "4") for _ in range(4)]
    victim = workers[0]
    try:
        await push_rows(env["NILO_TEST_STORE"], ROWS)
        await until("a fifth of the rows", lambda: done_so_far(tmp_path) >= ROWS // 5)
        victim.kill()
        victim.communicate(timeout=30)
        await settled(queue)
    finally:
        results = [stop(proc) for proc in workers[1:]]
    count, where = runs(tmp_path)
    assert sorted(count) == list(range(ROWS)), "a row was lost"
    again = [n for n, times in count.items() if times > 1]
    # Only what the killed process held could run twice: at most its 4 workers' rows, each of
    # which it had run (and recorded) before it died.
    assert len(again) <= 4, again
    for n in again:
        assert victim.pid in where[n]
        assert count[n] == 2
    for code, output in results:
        assert code == 0, output


async def test_terminated_backends_lose_nothing_and_workers_resume_by_themselves(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path, pg_url: str
) -> None:
    workers = [start(env, "--workers", "4") for _ in range(2)]
    try:
        await push_rows(env["NILO_TEST_STORE"], ROWS)
        await until("a fifth of the rows", lambda: done_so_far(tmp_path) >= ROWS // 5)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert killed is not None
        assert killed[0] >= 2
        await settled(queue)
    finally:
        results = [stop(proc) for proc in workers]
    count, _where = runs(tmp_path)
    assert sorted(count) == list(range(ROWS)), "a row was lost"
    assert sum(count.values()) - ROWS <= 8  # at most what was running when the line dropped
    for code, output in results:
        assert code == 0, output


@pytest.mark.skipif(shutil.which("pg_ctlcluster") is None, reason="no pg_ctlcluster here")
async def test_a_postgresql_restart_loses_nothing_and_workers_resume_by_themselves(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    workers = [start(env, "--workers", "4") for _ in range(2)]
    try:
        await push_rows(env["NILO_TEST_STORE"], ROWS)
        await until("a fifth of the rows", lambda: done_so_far(tmp_path) >= ROWS // 5)
        restart = await asyncio.create_subprocess_exec(
            "pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"
        )
        assert await asyncio.wait_for(restart.wait(), 120) == 0
        await settled(queue)
    finally:
        results = [stop(proc) for proc in workers]
    count, _where = runs(tmp_path)
    assert sorted(count) == list(range(ROWS)), "a row was lost"
    assert sum(count.values()) - ROWS <= 8
    for code, output in results:
        assert code == 0, output


async def wait_stamp(out: Path, n: int, seconds: float) -> int:
    path = out / f"stamp-{n}"
    await until(f"row {n} to start", path.exists, seconds=seconds)
    await until(f"row {n} to finish writing", lambda: path.read_text() != "", seconds=5)
    return int(path.read_text())


async def test_a_push_from_another_process_starts_at_once_not_at_the_next_poll(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path, pg_url: str
) -> None:
    from tests.helpers import procs_kinds

    # A poll of ten minutes: a row that starts within a tenth of it was woken by the NOTIFY
    # (after its first claim at start, the worker would otherwise sleep the whole poll).
    poll_ms = 600_000
    bound_s = poll_ms / 1_000 / 10
    worker = start(env, poll_ms=poll_ms)
    try:
        await queue.push(procs_kinds.Stamp(n=0))
        await wait_stamp(tmp_path, 0, bound_s)  # the worker is up and listening
        for n in range(1, 11):
            await queue.push(procs_kinds.Stamp(n=n))
            await wait_stamp(tmp_path, n, bound_s)
        # The listener loses its connection; it listens again by itself.
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            )

        await until("the listener to come back", lambda: listening(pg_url), seconds=30)
        await queue.push(procs_kinds.Stamp(n=99))
        await wait_stamp(tmp_path, 99, bound_s)
    finally:
        code, output = stop(worker)
    assert code == 0, output
