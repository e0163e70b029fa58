"""`nilo_job.web.lifespan`: the queue served beside a Starlette or FastAPI app, stopped with it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

import nilo_job as job
from nilo_job.web import lifespan


@dataclass
class Seen:
    """What the runs saw, for a test thread to wait on (a bounded `get`, never a sleep)."""

    notes: queue.Queue[int] = field(default_factory=queue.Queue)


@dataclass
class Hold:
    """An async run that starts, then waits until the test releases it."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Deps:
    seen: Seen
    hold: Hold


@dataclass
class Note:
    nilo_job = "web-note"
    retry = job.Retry.NONE

    n: int

    def run(self, seen: Seen) -> None:
        seen.notes.put(self.n)


@dataclass
class Slow:
    nilo_job = "web-slow"
    retry = job.Retry.NONE

    async def run(self, hold: Hold) -> None:
        hold.started.set()
        await hold.release.wait()


@dataclass
class Hourly:
    nilo_job = "web-hourly"
    retry = job.Retry.NONE
    schedule = job.every(3_600_000)
    overlap = job.Overlap.SKIP
    missed = job.Missed.DROP

    def run(self) -> None:
        pass


def make_jobs(path: Path, deps: Deps | None = None) -> job.Jobs:
    return job.Jobs(
        kinds=[Note, Slow, Hourly],
        store=job.Table(f"sqlite:///{path}"),
        deps=deps or Deps(Seen(), Hold()),
    )


def rows(path: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(path) as conn:
        found = conn.execute(
            "SELECT kind, state, attempts FROM nilo_jobs ORDER BY kind, id"
        ).fetchall()
    conn.close()
    return [(str(kind), str(state), int(attempts)) for kind, state, attempts in found]


@contextlib.asynccontextmanager
async def started(app: ASGIApp) -> AsyncIterator[httpx.AsyncClient]:
    """The app's lifespan run through the ASGI lifespan protocol, as a server runs it, and a
    client for its routes."""
    to_app: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
    from_app: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.create_task(app(scope, to_app.get, from_app.put))
    await to_app.put({"type": "lifespan.startup"})
    answer = await asyncio.wait_for(from_app.get(), 30)
    assert answer["type"] == "lifespan.startup.complete", answer
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            yield client
    finally:
        await to_app.put({"type": "lifespan.shutdown"})
        answer = await asyncio.wait_for(from_app.get(), 30)
        await task
        assert answer["type"] == "lifespan.shutdown.complete", answer


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "app.db"


async def test_a_starlette_app_serves_the_queue_for_its_life(db: Path) -> None:
    seen = Seen()
    jobs = make_jobs(db, Deps(seen, Hold()))

    async def note(request: Request) -> JSONResponse:
        row = await jobs.push(Note(int(request.path_params["n"])))
        return JSONResponse({"row": row}, status_code=201)

    app = Starlette(
        routes=[Route("/notes/{n}", note, methods=["POST"])],
        lifespan=lifespan(jobs, create_missing=True),
    )
    async with started(app) as client:
        assert (await client.post("/notes/7")).status_code == 201
        assert await asyncio.to_thread(seen.notes.get, True, 10) == 7  # by the lifespan's worker
    # Stopped with the app: the schedule it seeded is all that is left, and nothing runs.
    assert rows(db) == [("web-hourly", "queued", 0)]

    # A second start (a test client does that) serves again.
    async with started(app) as client:
        assert (await client.post("/notes/8")).status_code == 201
        assert await asyncio.to_thread(seen.notes.get, True, 10) == 8
    assert rows(db) == [("web-hourly", "queued", 0)]


async def test_a_fastapi_sync_route_pushes_through_jobs_sync_onto_the_serving_loop(
    db: Path,
) -> None:
    seen = Seen()
    jobs = make_jobs(db, Deps(seen, Hold()))
    app = FastAPI(lifespan=lifespan(jobs, create_missing=True))

    @app.post("/notes/{n}", status_code=201)
    def note(n: int) -> dict[str, int | None]:  # a thread of FastAPI's pool: no event loop
        return {"row": jobs.sync.push(Note(n))}

    @app.get("/stats")
    def stats() -> dict[str, int]:
        found = jobs.sync.stats()
        return {"queued": found.queued, "running": found.running, "dead": found.dead}

    async with started(app) as client:
        answer = await client.post("/notes/3")
        assert answer.status_code == 201
        assert await asyncio.to_thread(seen.notes.get, True, 10) == 3
        assert (await client.get("/stats")).json() == {"queued": 1, "running": 0, "dead": 0}
    assert rows(db) == [("web-hourly", "queued", 0)]


async def test_at_shutdown_a_running_row_gets_the_grace_period_to_finish(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hold = Hold()
    jobs = make_jobs(db, Deps(Seen(), hold))
    stopping = asyncio.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("stopping: 1 row still running"):
                stopping.set()

    caplog.set_level(logging.INFO, logger="nilo_job")
    watch = Watch()
    logging.getLogger("nilo_job").addHandler(watch)
    try:
        running = lifespan(jobs, create_missing=True, grace_ms=60_000)(object())
        await running.__aenter__()
        await jobs.push(Slow())
        await asyncio.wait_for(hold.started.wait(), 10)
        leaving = asyncio.create_task(running.__aexit__(None, None, None))
        await asyncio.wait_for(stopping.wait(), 10)
        assert not leaving.done()
        hold.release.set()
        assert await asyncio.wait_for(leaving, 10) is False
    finally:
        logging.getLogger("nilo_job").removeHandler(watch)
    assert rows(db) == [("web-hourly", "queued", 0)]  # the slow row finished: gone


async def test_past_the_grace_period_a_running_row_is_queued_again_unrun(db: Path) -> None:
    hold = Hold()
    jobs = make_jobs(db, Deps(Seen(), hold))
    async with lifespan(jobs, create_missing=True, grace_ms=0)(object()):
        await jobs.push(Slow())
        await asyncio.wait_for(hold.started.wait(), 10)
    assert rows(db) == [("web-hourly", "queued", 0), ("web-slow", "queued", 0)]


async def test_without_create_missing_a_missing_table_stops_the_app_starting(db: Path) -> None:
    sqlite3.connect(db).close()  # the application's database, without the queue's table
    jobs = make_jobs(db)
    with pytest.raises(job.StoreUnavailable, match="there is no nilo_jobs table in") as raised:
        async with lifespan(jobs)(object()):
            pytest.fail("the app started without a table")
    assert "nilo-job migrate" in str(raised.value)
    with pytest.raises(job.StoreUnavailable, match="there is no nilo_jobs table in"):
        async with lifespan(jobs, serve=False)(object()):
            pytest.fail("the app started without a table")


async def test_serve_false_opens_and_checks_the_store_but_runs_nothing(db: Path) -> None:
    jobs = make_jobs(db)
    await jobs.store.create_missing()
    async with lifespan(jobs, serve=False)(object()):
        assert await jobs.ready() is True
        row = await jobs.push(Note(1))
        assert await jobs.status(row) is None  # no status Space: nothing to read
    # Nothing seeded, nothing claimed: the row waits for a worker process.
    assert rows(db) == [("web-note", "queued", 0)]


def test_lifespan_refuses_what_is_not_a_queue_or_a_grace_period() -> None:
    with pytest.raises(job.Refusal) as not_jobs:
        lifespan("jobs")  # type: ignore[arg-type]
    assert str(not_jobs.value) == "lifespan('jobs'): pass the job.Jobs the app pushes to"
    jobs = job.Jobs(kinds=[Hourly], store=job.Memory())
    with pytest.raises(job.Refusal) as negative:
        lifespan(jobs, grace_ms=-1)
    assert str(negative.value) == (
        "lifespan(grace_ms=-1) is below 0: grace_ms must be whole milliseconds from 0 to "
        "315,360,000,000 (ten years)"
    )
