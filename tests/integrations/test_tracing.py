"""One trace from the request to the run: the trace context a push records on its row, and the
run span that continues it, with the OpenTelemetry SDK's in-memory exporter (and, across
processes, a `nilo-job worker` whose spans are written as JSON lines).

The first attempt's run span is the push span's child; a later attempt's is a root linked to
it; a schedule's tick starts a trace of its own; a push outside any span, or without
OpenTelemetry, leaves the row's `trace` NULL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer
from sqlalchemy import create_engine
from sqlalchemy.orm import Session
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import nilo_job as job
from nilo_job.metrics import Metrics
from nilo_job.store.contract import NewRow, Store
from nilo_job.store.memory import Memory
from tests.helpers import ROOT
from tests.helpers.serving import until, until_idle
from tests.helpers.tracing_kinds import Greet
from tests.helpers.workers import stop

S = 1_000_000  # microseconds in a second
failed_once: set[str] = set()


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry(times=2, backoff=job.Fixed(ms=1_000))

    to: str

    def run(self) -> None:
        if self.to.startswith("flaky") and self.to not in failed_once:
            failed_once.add(self.to)
            raise RuntimeError("the provider is down")


@dataclass
class Digest:
    nilo_job = "digest"
    retry = job.Retry.NONE
    schedule = job.every(60_000)
    overlap = job.Overlap.SKIP
    missed = job.Missed.CATCH_UP

    def run(self) -> None:
        return None


@dataclass
class Traced:
    """Spans of one test: the provider, its exporter, and the application's tracer."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    @property
    def tracer(self) -> Tracer:
        return self.provider.get_tracer("app")

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.exporter.get_finished_spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.named(name)
        return span


@pytest.fixture
def traced() -> Iterator[Traced]:
    failed_once.clear()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Traced(provider, exporter)
    provider.shutdown()


def ids(span: ReadableSpan) -> tuple[int, int]:
    """(trace id, span id) of `span`."""
    context = span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id


def parent_of(span: ReadableSpan) -> tuple[int, int] | None:
    """(trace id, span id) of `span`'s parent, or None for a root."""
    return None if span.parent is None else (span.parent.trace_id, span.parent.span_id)


def links_of(span: ReadableSpan) -> list[tuple[int, int]]:
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


def assert_child(run: ReadableSpan, push: ReadableSpan, request: ReadableSpan) -> None:
    """`run` is `push`'s child, and both are in `request`'s trace under it."""
    assert parent_of(push) == ids(request)
    assert parent_of(run) == ids(push)
    assert ids(run)[0] == ids(request)[0]
    assert links_of(run) == []


async def stored_trace(store: Store, row_id: int) -> str | None:
    """The `trace` column of a row, read from the table itself (Memory: its own record)."""
    if isinstance(store, Memory):
        return store._rows[row_id].trace  # Memory's table is its dict
    path = getattr(store, "path", None)
    if path is not None:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            found = conn.execute("SELECT trace FROM nilo_jobs WHERE id = ?", (row_id,)).fetchone()
    elif repr(store).startswith(("job.Table('mariadb:", "job.Table('mysql:")):
        query = "SELECT trace FROM nilo_jobs WHERE id = %s"  # on the store's own connections
        found = await store._one(query, (row_id,))  # type: ignore[attr-defined]
    else:
        async with await psycopg.AsyncConnection.connect(store.conninfo) as conn:  # type: ignore[attr-defined]
            cur = await conn.execute("SELECT trace FROM nilo_jobs WHERE id = %s", (row_id,))
            found = await cur.fetchone()
    assert found is not None
    value: str | None = found[0]
    return value


def header_of(span: ReadableSpan) -> str:
    """The `traceparent` header that names `span`."""
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def traceparent(trace: str | None) -> str:
    assert trace is not None
    carrier: dict[str, str] = json.loads(trace)
    return carrier["traceparent"]


def twin(store: Store) -> Store:
    """Another store over `store`'s table, for a second queue on another event loop (Memory is
    shared as it is)."""
    if isinstance(store, Memory):
        return store
    path = getattr(store, "path", None)
    if path is not None:
        return job.Table(f"sqlite:///{path}")
    return job.Table(getattr(store, "url", None) or store.conninfo)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------- on every store


async def test_the_run_span_is_the_push_spans_child_in_the_requests_trace(
    store: Store, traced: Traced, t: int
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    Metrics(jobs, tracer_provider=traced.provider)
    with traced.tracer.start_as_current_span("POST /signup", kind=SpanKind.SERVER):
        row = await jobs.push(Mail("ok"), at=t)
    assert row is not None
    push = traced.one("push mail")
    assert traceparent(await stored_trace(store, row)) == header_of(push)
    assert await jobs.drain_at(t) == 1
    run = traced.one("run mail")
    assert_child(run, push, traced.one("POST /signup"))
    assert dict(run.attributes or {})["nilo_job.attempt"] == 1


async def test_a_retried_rows_later_attempt_is_a_root_linked_to_the_push_span(
    store: Store, traced: Traced, t: int
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    Metrics(jobs, tracer_provider=traced.provider)
    with traced.tracer.start_as_current_span("request"):
        await jobs.push(Mail("flaky"), at=t)
    with traced.tracer.start_as_current_span("the test"):  # no run span may take it as parent
        assert await jobs.drain_at(t) == 1
        assert await jobs.drain_at(t + S) == 1
    push = traced.one("push mail")
    first, second = traced.named("run mail")
    assert parent_of(first) == ids(push)
    assert [dict(span.attributes or {})["nilo_job.attempt"] for span in (first, second)] == [1, 2]
    assert parent_of(second) is None
    assert links_of(second) == [ids(push)]
    assert ids(second)[0] != ids(push)[0]  # a trace of its own


async def test_each_row_of_push_many_carries_the_context_of_its_call(
    store: Store, traced: Traced, t: int
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    Metrics(jobs, tracer_provider=traced.provider)
    with traced.tracer.start_as_current_span("request"):
        rows = await jobs.push_many([Mail("a"), Mail("b")], at=t)
    push = traced.one("push mail")
    for row in rows:
        assert traceparent(await stored_trace(store, row)) == header_of(push)
    assert await jobs.drain_at(t) == 2
    for run in traced.named("run mail"):
        assert_child(run, push, traced.one("request"))


async def test_without_metrics_the_push_records_the_applications_own_span(
    store: Store, traced: Traced, t: int
) -> None:
    pusher = job.Jobs(kinds=[Mail], store=store)  # nobody observes it: no push span
    worker = job.Jobs(kinds=[Mail], store=store)
    Metrics(worker, tracer_provider=traced.provider)
    with traced.tracer.start_as_current_span("request"):
        row = await pusher.push(Mail("ok"), at=t)
    assert row is not None
    request = traced.one("request")
    assert traceparent(await stored_trace(store, row)) == header_of(request)
    assert await worker.drain_at(t) == 1
    assert parent_of(traced.one("run mail")) == ids(request)


async def test_a_push_outside_any_span_records_null_and_its_run_is_a_root(
    store: Store, traced: Traced, t: int
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    Metrics(jobs, tracer_provider=traced.provider)
    unobserved = job.Jobs(kinds=[Mail], store=store)
    row = await unobserved.push(Mail("ok"), at=t)
    assert row is not None
    assert await stored_trace(store, row) is None
    with traced.tracer.start_as_current_span("the test"):
        assert await jobs.drain_at(t) == 1
    run = traced.one("run mail")
    assert (parent_of(run), links_of(run)) == (None, [])


async def test_a_ticks_run_starts_a_trace_of_its_own(store: Store, traced: Traced, t: int) -> None:
    jobs = job.Jobs(kinds=[Digest], store=store)
    Metrics(jobs, tracer_provider=traced.provider)
    with traced.tracer.start_as_current_span("deploy"):
        await jobs.seed_at(t)
        assert await jobs.drain_at(t + 60 * S) == 1
        assert await jobs.drain_at(t + 120 * S) == 1
    (tick,) = (await jobs.find(job.Where(state="queued", kind="digest"))).rows
    assert await stored_trace(store, tick.id) is None  # the next tick, pushed by the worker
    runs = traced.named("run digest")
    assert [(parent_of(run), links_of(run)) for run in runs] == [(None, []), (None, [])]
    assert ids(runs[0])[0] != ids(runs[1])[0]


async def test_sync_push_carries_the_callers_span_across_the_bridges_thread(
    store: Store, traced: Traced, t: int
) -> None:
    pusher = job.Jobs(kinds=[Mail], store=twin(store))
    Metrics(pusher, tracer_provider=traced.provider)
    worker = job.Jobs(kinds=[Mail], store=store)
    Metrics(worker, tracer_provider=traced.provider)

    def view() -> int | None:  # a sync view: no event loop in its thread
        with traced.tracer.start_as_current_span("GET /sync"):
            return pusher.sync.push(Mail("ok"), at=t)

    try:
        row = await asyncio.to_thread(view)
    finally:
        await asyncio.to_thread(pusher.sync.close)
    assert row is not None
    assert await worker.drain_at(t) == 1
    assert_child(traced.one("run mail"), traced.one("push mail"), traced.one("GET /sync"))


async def test_a_push_handed_to_serves_idle_worker_keeps_the_context(
    store: Store, traced: Traced
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store, workers=1, poll_ms=60_000)
    Metrics(jobs, tracer_provider=traced.provider)
    async with jobs.serving():
        await until_idle(jobs)
        with traced.tracer.start_as_current_span("request"):
            await jobs.push(Mail("ok"))  # due now, to the idle worker: inserted claimed
        await until("the run span", lambda: len(traced.named("run mail")) == 1)
    assert_child(traced.one("run mail"), traced.one("push mail"), traced.one("request"))


async def test_every_insert_keeps_the_trace_and_the_claim_hands_it_back(
    store: Store, t: int
) -> None:
    def row(n: int, key: str | None = None, lease: int | None = None) -> NewRow:
        return NewRow("a", b"{}", t, key, lease, t, "host:1", f'{{"traceparent":"{n}"}}')

    (plain,) = await store.push([row(1)])
    (keyed,) = await store.push([row(2, "k")])
    (claimed,) = await store.push([row(3, lease=t + 100)])  # by its pusher, for its own worker
    many = await store.push([row(4), row(5)])
    (bare,) = await store.push([NewRow("a", b"{}", t)])
    taken = await store.claim(["a"], t + 100, t + 200, 10)
    assert {found.id: found.trace for found in taken} == {
        plain: '{"traceparent":"1"}',
        keyed: '{"traceparent":"2"}',
        claimed: '{"traceparent":"3"}',
        many[0]: '{"traceparent":"4"}',
        many[1]: '{"traceparent":"5"}',
        bare: None,
    }


class Seen:
    """An observer that notes what each run's `running` was handed."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int, str | None]] = []

    def pushing(self, kind: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def pushed(self, kind: str, row_id: int | None) -> None:
        return None

    def claimed(self, rows: object, now_us: int, seconds: float) -> None:
        return None

    def running(
        self, kind: str, tick: job.Tick, trace: str | None
    ) -> contextlib.AbstractContextManager[None]:
        self.runs.append((kind, tick.attempts, trace))
        return contextlib.nullcontext()

    def ended(self, kind: str, outcome: str, error: str | None, seconds: float) -> None:
        return None


class SeenBefore(Seen):
    """An observer written before `running` was handed the trace."""

    def running(  # type: ignore[override]
        self, kind: str, tick: job.Tick
    ) -> contextlib.AbstractContextManager[None]:
        self.runs.append((kind, tick.attempts, "not handed"))
        return contextlib.nullcontext()


async def test_observers_are_handed_the_rows_trace_and_older_ones_are_called_as_before(
    store: Store, traced: Traced, t: int
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    seen, before = Seen(), SeenBefore()
    jobs.observe(seen)
    jobs.observe(before)
    with traced.tracer.start_as_current_span("request"):
        row = await jobs.push(Mail("ok"), at=t)
    assert row is not None
    await jobs.push(Mail("ok"), at=t)
    recorded = await stored_trace(store, row)
    assert traceparent(recorded) == header_of(traced.one("request"))
    assert await jobs.drain_at(t) == 2
    assert seen.runs == [("mail", 1, recorded), ("mail", 1, None)]
    assert before.runs == [("mail", 1, "not handed"), ("mail", 1, "not handed")]


# ------------------------------------------------------------------------ push_in (SQL)


@pytest.fixture(params=["sqlite", "postgres"])
async def sql(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, Store]]:
    """A SQL store and the URL of its database, for push_in on a connection of the test's."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/q.db"
    else:
        url = request.getfixturevalue("pg_url")
    table = job.Table(url)
    await table.create_missing()
    try:
        yield url, table
    finally:
        await table.close()


async def test_push_in_keeps_the_context_async_and_sync(
    sql: tuple[str, Store], traced: Traced, t: int
) -> None:
    url, store = sql
    jobs = job.Jobs(kinds=[Mail], store=store)
    Metrics(jobs, tracer_provider=traced.provider)
    with traced.tracer.start_as_current_span("request"):
        if url.startswith("sqlite"):
            with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
                await jobs.push_in(conn, Mail("async"), at=t)
                jobs.sync.push_in(conn, Mail("sync"), at=t)
                conn.commit()
        else:
            async with await psycopg.AsyncConnection.connect(url) as conn:
                await jobs.push_in(conn, Mail("async"), at=t)
            with psycopg.connect(url) as sync_conn:
                jobs.sync.push_in(sync_conn, Mail("sync"), at=t)
            engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
            with Session(engine) as session, session.begin():
                jobs.sync.push_in(session, Mail("sqlalchemy"), at=t)
            engine.dispose()
    pushes = traced.named("push mail")
    assert len(pushes) == (2 if url.startswith("sqlite") else 3)
    assert await jobs.drain_at(t) == len(pushes)
    runs = traced.named("run mail")
    assert sorted(parent_of(run) for run in runs) == sorted(ids(push) for push in pushes)  # type: ignore[type-var]
    for push in pushes:
        assert parent_of(push) == ids(traced.one("request"))


# ------------------------------------------------------------------ without OpenTelemetry

WITHOUT_OTEL = """
import asyncio, json, sqlite3, sys
sys.modules["opentelemetry"] = None  # the package cannot be imported
from dataclasses import dataclass
import nilo_job as job

ran = []

@dataclass
class Note:
    nilo_job = "note"
    retry = job.Retry.NONE
    def run(self) -> None:
        ran.append(1)

async def main() -> None:
    jobs = job.Jobs(kinds=[Note], store=job.Table(sys.argv[1]))
    await jobs.store.create_missing()
    row = await jobs.push(Note())
    db = sqlite3.connect(sys.argv[1].removeprefix("sqlite:///"))
    (trace,) = db.execute("SELECT trace FROM nilo_jobs WHERE id = ?", (row,)).fetchone()
    ran_count = await jobs.drain()
    await jobs.store.close()
    loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry."))
    print(json.dumps({"trace": trace, "drained": ran_count, "ran": ran, "loaded": loaded}))

asyncio.run(main())
"""


def test_without_opentelemetry_a_push_records_null_and_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL, f"sqlite:///{tmp_path}/q.db"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"trace": None, "drained": 1, "ran": [1], "loaded": []}


# ------------------------------------------------------ across processes, from a request


def server_spans(app: Any, tracer: Tracer) -> Any:
    """`app` with a SERVER span around each HTTP request, current while the app answers it."""

    async def traced_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        name = f"{scope['method']} {scope['path']}"
        with tracer.start_as_current_span(name, kind=SpanKind.SERVER):
            await app(scope, receive, send)

    return traced_app


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A `nilo-job worker` process serving `tests.helpers.tracing_kinds:jobs` with `env`."""
    return subprocess.Popen(
        [sys.executable, "-m", "nilo_job", "worker", "tests.helpers.tracing_kinds:jobs"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def spans_in(path: Path, name: str, bound_s: float = 30.0) -> list[dict[str, Any]]:
    """The spans named `name` in the JSON lines at `path`, once there is one (within `bound_s`)."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if path.exists():
            lines = [json.loads(line) for line in path.read_text().splitlines() if line]
            found = [span for span in lines if span["name"] == name]
            if found:
                return found
        time.sleep(0.05)
    raise AssertionError(f"no {name!r} span in {path} within {bound_s} s")


@pytest.mark.procs
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_one_trace_from_an_http_request_to_the_run_in_a_worker_process(
    backend: str, traced: Traced, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path}/q.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
    spans = tmp_path / "spans.jsonl"
    table = job.Table(url)
    await table.create_missing()
    web_jobs = job.Jobs(kinds=[Greet], store=table)
    Metrics(web_jobs, tracer_provider=traced.provider)

    async def signup(request: Request) -> JSONResponse:
        form = await request.json()
        return JSONResponse({"row": await web_jobs.push(Greet(form["name"]))})

    routes = [Route("/signup", signup, methods=["POST"])]
    app = server_spans(Starlette(routes=routes), traced.tracer)
    worker = start_worker({"NILO_TEST_STORE": url, "NILO_TEST_SPANS": str(spans)})
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            answer = await client.post("/signup", json={"name": "Ada"})
        assert answer.status_code == 200
        (run,) = await asyncio.to_thread(spans_in, spans, "run greet")
    finally:
        code, out = stop(worker)
        await table.close()
    assert code == 0, out

    http = traced.one("POST /signup")
    push = traced.one("push greet")
    assert parent_of(push) == ids(http)
    assert (run["kind"], run["trace_id"], run["parent_span_id"], run["links"]) == (
        "CONSUMER", f"{ids(http)[0]:032x}", f"{ids(push)[1]:016x}", []
    )  # fmt: skip
    assert run["message_id"] == str(answer.json()["row"])


def test_the_pages_example_shows_one_trace_from_the_request_to_the_run(tmp_path: Path) -> None:
    from tests.helpers import ROOT

    text = (ROOT / "docs" / "metrics.md").read_text()
    (sample,) = (
        block
        for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
        if "InMemorySpanExporter" in block
    )
    (tmp_path / "traced.py").write_text(sample)
    done = subprocess.run(
        [sys.executable, "traced.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"one trace: [0-9a-f]{32}\n", done.stdout), done.stdout
