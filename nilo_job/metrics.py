"""Prometheus metrics and OpenTelemetry spans for a queue: `Metrics(jobs)` and its endpoint.

    from nilo_job.metrics import Metrics

    metrics = Metrics(jobs)                      # before serve(); one per queue
    app.mount("/metrics", metrics.endpoint)      # any ASGI app; or: await metrics.exposition()

What is measured (times in seconds):

    nilo_job_rows{kind,state}            gauge      rows in the table now, read at each scrape
    nilo_job_store_up                    gauge      1 when that read worked, else 0
    nilo_job_pushed_total{kind}          counter    rows this process inserted (push, push_in,
                                                    seeding); a unique key already taken is not
    nilo_job_runs_total{kind,outcome}    counter    ends this process wrote: done, retrying,
                                                    dead, released (given back at shutdown)
    nilo_job_failures_total{kind,error}  counter    failed attempts, by the exception's class name
    nilo_job_run_seconds{kind}           histogram  from the claim to the end being written
    nilo_job_claim_seconds               histogram  how long one claim took against the store
    nilo_job_claim_delay_seconds{kind}   histogram  how late a row was claimed: the claim's
                                                    clock minus the row's run_at
    nilo_job_lost_leases_total{kind}     counter    ends not written: another worker had the row

The queue has no event hooks yet, so `Metrics` puts a proxy in front of the queue's store
(`jobs.store`): the proxy implements the store contract, passes every call through, and measures
on the way. A run is the time between the claim that took a row and the `finish` that ended it,
matched by (row id, attempt); its outcome and error name are read off the end (`Done`,
`Retrying`, `Died`, `Released`). See docs/metrics.md for what a proxy cannot tell apart and the
hook that would.

OpenTelemetry (optional, `opentelemetry-api`): every push is a PRODUCER span `push <kind>`,
current while the row is written; every run is a CONSUMER span `run <kind>` from the claim to the
end, with status ERROR and the error's name when the attempt failed. Spans record only when the
application set a tracer provider (or passed one); otherwise the API's no-op tracer costs
next to nothing.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from . import JobError, Jobs, Refusal, Stats
from .store.contract import (
    ROW_STATES,
    Claimed,
    DeadRow,
    Died,
    Done,
    End,
    NewRow,
    Released,
    Retrying,
    RowView,
    Store,
)

try:
    from opentelemetry import trace as otel
except ImportError:  # the metrics extra brings it; without it there are no spans
    otel = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ["BUCKETS_S", "Metrics"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

log = logging.getLogger("nilo_job")

BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
             900.0, 3_600.0)  # fmt: skip
"""The histograms' bucket bounds, in seconds: a claim takes milliseconds, a run or a wait
minutes."""

_MAX_OPEN_RUNS = 100_000  # claims remembered until their end; past it the oldest are forgotten


@dataclass(slots=True)
class _Open:
    """A claimed row whose end this process has not written yet."""

    kind: str
    started: float  # time.perf_counter() at the claim
    span: Span | None


class Metrics:
    """The metrics of one queue, in a Prometheus registry, and its spans.

    Building it puts a measuring proxy in front of `jobs.store`, so build it before `serve()`
    (or a worker process) starts, and once per queue.

    Args:
        jobs: the queue to measure.
        registry: where the metrics are registered; a registry of its own by default (pass
            `prometheus_client.REGISTRY` to join the process-wide one).
        tracer_provider: the OpenTelemetry provider for the spans; the global one by default.
        buckets_s: the histograms' bucket bounds, in seconds.

    Raises:
        Refusal: the queue is measured already.
        ValueError: the registry already holds metrics of these names (prometheus-client's
            message).
    """

    def __init__(
        self,
        jobs: Jobs,
        *,
        registry: CollectorRegistry | None = None,
        tracer_provider: TracerProvider | None = None,
        buckets_s: Sequence[float] = BUCKETS_S,
    ) -> None:
        if isinstance(jobs.store, _MeteredStore):
            raise Refusal(
                "this job.Jobs is measured already: build one Metrics per queue and share it"
            )
        self.jobs = jobs
        self.registry = CollectorRegistry() if registry is None else registry
        self.pushed = Counter(
            "nilo_job_pushed",
            "Rows this process inserted, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.runs = Counter(
            "nilo_job_runs",
            "Runs this process ended, by kind and outcome (done, retrying, dead, released).",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self.failures = Counter(
            "nilo_job_failures",
            "Failed attempts, by kind and the exception's class name.",
            ["kind", "error"],
            registry=self.registry,
        )
        self.lost_leases = Counter(
            "nilo_job_lost_leases",
            "Ends not written because another worker had taken the row, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.run_seconds = Histogram(
            "nilo_job_run_seconds",
            "Seconds from the claim of a row to the end of its run being written, by kind.",
            ["kind"],
            buckets=buckets_s,
            registry=self.registry,
        )
        self.claim_seconds = Histogram(
            "nilo_job_claim_seconds",
            "Seconds one claim took against the store.",
            buckets=buckets_s,
            registry=self.registry,
        )
        self.claim_delay_seconds = Histogram(
            "nilo_job_claim_delay_seconds",
            "Seconds from when a row was due (run_at) to its claim, on the claim's clock, by kind.",
            ["kind"],
            buckets=buckets_s,
            registry=self.registry,
        )
        self._rows = _Rows([kind.name for kind in jobs.kinds])
        self.registry.register(self._rows)
        self._tracer: Tracer | None = (
            None if otel is None else otel.get_tracer("nilo_job", tracer_provider=tracer_provider)
        )
        self.store = _MeteredStore(jobs.store, self)
        jobs.store = self.store

    def __repr__(self) -> str:
        return f"Metrics({self.jobs!r})"

    # ------------------------------------------------------------------------------ scrape

    async def refresh(self) -> None:
        """Read the rows by kind and state from the store, for the next scrape.

        A store that cannot be read leaves `nilo_job_store_up` at 0 and no `nilo_job_rows`
        (stale counts would be worse than none); it is logged, not raised.
        """
        try:
            counts = await self.store.counts()
        except (JobError, OSError) as error:
            log.warning("metrics: the store cannot be read: %s", error)
            self._rows.counts = None
        else:
            self._rows.counts = counts

    async def exposition(self) -> tuple[bytes, str]:
        """`refresh`, then the registry in Prometheus's text format, and its content type."""
        await self.refresh()
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    async def endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An ASGI application answering GET (and HEAD) with `exposition()`; 405 otherwise."""
        if scope["type"] == "lifespan":  # served on its own: nothing to start or stop
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["method"] not in ("GET", "HEAD"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 405,
                    "headers": [(b"allow", b"GET, HEAD"), (b"content-length", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        body, content_type = await self.exposition()
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body}
        )

    # ----------------------------------------------------------------------------- spans

    def push_span(self, rows: Sequence[NewRow]) -> contextlib.AbstractContextManager[Span | None]:
        """The span current while `rows` are written: `push <kind>`, PRODUCER."""
        if self._tracer is None or not rows:
            return contextlib.nullcontext()
        kinds = sorted({row.kind for row in rows})
        attributes: dict[str, str | int] = {
            "messaging.system": "nilo_job",
            "messaging.operation.type": "send",
            "messaging.destination.name": ",".join(kinds),
        }
        if len(rows) > 1:
            attributes["messaging.batch.message_count"] = len(rows)
        name = f"push {kinds[0]}" if len(kinds) == 1 else "push"
        return self._tracer.start_as_current_span(
            name, kind=otel.SpanKind.PRODUCER, attributes=attributes
        )

    def run_span(self, row: Claimed) -> Span | None:
        """The span of one run, started at its claim: `run <kind>`, CONSUMER."""
        if self._tracer is None:
            return None
        return self._tracer.start_span(
            f"run {row.kind}",
            kind=otel.SpanKind.CONSUMER,
            attributes={
                "messaging.system": "nilo_job",
                "messaging.operation.type": "process",
                "messaging.destination.name": row.kind,
                "messaging.message.id": str(row.id),
                "nilo_job.attempt": row.attempts,
            },
        )


class _Rows:
    """The `nilo_job_rows` and `nilo_job_store_up` gauges, from the last `refresh`.

    Every kind of the queue has a series in every state, zero when it has no rows, so an alert
    on `nilo_job_rows{state="dead"} > 0` sees the series before the first dead row.
    """

    def __init__(self, kinds: Sequence[str]) -> None:
        self.kinds = tuple(kinds)
        self.counts: dict[tuple[str, str], int] | None = None

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        rows = GaugeMetricFamily(
            "nilo_job_rows", "Rows in the table now, by kind and state.", labels=["kind", "state"]
        )
        up = GaugeMetricFamily("nilo_job_store_up", "1 when the last read of the rows worked.")
        return rows, up

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        rows, up = self._families()
        counts = self.counts
        up.add_metric([], 0 if counts is None else 1)
        if counts is not None:
            every = {(kind, state): 0 for kind in self.kinds for state in ROW_STATES}
            every.update(counts)
            for (kind, state), n in sorted(every.items()):
                rows.add_metric([kind, state], n)
        return [rows, up]


class _MeteredStore:
    """The queue's store with measuring in front: every method of the contract, passed on.

    `wrapped` is the store underneath (the dashboard reads through it); any other attribute
    (`ddl`, `path`, ...) is the wrapped store's.
    """

    def __init__(self, wrapped: Store, metrics: Metrics) -> None:
        self.wrapped = wrapped
        self._metrics = metrics
        self._open: dict[tuple[int, int], _Open] = {}

    def __repr__(self) -> str:
        return repr(self.wrapped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    async def open(self) -> None:
        await self.wrapped.open()

    async def close(self) -> None:
        await self.wrapped.close()

    async def ping(self) -> None:
        await self.wrapped.ping()

    async def now_us(self) -> int | None:
        return await self.wrapped.now_us()

    async def watch(self, wake: Callable[[], None]) -> None:
        await self.wrapped.watch(wake)

    async def create_missing(self) -> None:
        await self.wrapped.create_missing()

    async def check(self) -> None:
        await self.wrapped.check()

    def _pushed(self, rows: Sequence[NewRow], ids: Sequence[int | None]) -> None:
        for row, row_id in zip(rows, ids, strict=True):
            if row_id is not None:
                self._metrics.pushed.labels(row.kind).inc()

    async def push(self, rows: Sequence[NewRow]) -> list[int | None]:
        with self._metrics.push_span(rows) as span:
            ids = await self.wrapped.push(rows)
            _mark_pushed(span, ids)
        self._pushed(rows, ids)
        return ids

    async def push_in(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        with self._metrics.push_span(rows) as span:
            ids = await self.wrapped.push_in(tx, rows)
            _mark_pushed(span, ids)
        self._pushed(rows, ids)
        return ids

    async def claim(
        self, kinds: Sequence[str], now_us: int, lease_until_us: int, limit: int
    ) -> list[Claimed]:
        metrics = self._metrics
        began = time.perf_counter()
        rows = await self.wrapped.claim(kinds, now_us, lease_until_us, limit)
        claimed = time.perf_counter()
        metrics.claim_seconds.observe(claimed - began)
        for row in rows:
            metrics.claim_delay_seconds.labels(row.kind).observe(
                max(now_us - row.run_at, 0) / 1_000_000
            )
            while len(self._open) >= _MAX_OPEN_RUNS:
                forgotten = self._open.pop(next(iter(self._open)))
                if forgotten.span is not None:
                    forgotten.span.end()
            self._open[(row.id, row.attempts)] = _Open(row.kind, claimed, metrics.run_span(row))
        return rows

    async def finish(self, ends: Sequence[End]) -> list[bool]:
        ended = time.perf_counter()
        answers = await self.wrapped.finish(ends)
        for end, applied in zip(ends, answers, strict=True):
            run = self._open.pop((end.id, end.attempts), None)
            if run is not None:
                self._ended(run, end, applied, ended)
        return answers

    def _ended(self, run: _Open, end: End, applied: bool, ended: float) -> None:
        metrics = self._metrics
        if not applied:
            metrics.lost_leases.labels(run.kind).inc()
            if run.span is not None:
                run.span.set_attribute("nilo_job.outcome", "lost_lease")
                run.span.end()
            return
        error: str | None = None
        if isinstance(end, Done):
            outcome = "done"
        elif isinstance(end, Retrying):
            outcome, error = "retrying", end.error
        elif isinstance(end, Died):
            outcome, error = "dead", end.error
        else:
            assert isinstance(end, Released)
            outcome = "released"
        metrics.runs.labels(run.kind, outcome).inc()
        metrics.run_seconds.labels(run.kind).observe(ended - run.started)
        if error is not None:
            metrics.failures.labels(run.kind, error).inc()
        if run.span is not None:
            run.span.set_attribute("nilo_job.outcome", outcome)
            if error is not None:
                run.span.set_attribute("error.type", error)
                run.span.set_status(otel.Status(otel.StatusCode.ERROR, error))
            run.span.end()

    async def hand_on(self, row_id: int, attempts: int, then: NewRow) -> bool:
        return await self.wrapped.hand_on(row_id, attempts, then)

    async def cancel(self, row_id: int) -> bool:
        return await self.wrapped.cancel(row_id)

    async def stats(self) -> Stats:
        return await self.wrapped.stats()

    async def dead_ones(self, limit: int) -> list[DeadRow]:
        return await self.wrapped.dead_ones(limit)

    async def rows(self, state: str, limit: int) -> list[RowView]:
        return await self.wrapped.rows(state, limit)

    async def counts(self) -> dict[tuple[str, str], int]:
        return await self.wrapped.counts()

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]:
        return await self.wrapped.holding(key, kinds)

    async def retry_dead(self, row_id: int, now_us: int) -> bool:
        return await self.wrapped.retry_dead(row_id, now_us)


def _mark_pushed(span: Span | None, ids: Sequence[int | None]) -> None:
    """Put the new row's id (or that its unique key was taken) on a one-row push's span."""
    if span is None or len(ids) != 1:
        return
    if ids[0] is None:
        span.set_attribute("nilo_job.unique_taken", True)
    else:
        span.set_attribute("messaging.message.id", str(ids[0]))
