"""The example app (`examples/webapp`), driven over HTTP.

The app runs in this process through httpx's ASGI transport, its lifespan entered with
`serve=False`; the test drives the queue itself with `drain`/`drain_at`, so tomorrow and three in
the morning are calls rather than sleeps. The last tests serve the queue from the lifespan under
a real uvicorn: a sign-up's welcome is delivered by the background worker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

import nilo_job as job
from examples.webapp.app import create_app
from examples.webapp.jobs import DAY_US, Db, MailboxMailer, Nightly, Pace
from tests.helpers import ROOT

HOUR_US = 3_600_000_000


class Stepped(Pace):
    """An export's rest between batches that lasts until the test says go."""

    def __init__(self) -> None:
        super().__init__()
        self.reached: asyncio.Queue[None] = asyncio.Queue()
        self.go = asyncio.Semaphore(0)

    async def between_batches(self) -> None:
        self.reached.put_nowait(None)
        await self.go.acquire()

    async def wait_for_rest(self) -> None:
        await asyncio.wait_for(self.reached.get(), 10)


class Gate:
    """A mailer that, once armed, holds each send until the test opens the gate."""

    def __init__(self, inner: MailboxMailer) -> None:
        self.inner = inner
        self.armed = False
        self.sending = threading.Event()
        self.open = threading.Event()
        self.sent = threading.Event()

    def send(self, to: str, subject: str, *, key: str) -> None:
        if self.armed:
            self.sending.set()
            assert self.open.wait(10)
        self.inner.send(to, subject, key=key)
        self.sent.set()


@dataclass
class Running:
    app: FastAPI
    client: httpx.AsyncClient
    jobs: job.Jobs
    mail: Gate
    pace: Stepped


@pytest.fixture
async def web(tmp_path: Path) -> AsyncIterator[Running]:
    path = str(tmp_path / "app.db")
    mail, pace = Gate(MailboxMailer(Db(path))), Stepped()
    app = create_app(path, serve=False, mail=mail, pace=pace, status=job.MemorySpace(ttl_s=600))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://app") as client,
    ):
        yield Running(app, client, app.state.jobs, mail, pace)


async def sign_up(web: Running, email: str) -> int:
    answer = await web.client.post("/users", json={"email": email})
    assert answer.status_code == 201, answer.text
    user_id: int = answer.json()["id"]
    return user_id


async def stats(web: Running) -> dict[str, int]:
    answer = await web.client.get("/ops/stats")
    assert answer.status_code == 200
    found: dict[str, int] = answer.json()
    return found


async def test_a_sign_up_commits_the_user_and_its_welcome_which_a_worker_delivers(
    web: Running,
) -> None:
    answer = await web.client.post("/users", json={"email": "ada@example.com"})
    assert answer.status_code == 201
    assert answer.json() == {"id": 1, "welcome": 1}
    assert await stats(web) == {"queued": 1, "running": 0, "dead": 0}
    assert (await web.client.get("/mailbox")).json() == []

    assert await web.jobs.drain() == 1
    assert (await web.client.get("/mailbox")).json() == [
        {"to": "ada@example.com", "subject": "Welcome"}
    ]
    assert await stats(web) == {"queued": 0, "running": 0, "dead": 0}


async def test_a_second_sign_up_of_one_address_is_refused_and_pushes_nothing(
    web: Running,
) -> None:
    await sign_up(web, "ada@example.com")
    again = await web.client.post("/users", json={"email": "ada@example.com"})
    assert again.status_code == 409
    assert again.json() == {"detail": "ada@example.com has signed up already"}
    assert await stats(web) == {"queued": 1, "running": 0, "dead": 0}


async def test_a_reminder_is_queued_once_and_postponing_it_moves_it(web: Running) -> None:
    t0 = job.now_us()
    user = await sign_up(web, "ada@example.com")
    assert await web.jobs.drain() == 1  # the welcome

    first = await web.client.post(f"/users/{user}/remind", json={})
    assert first.status_code == 201
    reminder = first.json()["reminder"]
    assert first.json() == {"reminder": reminder, "already": False}
    again = await web.client.post(f"/users/{user}/remind", json={"in_hours": 2})
    assert again.status_code == 200
    assert again.json() == {"reminder": reminder, "already": True}
    assert await stats(web) == {"queued": 1, "running": 0, "dead": 0}

    moved = await web.client.post(f"/users/{user}/postpone", json={"in_hours": 48})
    assert moved.status_code == 200
    later = moved.json()["reminder"]
    assert later != reminder
    t1 = job.now_us()
    assert await stats(web) == {"queued": 1, "running": 0, "dead": 0}

    # Not tomorrow, when the first reminder was due; the day after.
    assert await web.jobs.drain_at(t1 + 24 * HOUR_US) == 0
    assert await web.jobs.drain_at(t0 + 48 * HOUR_US - 1) == 0
    assert (await web.client.get("/mailbox")).json() == [
        {"to": "ada@example.com", "subject": "Welcome"}
    ]
    assert await web.jobs.drain_at(t1 + 48 * HOUR_US) == 1
    assert (await web.client.get("/mailbox")).json() == [
        {"to": "ada@example.com", "subject": "Welcome"},
        {"to": "ada@example.com", "subject": "A reminder"},
    ]

    # Sent: there is nothing left to postpone, and a new reminder may be queued.
    gone = await web.client.post(f"/users/{user}/postpone", json={})
    assert gone.status_code == 404
    assert gone.json() == {"detail": f"user {user} has no reminder queued"}
    assert (await web.client.post(f"/users/{user}/remind", json={})).status_code == 201


async def test_postponing_a_reminder_that_is_going_out_answers_409(web: Running) -> None:
    user = await sign_up(web, "ada@example.com")
    assert await web.jobs.drain() == 1
    assert (await web.client.post(f"/users/{user}/remind", json={})).status_code == 201
    t1 = job.now_us()

    web.mail.armed = True
    running = asyncio.create_task(web.jobs.run_one_at(t1 + 24 * HOUR_US))
    assert await asyncio.to_thread(web.mail.sending.wait, 10)  # claimed, and sending

    late = await web.client.post(f"/users/{user}/postpone", json={"in_hours": 48})
    assert late.status_code == 409
    assert late.json() == {"detail": "that reminder is already going out"}
    assert await stats(web) == {"queued": 0, "running": 1, "dead": 0}

    web.mail.open.set()
    assert await running is True
    assert (await web.client.get("/mailbox")).json()[-1] == {
        "to": "ada@example.com",
        "subject": "A reminder",
    }
    assert await stats(web) == {"queued": 0, "running": 0, "dead": 0}


async def test_the_export_route_reports_progress_then_done(web: Running) -> None:
    for n in range(5):
        await sign_up(web, f"user{n}@example.com")
    assert await web.jobs.drain() == 5

    started = await web.client.post("/exports", json={"batch": 2})
    assert started.status_code == 202
    row = started.json()["id"]
    status = f"/exports/{row}"
    assert (await web.client.get(status)).json() == {
        "id": row,
        "state": "queued",
        "attempts": 0,
        "progress": None,
    }
    assert (await web.client.get(f"{status}/csv")).status_code == 404

    draining = asyncio.create_task(web.jobs.drain())
    for done in (2, 4, 5):
        await web.pace.wait_for_rest()
        assert (await web.client.get(status)).json() == {
            "id": row,
            "state": "running",
            "attempts": 1,
            "progress": done,
        }
        web.pace.go.release()
    assert await draining == 1

    assert (await web.client.get(status)).json() == {
        "id": row,
        "state": "done",
        "attempts": 1,
        "progress": 5,
    }
    csv = await web.client.get(f"{status}/csv")
    assert csv.status_code == 200
    assert csv.headers["content-type"] == "text/csv; charset=utf-8"
    assert csv.text == "id,email\n" + "".join(f"{n + 1},user{n}@example.com\n" for n in range(5))
    assert (await web.client.get("/exports/999")).status_code == 404


async def test_a_dead_welcome_is_listed_fixed_and_retried(web: Running) -> None:
    t = job.now_us() + 1_000_000
    user = await sign_up(web, "grace@nowhere.invalid")
    welcome = 1
    assert await web.jobs.drain_at(t) == 1  # NoSuchAddress is final: dead on attempt one
    assert await stats(web) == {"queued": 0, "running": 0, "dead": 1}

    dead = await web.client.get("/ops/dead")
    assert dead.status_code == 200
    (row,) = dead.json()
    trace = row.pop("traceback")
    assert row == {
        "id": welcome,
        "kind": "send-welcome",
        "error": "NoSuchAddress",
        "attempts": 1,
        "payload": {"user_id": user},
        "died_at": t,
        "message": "550 no such domain: nowhere.invalid",
        "payload_cut": False,
    }
    assert trace.startswith("Traceback (most recent call last):\n")
    assert trace.endswith("NoSuchAddress: 550 no such domain: nowhere.invalid\n")

    fixed = await web.client.patch(f"/users/{user}", json={"email": "grace@example.com"})
    assert fixed.status_code == 200
    retried = await web.client.post(f"/ops/dead/{welcome}/retry")
    assert retried.status_code == 200
    assert retried.json() == {"id": welcome}
    twice = await web.client.post(f"/ops/dead/{welcome}/retry")
    assert twice.status_code == 404
    assert twice.json() == {"detail": f"no dead job {welcome}"}
    assert await stats(web) == {"queued": 1, "running": 0, "dead": 0}

    assert await web.jobs.drain() == 1
    assert (await web.client.get("/ops/dead")).json() == []
    assert (await web.client.get("/mailbox")).json() == [
        {"to": "grace@example.com", "subject": "Welcome"}
    ]
    assert await stats(web) == {"queued": 0, "running": 0, "dead": 0}


async def test_the_nightly_report_runs_at_three_and_again_the_next_day(web: Running) -> None:
    t0 = job.now_us()
    await sign_up(web, "ada@example.com")
    await sign_up(web, "grace@example.com")
    assert await web.jobs.drain() == 2

    await web.jobs.seed_at(t0)
    three = Nightly.schedule.next(t0)
    assert datetime.fromtimestamp(three // 1_000_000, UTC).strftime("%H:%M:%S") == "03:00:00"
    assert await web.jobs.drain_at(three - 1) == 0
    assert await web.jobs.drain_at(three) == 1
    assert await web.jobs.drain_at(three + DAY_US) == 1

    def utc(us: int) -> str:
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    assert (await web.client.get("/reports")).json() == [
        {"until": utc(three), "signups": 2},
        {"until": utc(three + DAY_US), "signups": 0},
    ]
    # One schedule row, holding the next night.
    assert await stats(web) == {"queued": 1, "running": 0, "dead": 0}


async def test_the_health_route_answers_ready(web: Running) -> None:
    answer = await web.client.get("/healthz")
    assert answer.status_code == 200
    assert answer.json() == {"ready": True}


# ------------------------------------------------------------------- served by the lifespan


@pytest.fixture
def listening() -> tuple[socket.socket, int]:
    """A listening socket on a free port: requests sent before uvicorn starts wait in its
    backlog, so nothing polls for the server to come up."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock, sock.getsockname()[1]


async def test_under_uvicorn_the_lifespan_serves_the_queue_and_stops_it_cleanly(
    tmp_path: Path, listening: tuple[socket.socket, int]
) -> None:
    path = str(tmp_path / "app.db")
    mail = Gate(MailboxMailer(Db(path)))
    app = create_app(path, serve=True, mail=mail, status=job.MemorySpace(ttl_s=600))
    sock, port = listening
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_config=None))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            answer = await client.post("/users", json={"email": "ada@example.com"})
            assert answer.status_code == 201
            # The welcome's id depends on whether the schedule was seeded first.
            assert answer.json()["id"] == 1
            # Delivered by the worker the lifespan started: nobody here drains.
            assert await asyncio.to_thread(mail.sent.wait, 10)
            assert (await client.get("/mailbox")).json() == [
                {"to": "ada@example.com", "subject": "Welcome"}
            ]
            assert (await client.get("/healthz")).json() == {"ready": True}
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)
        sock.close()

    # Stopped: nothing is left running, and the schedule the lifespan seeded is the one row.
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT kind, state, unique_key FROM nilo_jobs").fetchall()
    conn.close()
    assert rows == [("nightly-report", "queued", "schedule")]
    assert await app.state.jobs.ready() is False  # its workers have stopped
    await app.state.jobs.store.close()


# -------------------------------------------------- a web process and a worker process apart

REDIS_URL = os.environ.get("NILO_TEST_REDIS", "redis://127.0.0.1:6379/15")


async def until(what: str, check: Callable[[], Awaitable[bool]], seconds: float = 30.0) -> None:
    """Wait for another process to make `check()` hold: asked every 20 ms, for at most
    `seconds` (there is no event to wait on across processes)."""
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.mark.procs
async def test_a_web_process_that_only_pushes_and_a_worker_process_share_statuses(
    tmp_path: Path,
) -> None:
    from redis.asyncio import Redis

    redis = Redis.from_url(REDIS_URL)
    try:
        await redis.ping()
    except Exception as error:
        await redis.aclose()
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs Redis: {error}")
        pytest.skip(f"no Redis: {error}")
    name = f"webapp-test-{uuid.uuid4().hex[:12]}"
    path = str(tmp_path / "app.db")
    app = create_app(path, serve=False, status=job.RedisSpace(redis, name=name, ttl_s=600))
    env = {
        **os.environ,
        "WEBAPP_DB": path,
        "WEBAPP_REDIS_URL": REDIS_URL,
        "WEBAPP_SPACE": name,
    }
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),  # creates the tables before the worker checks them
        httpx.AsyncClient(transport=transport, base_url="http://app") as client,
    ):
        worker = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "nilo_job", "worker", "examples.webapp.jobs:from_env"),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            assert (await client.post("/users", json={"email": "ada@example.com"})).json() == {
                "id": 1,
                "welcome": 1,
            }

            async def welcomed() -> bool:
                return bool((await client.get("/mailbox")).json())

            await until("the worker process to deliver the welcome", welcomed)
            assert (await client.get("/mailbox")).json() == [
                {"to": "ada@example.com", "subject": "Welcome"}
            ]

            row = (await client.post("/exports", json={"batch": 1})).json()["id"]

            async def exported() -> bool:
                return bool((await client.get(f"/exports/{row}")).json()["state"] == "done")

            await until("the worker process to finish the export", exported)
            assert (await client.get(f"/exports/{row}")).json() == {
                "id": row,
                "state": "done",
                "attempts": 1,
                "progress": 1,
            }
            assert (await client.get(f"/exports/{row}/csv")).text == "id,email\n1,ada@example.com\n"
        finally:
            worker.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(worker.communicate(), 30)
        assert worker.returncode == 0, output.decode()
        # The worker seeded the schedule; the rest is done.
        assert (await client.get("/ops/stats")).json() == {"queued": 1, "running": 0, "dead": 0}
    async for key in redis.scan_iter(f"{name}:*"):
        await redis.delete(key)
    await redis.aclose()
