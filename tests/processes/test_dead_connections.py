"""Worker processes whose connections to PostgreSQL go dead without closing, each bounded in time.

The worker processes reach the server through a TCP proxy of the tests' own
(`tests.helpers.proxy`), which makes the faults real networks make: every flow open at one moment
goes silent for good while new ones pass (a NAT or a firewall that forgot idle flows), and every
flow holds its bytes, new ones included, until it is resumed (a server host that stopped
answering, a partition that heals). The test pushes its rows on a direct connection, and reads
when each started from the files the rows write (`Stamp`), in microseconds of the machine's clock.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import psycopg
import pytest

import nilo_job as job
from tests.helpers.proxy import Proxy
from tests.helpers.workers import start, stop

pytestmark = pytest.mark.procs


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    running = Proxy().start()
    yield running
    running.close()


@pytest.fixture
def env(
    pg_url: str, proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    values = {
        "NILO_TEST_STORE": proxy.url(pg_url),
        "NILO_TEST_OUT": str(tmp_path),
        "NILO_TEST_TIMEOUT_MS": "2000",  # a lease of 3 s
        "NILO_TEST_POLL_MS": "200",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


@pytest.fixture
def direct(pg_url: str) -> Callable[[int, int], Awaitable[int]]:
    """`push(first, count)`: Stamp rows `first`… pushed in one transaction on a direct
    connection (not through the proxy); answers when they are pushed, in µs."""
    from tests.helpers import procs_kinds

    async def push(first: int, count: int) -> int:
        async with await psycopg.AsyncConnection.connect(pg_url) as conn, conn.transaction():
            for n in range(first, first + count):
                await procs_kinds.jobs.push_in(conn, procs_kinds.Stamp(n=n))
        return job.now_us()

    return push


def started_at(out: Path, numbers: range) -> dict[int, int]:
    """When each Stamp row of `numbers` that has started started, in µs."""
    found = {}
    for n in numbers:
        path = out / f"stamp-{n}"
        if path.exists() and path.read_text():
            found[n] = int(path.read_text())
    return found


async def all_started(out: Path, numbers: range, seconds: float) -> dict[int, int]:
    deadline = time.monotonic() + seconds
    while len(found := started_at(out, numbers)) < len(numbers):
        if time.monotonic() > deadline:
            missing = [n for n in numbers if n not in found]
            raise AssertionError(
                f"{len(missing)} rows not started after {seconds} s: {missing[:10]}"
            )
        await asyncio.sleep(0.05)
    return found


async def until(what: str, check: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what}")
        await asyncio.sleep(0.02)


async def counts(pg_url: str) -> tuple[int, int]:
    """Rows in the table, and done rows in its history, read on a direct connection."""
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM nilo_jobs), (SELECT count(*) FROM nilo_jobs_done)"
        )
        found = await cur.fetchone()
    assert found is not None
    return int(found[0]), int(found[1])


def claim_lines(out: str) -> list[str]:
    """The worker's log lines about claiming."""
    return [
        line for line in out.splitlines()
        if " nilo_job: " in line and ("claiming" in line or "no claim" in line)
    ]  # fmt: skip


def clean(out: str) -> None:
    """No traceback and no asyncio complaint in a worker's output."""
    for bad in ("Traceback", "never retrieved", "was destroyed but it is pending"):
        assert bad not in out, out


async def test_rows_pushed_after_every_open_connection_went_silent_run_within_the_bound(
    queue: job.Jobs,
    env: dict[str, str],
    proxy: Proxy,
    direct: Callable[[int, int], Awaitable[int]],
    tmp_path: Path,
    pg_url: str,
) -> None:
    """The default bound (10 s) and no URL option: an idle worker whose
    every open connection went silent claims on a fresh one, and 1,000 rows pushed afterwards
    all start within 30 s of the push."""
    worker = start(env, "--grace-ms", "2000")
    try:
        await until("the worker to listen", lambda: proxy.listens >= 1)
        await direct(0, 10)
        await all_started(tmp_path, range(10), 30)  # its claim and end connections are open
        await asyncio.sleep(0.5)  # idle: its claim loop polls
        proxy.drop_open()
        pushed = await direct(1_000, 1_000)
        found = await all_started(tmp_path, range(1_000, 2_000), 40)
        latest_s = (max(found.values()) - pushed) / 1e6
        # The hung claim is given up after the bound, the next one (after poll_ms) goes out on
        # a new connection, and the rows run.
        assert latest_s < 30, latest_s
        assert latest_s > 9, latest_s  # (it was the bound that freed it, not something else)
    finally:
        code, out = stop(worker)
    assert code == 0, out
    clean(out)
    assert await counts(pg_url) == (0, 1_010)  # none lost
    said = claim_lines(out)
    assert len(said) == 2, out
    assert said[0].split()[2] == "WARNING", said
    assert "did not answer a claim within 10 s on the connection kept for claims" in said[0], said
    assert said[1].split()[2] == "INFO", said
    assert "claiming again: the store answered after" in said[1], said


async def test_a_server_that_stops_answering_and_comes_back(
    queue: job.Jobs,
    env: dict[str, str],
    proxy: Proxy,
    direct: Callable[[int, int], Awaitable[int]],
    tmp_path: Path,
    pg_url: str,
) -> None:
    """Every flow, new ones too, holds its bytes for 8 s (a paused server host, a partition),
    longer than the bound (2 s) and the lease (3 s): a push on a connection opened before
    answers StoreUnavailable within the bound, async and sync; the worker says once that it
    cannot claim, once that it has been longer than its lease, and once that it claims again;
    after the heal every row runs within poll_ms and 5 s, and none is lost."""
    from tests.helpers import procs_kinds

    url = env["NILO_TEST_STORE"] + "?connect_timeout=2"
    env = {**env, "NILO_TEST_STORE": url, "NILO_TEST_ANSWER_MS": "2000"}
    through = job.Jobs(kinds=[procs_kinds.Stamp], store=job.Table(url, answer_ms=2_000))
    worker = start(env, "--grace-ms", "2000")
    try:
        await until("the worker to listen", lambda: proxy.listens >= 1)
        await direct(0, 5)
        await all_started(tmp_path, range(5), 30)

        await through.push(procs_kinds.Stamp(n=5))  # its connection is open
        await asyncio.to_thread(through.sync.push, procs_kinds.Stamp(n=6))
        await all_started(tmp_path, range(5, 7), 30)

        proxy.pause()
        paused = time.monotonic()
        began = time.monotonic()
        with pytest.raises(job.StoreUnavailable, match=r"did not answer a push within 2 s"):
            await through.push(procs_kinds.Stamp(n=99))
        assert time.monotonic() - began < 2 + 1.5
        began = time.monotonic()
        with pytest.raises(job.StoreUnavailable):
            await asyncio.to_thread(through.sync.push, procs_kinds.Stamp(n=98))
        assert time.monotonic() - began < 2 + 1.5
        await direct(100, 50)
        await asyncio.sleep(8 - (time.monotonic() - paused))
        assert started_at(tmp_path, range(100, 150)) == {}
        proxy.resume()
        healed = job.now_us()
        found = await all_started(tmp_path, range(100, 150), 30)
        assert (max(found.values()) - healed) / 1e6 < 0.2 + 5
    finally:
        code, out = stop(worker)
        await through.store.close()
        through.sync.close()
    assert code == 0, out
    clean(out)
    # Every row whose push was answered ran. The two pushes that had no answer may have been
    # written all the same (their bytes were on their way when the server stopped answering):
    # those that were ran too.
    unanswered = started_at(tmp_path, range(98, 100))
    assert await counts(pg_url) == (0, 57 + len(unanswered))
    said = claim_lines(out)
    assert [line.split()[2] for line in said] == ["WARNING", "WARNING", "INFO"], out
    assert "claiming failed with StoreUnavailable" in said[0], said
    assert "longer than the lease (3000 ms)" in said[1], said
    assert "claiming again" in said[2], said


@pytest.mark.parametrize("signals", [1, 2])
async def test_a_stop_stops_a_worker_whose_store_does_not_answer(
    queue: job.Jobs,
    env: dict[str, str],
    proxy: Proxy,
    direct: Callable[[int, int], Awaitable[int]],
    tmp_path: Path,
    signals: int,
) -> None:
    """A worker running a row, its every connection silent: SIGTERM ends it within --grace-ms
    and the bound; a second signal ends it within a second. The row
    is left to its lease, and runs again."""
    from tests.helpers import procs_kinds

    url = env["NILO_TEST_STORE"] + "?connect_timeout=2"
    env = {**env, "NILO_TEST_STORE": url, "NILO_TEST_ANSWER_MS": "2000"}
    worker = start(env, "--grace-ms", "1000")
    try:
        await until("the worker to listen", lambda: proxy.listens >= 1)
        await queue.push(procs_kinds.Gate(n=1))
        await until("the row to start", lambda: any(tmp_path.glob("gate-1-*")))
        proxy.pause()
        await asyncio.sleep(0.3)
        began = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        if signals == 2:
            await asyncio.sleep(0.2)
            worker.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(worker.wait, 30)
        except subprocess.TimeoutExpired:
            pytest.fail("the worker did not stop within 30 s")
        took = time.monotonic() - began
        assert took < (1 + 2 + 0.5 if signals == 1 else 0.2 + 1 + 0.5), took
    finally:
        proxy.resume()
        code, out = stop(worker)
    clean(out)
    assert "SIGTERM: stopping after running rows finish" in out, out
    # A clean stop, or one its bound cut short, which says so.
    assert (code == 1) == ("exiting now; any row this process still holds runs again" in out), out
    (tmp_path / "open").write_text("")
    # Left to its lease (3 s), the row runs again in this process.
    async with queue.serving(grace_ms=1_000):
        await until("the row to be done", lambda: len(list(tmp_path.glob("gate-1-*"))) == 2, 30)
    assert (await queue.stats()).done == 1
