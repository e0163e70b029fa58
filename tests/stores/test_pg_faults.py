"""PostgreSQL faults that heal on their own, under `serve()` in this process: a server restart
and a listener's connection that goes silent without closing (half-open TCP); and the bound on
every call to the server, with the TCP settings the store gives its connections.

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
    proxy = Proxy(target_port=int(psycopg.conninfo.conninfo_to_dict(pg_url).get("port", 5432)))
    await proxy.start()
    through = pg_url.replace(":5432/", f":{proxy.port}/")
    assert through != pg_url
    # A ten-minute poll: a row that starts in seconds was woken by the NOTIFY.
    jobs = job.Jobs(kinds=[Stamp], store=job.Table(through, answer_ms=1_000), poll_ms=600_000)
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
            # Noticed after CHECK_S without a notification and the bound without an answer.
            assert time.monotonic() - froze < 1.0 + 1.0 + 3
            await pusher.push(Stamp(1))
            await wait_started(1, 20)
    finally:
        await jobs.store.close()
        await pusher.store.close()
        await proxy.close()


# ------------------------------------------------------------- every wait has its bound


def test_answer_ms_is_whole_milliseconds_from_100_to_a_day() -> None:
    for bad in (99, 0, -1, 1.5, "10000", True, None, 86_400_001, 3_000_000_000):
        with pytest.raises(job.Refusal) as refused:
            job.Table("postgresql://u@h/db", answer_ms=bad)
        assert str(refused.value) == (
            f"job.Table(..., answer_ms={bad!r}): whole milliseconds, from 100 to 86,400,000 (a day)"
        )
    assert job.Table("postgresql://u@h/db", answer_ms=86_400_000).answer_ms == 86_400_000  # type: ignore[attr-defined]
    assert job.Table("postgresql://u@h/db", answer_ms=100).answer_ms == 100  # type: ignore[attr-defined]
    assert job.Table("postgresql://u@h/db").answer_ms == 10_000  # type: ignore[attr-defined]


def test_tcp_settings_the_url_gives_win_and_the_rest_are_filled_in() -> None:
    from psycopg.conninfo import conninfo_to_dict

    from nilo_job.store.postgres.bounds import with_timeout

    plain, timeout_s = with_timeout("postgresql://u@h/db", 4_000)
    assert timeout_s == 10
    said = conninfo_to_dict(plain)
    assert {k: said[k] for k in said if k not in ("user", "host", "dbname")} == {
        "connect_timeout": "10",
        "tcp_user_timeout": "30000",  # the kernel's own bound: 30 s, or answer_ms when longer
        "keepalives": "1",
        "keepalives_idle": "30",
        "keepalives_interval": "10",
        "keepalives_count": "3",
    }
    assert conninfo_to_dict(with_timeout("postgresql://u@h/db", 45_000)[0])["tcp_user_timeout"] == (
        "45000"
    )
    own, timeout_s = with_timeout(
        "postgresql://u@h/db?connect_timeout=3&tcp_user_timeout=5000&keepalives_idle=15", 4_000
    )
    assert timeout_s == 3
    said = conninfo_to_dict(own)
    assert (said["connect_timeout"], said["tcp_user_timeout"], said["keepalives_idle"]) == (
        "3",
        "5000",
        "15",
    )
    assert (said["keepalives_interval"], said["keepalives_count"]) == ("10", "3")


@pytest.mark.parametrize(
    ("options", "bound"),
    [
        ("", 4.0),
        ("?options=-c%20statement_timeout%3D60s", 61.0),
        ("?options=-c%20statement_timeout%3D90000", 91.0),
        ("?options=-c%20statement_timeout%3D2min", 121.0),
        ("?options=-c%20statement_timeout%3D1s", 4.0),  # shorter: the store's own bound
        ("?options=-c%20statement_timeout%3D0", None),  # never cut: nor by the store
        ("?options=-c%20work_mem%3D64MB", 4.0),
    ],
)
def test_the_urls_statement_timeout_sets_the_bound_when_longer(
    options: str, bound: float | None
) -> None:
    from nilo_job.store.postgres.bounds import bound_s

    assert bound_s(4_000, "postgresql://u@h/db" + options) == bound


@pytest.mark.parametrize(
    ("query", "said"),
    [
        (
            "connect_timeout=abc",
            "connect_timeout=abc in the URL: whole seconds, 1 or more (0, "
            "which waits for ever, is refused)",
        ),
        (
            "connect_timeout=0",
            "connect_timeout=0 in the URL: whole seconds, 1 or more (0, which "
            "waits for ever, is refused)",
        ),
        (
            "connect_timeout=-3",
            "connect_timeout=-3 in the URL: whole seconds, 1 or more (0, "
            "which waits for ever, is refused)",
        ),
        ("tcp_user_timeout=abc", "tcp_user_timeout=abc in the URL: whole milliseconds, 0 or more"),
        ("tcp_user_timeout=1.5", "tcp_user_timeout=1.5 in the URL: whole milliseconds, 0 or more"),
        ("keepalives=2", "keepalives=2 in the URL: 1 (on) or 0 (off)"),
        ("keepalives_idle=x", "keepalives_idle=x in the URL: whole seconds, 0 or more"),
        ("keepalives_interval=-1", "keepalives_interval=-1 in the URL: whole seconds, 0 or more"),
        ("keepalives_count=many", "keepalives_count=many in the URL: a count, 0 or more"),
    ],
)
def test_a_tcp_setting_libpq_would_refuse_is_refused_when_the_table_is_made(
    query: str, said: str
) -> None:
    with pytest.raises(job.Refusal) as refused:
        job.Table(f"postgresql://u@h/db?{query}")
    assert str(refused.value) == said


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("60000", 60_000),
        ("60s", 60_000),
        ("1.5s", 1_500),
        ("90.5s", 90_500),
        ("2min", 120_000),
        ("1.5min", 90_000),
        ("1h", 3_600_000),
        ("90000000us", 90_000),
        ("250ms", 250),
        ("0", 0),
    ],
)
def test_statement_timeout_is_read_in_the_servers_units(value: str, ms: int) -> None:
    from urllib.parse import quote

    from nilo_job.store.postgres.bounds import statement_timeout_ms

    url = "postgresql://u@h/db?options=" + quote(f"-c statement_timeout={value}")
    assert statement_timeout_ms(url) == ms


async def test_the_kernel_is_told_the_bound_on_every_connection(pg_url: str) -> None:
    """`tcp_user_timeout` and the keepalives reach the socket itself."""
    import socket

    table = job.Table(pg_url.replace("@127.0.0.1:", "@localhost:"), answer_ms=7_000)
    jobs = job.Jobs(kinds=[Stamp], store=table)
    try:
        await jobs.push(Stamp(1))
        kept = table._connections.kept["push"].conn  # type: ignore[attr-defined]
        sock = socket.socket(fileno=os.dup(kept.pgconn.socket))
        with sock:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 30_000
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 10
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
    finally:
        await table.close()


async def test_every_call_on_a_server_that_stopped_answering_ends_within_the_bound(
    pg_url: str,
) -> None:
    """Every flow holds its bytes (a paused host). A push on the connection kept for pushes
    raises StoreUnavailable naming the call within the bound; the store's other connections are
    replaced then, so the next call, a push of many rows, waits for a new connection, within the
    connect timeout. Once the server answers again, the next calls work on new connections."""
    from tests.helpers.proxy import Proxy

    proxy = Proxy().start()
    table = job.Table(proxy.url(pg_url) + "?connect_timeout=2", answer_ms=500)
    jobs = job.Jobs(kinds=[Stamp], store=table)
    try:
        await jobs.push(Stamp(1))
        await jobs.push_many([Stamp(2), Stamp(3)])
        assert (await jobs.stats()).queued == 3
        proxy.pause()
        began = time.monotonic()
        with pytest.raises(job.StoreUnavailable) as raised:
            await jobs.push(Stamp(4))
        took = time.monotonic() - began
        assert 0.5 <= took < 0.5 + 1.0, took
        backend = table._connections.kept["push"].conn  # type: ignore[attr-defined]
        assert backend is None  # closed
        said = str(raised.value)
        assert said.startswith(
            f"PostgreSQL at 127.0.0.1:{proxy.port}/{pg_url.rsplit('/', 1)[1]} did not answer a "
            "push within 0.5 s on the connection kept for pushes (server process "
        ), said
        assert said.endswith("; that connection was closed, and the next call opens a new one")

        began = time.monotonic()
        with pytest.raises(job.StoreUnavailable, match=r"within 2 s"):
            await jobs.push_many([Stamp(5), Stamp(6)])
        took = time.monotonic() - began
        assert 2 <= took < 2 + 1.5, took
        proxy.resume()
        assert await jobs.push(Stamp(7)) is not None
        assert (await jobs.stats()).queued >= 4  # (the unanswered pushes may have been written)
    finally:
        await table.close()
        proxy.close()


async def test_pushes_waiting_behind_one_that_had_no_answer_fail_with_it_unsent(
    pg_url: str,
) -> None:
    """Concurrent pushes share a write: on a server that stopped answering, the first is sent
    and has no answer within the bound; the ones that came meanwhile fail with it, at once and
    unsent, rather than each waiting a bound (and a connect timeout) more."""
    from tests.helpers.proxy import Proxy

    proxy = Proxy().start()
    table = job.Table(proxy.url(pg_url), answer_ms=1_000)
    jobs = job.Jobs(kinds=[Stamp], store=table)
    try:
        await jobs.push(Stamp(1))  # the connection kept for pushes is open
        proxy.pause()
        began = time.monotonic()
        first = asyncio.create_task(jobs.push(Stamp(2)))
        await asyncio.sleep(0.3)  # it is in flight
        later = [asyncio.create_task(jobs.push(Stamp(n))) for n in range(3, 8)]
        answers = await asyncio.gather(first, *later, return_exceptions=True)
        took = time.monotonic() - began
        assert all(isinstance(answer, job.StoreUnavailable) for answer in answers), answers
        assert 1.0 <= took < 1.0 + 1.0, took
        proxy.resume()
        assert await jobs.push(Stamp(8)) is not None
        async with await psycopg.AsyncConnection.connect(pg_url) as conn:
            cur = await conn.execute("SELECT payload FROM nilo_jobs ORDER BY id")
            pushed = [row[0] for row in await cur.fetchall()]
        # 1 and 8; 2 was sent and may have landed when the server answered again; 3-7 were
        # never sent.
        assert pushed in ([{"n": 1}, {"n": 8}], [{"n": 1}, {"n": 2}, {"n": 8}]), pushed
    finally:
        await table.close()
        proxy.close()


async def test_a_migration_is_not_cut_by_the_bound(pg_url: str) -> None:
    """`create_missing` waits for the table's advisory lock, held elsewhere for longer than the
    bound, and completes; a call that is bounded, given the same wait, does not."""
    table = job.Table(pg_url, answer_ms=200)
    holder = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        await holder.execute("SELECT pg_advisory_lock(hashtext('nilo_jobs'))")

        async def release() -> None:
            await asyncio.sleep(1.0)
            await holder.execute("SELECT pg_advisory_unlock(hashtext('nilo_jobs'))")

        began = time.monotonic()
        releasing = asyncio.create_task(release())
        await table.create_missing()
        assert time.monotonic() - began >= 1.0
        await releasing

        await holder.execute("SELECT pg_advisory_lock(hashtext('nilo_jobs'))")
        releasing = asyncio.create_task(release())

        async def wait_for_the_lock(conn: psycopg.AsyncConnection[object]) -> None:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('nilo_jobs'))")

        with pytest.raises(job.StoreUnavailable, match=r"did not answer a wait within 0.2 s"):
            await table._connections.run(wait_for_the_lock, "a wait")  # type: ignore[attr-defined]
        await releasing
        await table.check()  # the store goes on, on a new connection
    finally:
        await holder.close()
        await table.close()
