"""Worker processes on MariaDB: several processes of several workers share one table and run every
row exactly once; a killed worker loses nothing; a push from another process on this host starts
at once, with a poll of ten minutes (a datagram, as MariaDB has no NOTIFY); the connections the
server cuts are replaced by themselves."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import nilo_job as job
from tests.helpers.mariadb import side
from tests.helpers.workers import start, stop

asyncmy = pytest.importorskip("asyncmy")


ROWS = 2_000

pytestmark = pytest.mark.procs


@pytest.fixture
def env(
    mariadb_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    # A runtime folder of the test's own, with a short path (a Unix socket's path is short),
    # for the wake-up sockets of its processes.
    with tempfile.TemporaryDirectory(prefix="nw") as runtime:
        values = {
            "NILO_TEST_STORE": mariadb_url,
            "NILO_TEST_OUT": str(tmp_path),
            "NILO_TEST_TIMEOUT_MS": "2000",
            "NILO_TEST_POLL_MS": "200",
            "XDG_RUNTIME_DIR": runtime,
        }
        for key, value in values.items():
            monkeypatch.setenv(key, value)
        yield values


async def until(what: str, check: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what}")
        await asyncio.sleep(0.02)


async def settled(queue: job.Jobs, seconds: float = 90.0) -> None:
    """Wait until nothing is queued or running."""
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


async def push_rows(queue: job.Jobs, url: str, count: int) -> None:
    """`count` rows pushed in one transaction of the test's own connection (`push_in`), then the
    other processes on this host woken (`jobs.wake()`: the store did not see that commit)."""
    from tests.helpers import procs_kinds

    async with side(url, autocommit=False) as conn:
        for n in range(count):
            await queue.push_in(conn, procs_kinds.Work(n=n))
        await conn.commit()
    queue.wake()


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


async def held_by(url: str, pid: int) -> set[int]:
    """The numbers of the `Work` rows that the process `pid` holds (`running`, claimed by it)."""
    async with side(url) as conn, conn.cursor() as cur:
        await cur.execute(
            "SELECT payload FROM nilo_jobs WHERE state = 'running' AND worker LIKE %s",
            (f"%:{pid}",),
        )
        return {json.loads(row[0])["n"] for row in await cur.fetchall()}


def done_so_far(out: Path) -> int:
    return sum(len(log.read_text().splitlines()) for log in out.glob("work-*.log"))


async def serving(queue: job.Jobs, processes: int) -> None:
    """Until `processes` worker processes are in the registry (each has begun to serve)."""
    deadline = time.monotonic() + 60
    while len(await queue.store.workers()) < processes:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {processes} worker processes serve")
        await asyncio.sleep(0.05)


async def test_four_processes_of_four_workers_run_every_row_exactly_once(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    workers = [start(env, "--workers", "4") for _ in range(4)]
    try:
        await serving(queue, 4)
        # Sixteen rows that can only finish together: with four workers a process, every
        # process must take part (the claim is shared), whichever claims first.
        await queue.push_many([procs_kinds.Meet(n=n, of=16) for n in range(16)])
        await push_rows(queue, env["NILO_TEST_STORE"], ROWS)
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
        await push_rows(queue, env["NILO_TEST_STORE"], ROWS)
        await until("a fifth of the rows", lambda: done_so_far(tmp_path) >= ROWS // 5)
        victim.kill()
        victim.communicate(timeout=30)
        # What it held as it died: its rows still `running`, read before their leases run out.
        held = await held_by(env["NILO_TEST_STORE"], victim.pid)
        await settled(queue)
    finally:
        results = [stop(proc) for proc in workers[1:]]
    count, where = runs(tmp_path)
    assert sorted(count) == list(range(ROWS)), "a row was lost"
    again = {n for n, times in count.items() if times > 1}
    # Only what the killed process held could run twice: the rows running on its 4 workers and
    # those whose runs had returned and whose ends were not yet written (each commit waits for
    # the disk here, so more ends are in flight than on PostgreSQL), each of which it had run
    # (and recorded) before it died.
    assert again <= held, (again, held)
    for n in again:
        assert victim.pid in where[n]
        assert count[n] == 2
    for code, output in results:
        assert code == 0, output


async def test_connections_the_server_cuts_lose_nothing_and_workers_resume_by_themselves(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path, mariadb_url: str
) -> None:
    workers = [start(env, "--workers", "4") for _ in range(2)]
    try:
        await push_rows(queue, env["NILO_TEST_STORE"], ROWS)
        await until("a fifth of the rows", lambda: done_so_far(tmp_path) >= ROWS // 5)
        async with side(mariadb_url) as admin, admin.cursor() as cur:
            await cur.execute(
                "SELECT id FROM information_schema.processlist WHERE db = DATABASE() "
                "AND id <> CONNECTION_ID()"
            )
            threads = [int(row[0]) for row in await cur.fetchall()]
            for thread in threads:
                await cur.execute(f"KILL CONNECTION {thread}")
        assert len(threads) >= 2
        await settled(queue)
    finally:
        results = [stop(proc) for proc in workers]
    count, _where = runs(tmp_path)
    assert sorted(count) == list(range(ROWS)), "a row was lost"
    assert sum(count.values()) - ROWS <= 8  # at most what was running when the line dropped
    for code, output in results:
        assert code == 0, output


async def wait_stamp(out: Path, n: int, seconds: float) -> int:
    path = out / f"stamp-{n}"
    await until(f"row {n} to start", path.exists, seconds=seconds)
    await until(f"row {n} to finish writing", lambda: path.read_text() != "", seconds=5)
    return int(path.read_text())


async def test_a_push_from_another_process_starts_at_once_not_at_the_next_poll(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    # A poll of ten minutes: a row that starts within a tenth of it was woken by the datagram
    # (after its first claims at start, the worker would otherwise sleep the whole poll).
    poll_ms = 600_000
    bound_s = poll_ms / 1_000 / 10
    worker = start(env, poll_ms=poll_ms)
    try:
        await serving(queue, 1)
        for n in range(10):
            await queue.push(procs_kinds.Stamp(n=n))
            await wait_stamp(tmp_path, n, bound_s)
    finally:
        code, output = stop(worker)
    assert code == 0, output
