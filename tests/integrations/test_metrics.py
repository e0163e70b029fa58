"""Metrics: the Prometheus endpoint's text, parsed by prometheus-client's own parser, after a
known sequence of pushes and runs on a fixed clock; the spans around push and run.

Durations measured in real time (a run, a claim) are asserted by their counts only; everything
on the claim's clock (how late a row was claimed) is asserted exactly.
"""

import contextlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

import nilo_job as job
from nilo_job.metrics import Metrics
from nilo_job.store.contract import Store

S = 1_000_000  # microseconds in a second


class Boom(Exception):
    pass


class Rejected(Exception):
    pass


failed_once: set[str] = set()


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry(times=1, backoff=job.Fixed(ms=1_000))
    final = (Rejected,)

    to: str

    def run(self) -> None:
        if self.to == "rejected":
            raise Rejected("no such address")
        if self.to.startswith("flaky") and self.to not in failed_once:
            failed_once.add(self.to)
            raise Boom("the provider is down")


@pytest.fixture(autouse=True)
def _forget_failures() -> None:
    failed_once.clear()


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(metrics: Metrics) -> tuple[int, str, Samples]:
    """GET the endpoint; the status, the content type and every sample but `_created`."""
    transport = httpx.ASGITransport(app=metrics.endpoint)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        response = await client.get("/metrics")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return response.status_code, response.headers["content-type"], samples


def of(samples: Samples, prefix: str) -> Samples:
    """The samples whose name starts with `prefix`."""
    return {key: value for key, value in samples.items() if key[0].startswith(prefix)}


def mail(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"kind": "mail", **labels}.items()))


@pytest.fixture
def measured(store: Store) -> tuple[job.Jobs, Metrics]:
    jobs = job.Jobs(kinds=[Mail], store=store)
    return jobs, Metrics(jobs)


async def test_the_endpoint_after_pushes_a_success_a_retry_and_a_death(
    measured: tuple[job.Jobs, Metrics], t: int
) -> None:
    jobs, metrics = measured
    await jobs.push(Mail(to="ok"), at=t)
    await jobs.push(Mail(to="flaky"), at=t)
    await jobs.push(Mail(to="rejected"), at=t)
    assert await jobs.push(Mail(to="later"), at=t + 10 * S, unique="u") is not None
    assert await jobs.push(Mail(to="later"), at=t + 10 * S, unique="u") is None

    # At t+2s: ok is done, flaky fails (retried at t+3s), rejected is dead at once.
    assert await jobs.drain_at(t + 2 * S) == 3
    # At t+4s: flaky's retry, a second late, is done.
    assert await jobs.drain_at(t + 4 * S) == 1

    status, content_type, samples = await scrape(metrics)
    assert status == 200
    assert content_type == CONTENT_TYPE_LATEST
    assert of(samples, "nilo_job_rows") == {
        ("nilo_job_rows", mail(state="queued")): 1.0,
        ("nilo_job_rows", mail(state="running")): 0.0,
        ("nilo_job_rows", mail(state="dead")): 1.0,
        ("nilo_job_rows", mail(state="done")): 2.0,
    }
    assert of(samples, "nilo_job_store_up") == {("nilo_job_store_up", ()): 1.0}
    assert of(samples, "nilo_job_pushed") == {("nilo_job_pushed_total", mail()): 4.0}
    assert of(samples, "nilo_job_runs") == {
        ("nilo_job_runs_total", mail(outcome="done")): 2.0,
        ("nilo_job_runs_total", mail(outcome="retrying")): 1.0,
        ("nilo_job_runs_total", mail(outcome="dead")): 1.0,
    }
    assert of(samples, "nilo_job_failures") == {
        ("nilo_job_failures_total", mail(error="Boom")): 1.0,
        ("nilo_job_failures_total", mail(error="Rejected")): 1.0,
    }
    assert of(samples, "nilo_job_lost_leases") == {}
    assert samples[("nilo_job_run_seconds_count", mail())] == 4.0
    assert samples[("nilo_job_run_seconds_bucket", mail(le="+Inf"))] == 4.0
    # Four claims that took a row and one that found none, in each of the two drains.
    assert samples[("nilo_job_claim_seconds_count", ())] == 6.0
    # Three rows claimed 2 s after they were due, and the retry 1 s after its run_at.
    delay = of(samples, "nilo_job_claim_delay_seconds")
    assert delay[("nilo_job_claim_delay_seconds_count", mail())] == 4.0
    assert delay[("nilo_job_claim_delay_seconds_sum", mail())] == 7.0
    assert delay[("nilo_job_claim_delay_seconds_bucket", mail(le="0.5"))] == 0.0
    assert delay[("nilo_job_claim_delay_seconds_bucket", mail(le="1.0"))] == 1.0
    assert delay[("nilo_job_claim_delay_seconds_bucket", mail(le="2.5"))] == 4.0


@dataclass
class Overtaken:
    """A run during which another worker takes its row, its lease having run out."""

    nilo_job = "overtaken"
    retry = job.Retry.NONE

    async def run(self, tick: job.Tick, queue: job.Jobs) -> None:
        later = tick.run_at + 10 * queue.lease_ms * 1_000
        (taken,) = await queue.store.claim(["overtaken"], later, later + S, 1)
        assert (taken.id, taken.attempts) == (tick.id, 2)


async def test_a_lost_lease_is_counted_and_not_a_run(t: int) -> None:
    jobs = job.Jobs(kinds=[Overtaken], store=job.Memory(), timeout_ms=1_000)
    metrics = Metrics(jobs)
    row = await jobs.push(Overtaken(), at=t)
    assert await jobs.drain_at(t) == 1
    assert await jobs.stats() == (0, 1, 0)  # the other worker holds it now
    assert row is not None

    _status, _type, samples = await scrape(metrics)
    lost = ("nilo_job_lost_leases_total", (("kind", "overtaken"),))
    assert of(samples, "nilo_job_lost_leases") == {lost: 1.0}
    assert of(samples, "nilo_job_runs") == {}


async def test_a_store_that_cannot_be_read_is_store_up_zero_and_no_rows() -> None:
    class Unreachable(job.Memory):
        async def counts(self) -> dict[tuple[str, str], int]:
            raise job.StoreUnavailable("PostgreSQL: connection refused")

    metrics = Metrics(job.Jobs(kinds=[Mail], store=Unreachable()))
    status, _type, samples = await scrape(metrics)
    assert status == 200
    assert of(samples, "nilo_job_store_up") == {("nilo_job_store_up", ()): 0.0}
    assert of(samples, "nilo_job_rows") == {}


async def test_the_endpoint_answers_get_and_head_only() -> None:
    metrics = Metrics(job.Jobs(kinds=[Mail], store=job.Memory()))
    transport = httpx.ASGITransport(app=metrics.endpoint)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        head = await client.head("/")
        post = await client.post("/")
    assert (head.status_code, head.content) == (200, b"")
    assert int(head.headers["content-length"]) > 0
    assert (post.status_code, post.headers["allow"]) == (405, "GET, HEAD")


async def test_exposition_and_a_registry_of_your_own() -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    metrics = Metrics(jobs, registry=registry)
    await jobs.push(Mail(to="ok"))
    body, content_type = await metrics.exposition()
    assert content_type.startswith("text/plain")
    assert b'nilo_job_pushed_total{kind="mail"} 1.0' in body.splitlines()
    assert registry.get_sample_value("nilo_job_rows", {"kind": "mail", "state": "queued"}) == 1.0


def test_a_queue_is_measured_once() -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    Metrics(jobs)
    with pytest.raises(job.Refusal, match="measured already: build one Metrics per queue"):
        Metrics(jobs)


async def test_measuring_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    jobs = job.Jobs(kinds=[Mail], store=table)
    Metrics(jobs)
    try:
        assert jobs.store is table
        await table.create_missing()
        assert await jobs.ready()
        row = await jobs.push(Mail(to="x"))
        assert row is not None
        assert await jobs.cancel(row)
        assert await jobs.stats() == (0, 0, 0)
    finally:
        await table.close()


async def test_spans_around_push_and_run(t: int) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    Metrics(jobs, tracer_provider=provider)
    try:
        ok = await jobs.push(Mail(to="ok"), at=t)
        bad = await jobs.push(Mail(to="rejected"), at=t)
        assert await jobs.push(Mail(to="u"), at=t + S, unique="u") is not None
        assert await jobs.push(Mail(to="u"), at=t + S, unique="u") is None
        assert await jobs.drain_at(t) == 2
        spans = exporter.get_finished_spans()
    finally:
        provider.shutdown()

    pushes = [span for span in spans if span.name == "push mail"]
    assert [(span.kind, dict(span.attributes or {})) for span in pushes] == [
        (SpanKind.PRODUCER, push_attributes(message_id=str(ok))),
        (SpanKind.PRODUCER, push_attributes(message_id=str(bad))),
        (SpanKind.PRODUCER, push_attributes(message_id=str(bad + 1))),
        (SpanKind.PRODUCER, {**push_attributes(), "nilo_job.unique_taken": True}),
    ]
    runs = [span for span in spans if span.name == "run mail"]
    assert [
        (span.kind, span.status.status_code, span.status.description, dict(span.attributes or {}))
        for span in runs
    ] == [
        (SpanKind.CONSUMER, StatusCode.UNSET, None, run_attributes(ok)),
        (
            SpanKind.CONSUMER,
            StatusCode.ERROR,
            "Rejected",
            {**run_attributes(bad), "error.type": "Rejected"},
        ),
    ]
    assert len(spans) == 6


def push_attributes(message_id: str | None = None) -> dict[str, object]:
    found: dict[str, object] = {
        "messaging.system": "nilo_job",
        "messaging.operation.type": "send",
        "messaging.destination.name": "mail",
    }
    if message_id is not None:
        found["messaging.message.id"] = message_id
    return found


def run_attributes(row: int) -> dict[str, object]:
    return {
        "messaging.system": "nilo_job",
        "messaging.operation.type": "process",
        "messaging.destination.name": "mail",
        "messaging.message.id": str(row),
        "nilo_job.attempt": 1,
    }


providers: list[TracerProvider] = []


@dataclass
class Traced:
    """A sync run (in a thread of its own) that makes a span of its own."""

    nilo_job = "traced"
    retry = job.Retry.NONE

    def run(self) -> None:
        with providers[0].get_tracer("app").start_as_current_span("inside"):
            pass


async def test_a_sync_runs_own_span_is_a_child_of_the_run_span(t: int) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    providers[:] = [provider]
    jobs = job.Jobs(kinds=[Traced], store=job.Memory())
    Metrics(jobs, tracer_provider=provider)
    try:
        await jobs.push(Traced(), at=t)
        assert await jobs.drain_at(t) == 1
        spans = {span.name: span for span in exporter.get_finished_spans()}
    finally:
        provider.shutdown()
    inside, run = spans["inside"], spans["run traced"]
    assert inside.parent is not None
    assert run.context is not None
    assert inside.parent.span_id == run.context.span_id


async def test_queue_latency_and_a_paused_kind_are_gauges_of_the_table(
    measured: tuple[job.Jobs, Metrics],
) -> None:
    jobs, metrics = measured
    _status, _type, samples = await scrape(metrics)
    assert of(samples, "nilo_job_oldest_due") == {("nilo_job_oldest_due_seconds", mail()): 0.0}
    assert of(samples, "nilo_job_paused") == {("nilo_job_paused", mail()): 0.0}
    # A row due 90 s ago that nobody claimed (the kind is paused): 90 s of latency.
    await jobs.push(Mail(to="waiting"), at=job.now_us() - 90 * S)
    assert await jobs.pause("mail") is True
    _status, _type, samples = await scrape(metrics)
    waited = samples[("nilo_job_oldest_due_seconds", mail())]
    assert 90.0 <= waited < 100.0
    assert of(samples, "nilo_job_paused") == {("nilo_job_paused", mail()): 1.0}
    assert await jobs.drain() == 0  # paused: nothing runs
    assert await jobs.resume("mail") is True
    assert await jobs.drain() == 1
    _status, _type, samples = await scrape(metrics)
    assert of(samples, "nilo_job_oldest_due") == {("nilo_job_oldest_due_seconds", mail()): 0.0}
    assert of(samples, "nilo_job_paused") == {("nilo_job_paused", mail()): 0.0}


async def test_rows_another_program_wrote_are_counted_under_a_readable_kind(
    tmp_path: Path,
) -> None:
    path = tmp_path / "q.db"
    table = job.Table(f"sqlite:///{path}")
    await table.create_missing()
    jobs = job.Jobs(kinds=[Mail], store=table)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        for kind, run_at in (
            ("CAST(x'6dff' AS TEXT)", "1"),  # not UTF-8
            ("x'6dff'", "2"),  # the same bytes, as a BLOB
            ("x'6d6f'", "3"),  # a BLOB of valid UTF-8: "mo"
            ("'mail'", "'tomorrow'"),  # a due time that is not a number
        ):
            conn.execute(
                "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts) "
                f"VALUES ({kind}, '{{}}', 'queued', {run_at}, 0)"
            )
    metrics = Metrics(jobs)
    body, _ = await metrics.exposition()
    await table.close()
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert [s.value for s in families["nilo_job_store_up"].samples] == [1.0]
    queued = {
        s.labels["kind"]: s.value
        for s in families["nilo_job_rows"].samples
        if s.labels["state"] == "queued"
    }
    assert queued == {"m\\xff": 2.0, "mo": 1.0, "mail": 1.0}
    waited = {s.labels["kind"] for s in families["nilo_job_oldest_due_seconds"].samples}
    assert waited == {"m\\xff", "mo", "mail"}
