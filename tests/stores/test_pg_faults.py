"""PostgreSQL faults that heal on their own, under `serve()` in this process: a server restart
and a listener's connection that goes silent without closing (half-open TCP).

The silent connection is made by a small TCP proxy in the test, which forwards bytes both ways
until told to freeze the connection that LISTENs: from then on it passes nothing, and closes
nothing, the way a firewall that forgot the connection behaves.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field

import psycopg
import pytest

import nilo_job as job

pytestmark = pytest.mark.procs


@dataclass
class Stamp:
    nilo_job = "stamp"
    retry = job.Retry.NONE

    n: int

    async def run(self) -> None:
        started[self.n] = time.monotonic()
        events["arrived"].set()


@dataclass
class Slow:
    nilo_job = "slow"
    retry = job.Retry(times=3)

    n: int

    async def run(self, tick: job.Tick) -> None:
        slow_runs.append((self.n, tick.attempts))
        events["slow"].set()
        await asyncio.sleep(4)  # long enough to be running across the restart


started: dict[int, float] = {}
slow_runs: list[tuple[int, int]] = []
events: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def fresh() -> None:
    """What the runs record, new for each test (and its event loop)."""
    started.clear()
    slow_runs.clear()
    events.update(arrived=asyncio.Event(), slow=asyncio.Event())


async def wait_started(n: int, seconds: float) -> float:
    async with asyncio.timeout(seconds):
        while n not in started:
            events["arrived"].clear()
            await events["arrived"].wait()
    return started[n]


def pg_restart() -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        timeout=120,
    )


@pytest.mark.skipif(shutil.which("pg_ctlcluster") is None, reason="no pg_ctlcluster here")
async def test_after_a_restart_new_rows_run_within_the_poll_and_the_row_in_flight_ends_once(
    pg_url: str,
) -> None:
    poll_ms = 500
    jobs = job.Jobs(kinds=[Stamp, Slow], store=job.Table(pg_url), poll_ms=poll_ms)
    pusher = job.Jobs(kinds=[Stamp, Slow], store=job.Table(pg_url))
    try:
        async with jobs.serving(grace_ms=10_000):
            await pusher.push(Slow(1))
            async with asyncio.timeout(20):
                await events["slow"].wait()
            await asyncio.to_thread(pg_restart)  # while Slow(1) runs
            back = time.monotonic()
            for n in range(5):
                await push_when_up(pusher, Stamp(n))
            for n in range(5):
                # Within the poll plus the reconnect: the pools and the listener open again by
                # themselves; a claim that finds the server away is asked again after poll_ms.
                assert await wait_started(n, 30) - back < 10 + 3 * poll_ms / 1_000
            async with asyncio.timeout(30):
                while (await stats_when_up(jobs))[:2] != (0, 0):  # noqa: ASYNC110 (bounded)
                    await asyncio.sleep(0.1)
        assert slow_runs == [(1, 1)]  # its end was written after the restart: it ran once
        assert await jobs.stats() == (0, 0, 0)
    finally:
        await jobs.store.close()
        await pusher.store.close()


async def stats_when_up(jobs: job.Jobs) -> job.Stats:
    """`jobs.stats()`, asked again while the server is away."""
    async with asyncio.timeout(60):
        while True:
            try:
                return await jobs.stats()
            except job.StoreUnavailable:
                await asyncio.sleep(0.1)


async def push_when_up(jobs: job.Jobs, value: object) -> None:
    """Push once the server answers again (a push to a server that is away fails, writing
    nothing)."""
    async with asyncio.timeout(60):
        while True:
            try:
                await jobs.push(value)
                return
            except job.StoreUnavailable:
                await asyncio.sleep(0.1)


# ---------------------------------------------------------------------- a silent listener


@dataclass
class Proxy:
    """Forwards 127.0.0.1:port to PostgreSQL; `freeze()` stops the LISTEN connection dead."""

    target_port: int
    port: int = 0
    listens: int = 0  # connections that have sent LISTEN
    frozen: set[int] = field(default_factory=set)
    server: asyncio.base_events.Server | None = None
    pipes: list[tuple[int, asyncio.StreamWriter, asyncio.StreamWriter]] = field(
        default_factory=list
    )
    listening_pipe: set[int] = field(default_factory=set)

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        number = len(self.pipes)
        self.pipes.append((number, writer, up_writer))
        await asyncio.gather(
            self._pump(number, reader, up_writer, client=True),
            self._pump(number, up_reader, writer, client=False),
            return_exceptions=True,
        )

    async def _pump(
        self, number: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: bool
    ) -> None:
        while data := await reader.read(65_536):
            if client and b"LISTEN nilo_jobs" in data:
                self.listens += 1
                self.listening_pipe.add(number)
            while number in self.frozen:  # noqa: ASYNC110 (silent: nothing passes or closes)
                await asyncio.sleep(3_600)
            writer.write(data)
            await writer.drain()
        writer.close()

    def freeze_listener(self) -> None:
        self.frozen |= self.listening_pipe

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for _, a, b in self.pipes:
            a.close()
            b.close()


async def test_a_silent_listener_is_noticed_and_replaced_within_its_bound(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("nilo_job.store.postgres.listen.CHECK_S", 1.0)
    monkeypatch.setattr("nilo_job.store.postgres.listen.ANSWER_S", 1.0)
    proxy = Proxy(target_port=int(psycopg.conninfo.conninfo_to_dict(pg_url).get("port", 5432)))
    await proxy.start()
    through = pg_url.replace(":5432/", f":{proxy.port}/")
    assert through != pg_url
    # A ten-minute poll: a row that starts in seconds was woken by the NOTIFY.
    jobs = job.Jobs(kinds=[Stamp], store=job.Table(through), poll_ms=600_000)
    pusher = job.Jobs(kinds=[Stamp], store=job.Table(pg_url))
    try:
        async with jobs.serving(grace_ms=1_000):
            async with asyncio.timeout(20):
                while proxy.listens < 1:  # noqa: ASYNC110 (bounded)
                    await asyncio.sleep(0.01)
            await pusher.push(Stamp(0))
            await wait_started(0, 20)
            proxy.freeze_listener()
            froze = time.monotonic()
            async with asyncio.timeout(20):
                while proxy.listens < 2:  # noqa: ASYNC110 (bounded)
                    await asyncio.sleep(0.01)
            # Noticed after CHECK_S without a notification and ANSWER_S without an answer.
            assert time.monotonic() - froze < 1.0 + 1.0 + 3
            await pusher.push(Stamp(1))
            await wait_started(1, 20)
    finally:
        await jobs.store.close()
        await pusher.store.close()
        await proxy.close()
