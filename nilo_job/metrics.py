"""Prometheus metrics and OpenTelemetry spans for a queue: `Metrics(jobs)` and its endpoint.

    from nilo_job.metrics import Metrics

    metrics = Metrics(jobs)                      # before serve(); one per queue
    app.mount("/metrics", metrics.endpoint)      # any ASGI app; or: await metrics.exposition()

What is measured (times in seconds):

    nilo_job_rows{kind,state}            gauge      rows in the table now, read at each scrape
    nilo_job_store_up                    gauge      1 when that read worked, else 0
    nilo_job_oldest_due_seconds{kind}    gauge      how long the oldest due row has waited (queue
                                                    latency; 0 with none waiting), at each scrape
    nilo_job_paused{kind}                gauge      1 while the kind is paused, at each scrape
    nilo_job_workers_alive{kind}         gauge      serving processes of the worker registry
                                                    that run the kind and are alive (not lost),
                                                    at each scrape
    nilo_job_cleanup_held_back_seconds   gauge      how long the oldest transaction that holds
                                                    back the cleanup of the queue's tables has
                                                    lasted (0: none), at each scrape
    nilo_job_pushed_total{kind}          counter    rows this process inserted (push, push_in,
                                                    seeding); a unique key already taken is not
    nilo_job_runs_total{kind,outcome}    counter    ends this process wrote: done, retrying,
                                                    dead, released (given back at shutdown),
                                                    dropped (a missed tick), snoozed
    nilo_job_failures_total{kind,error}  counter    failed attempts, by the exception's class name
    nilo_job_run_seconds{kind}           histogram  how long each call of run took
    nilo_job_claim_seconds               histogram  how long one claim took against the store
    nilo_job_claim_delay_seconds{kind}   histogram  how late a row was claimed: the claim's
                                                    clock minus the row's run_at
    nilo_job_lost_leases_total{kind}     counter    ends not written: another worker had the row
    nilo_job_retaken_total{kind}         counter    rows this process took back after the lease
                                                    of the worker that held them ran out

`Metrics` is an observer of the queue (`jobs.observe(metrics)`): the queue tells
it of every push, claim, run and end, and it counts.

OpenTelemetry (optional, `opentelemetry-api`): every push is a PRODUCER span `push <kind>`,
current while the row is written; every run is a CONSUMER span `run <kind>`, current while `run`
is called (so the run's own spans are its children), with status ERROR and the exception
recorded when the attempt failed. Spans record only when the
application set a tracer provider (or passed one); otherwise the API's no-op tracer costs
next to nothing.

One trace from the push to the run: the push records its span's W3C trace context on the row
(`trace`), and the run's span, in whichever process claims the row, is that span's child on
the first attempt, and a root linked to it on later attempts. A row without one (a schedule's
tick, a push outside any span) makes a root (`nilo_job._watch.tracing`).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from . import JobError, Jobs, Refusal
from ._base.clock import now_us as wall_us
from ._base.values import Tick
from ._watch.observers import Outcome
from ._watch.tracing import run_context
from ._worker.beat import is_alive
from .store.contract import ROW_STATES, Claimed

try:
    from opentelemetry import trace as otel
except ImportError:  # the metrics extra brings it; without it there are no spans
    otel = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer, TracerProvider

__all__ = ["BUCKETS_S", "Metrics"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

log = logging.getLogger("nilo_job")

BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
             900.0, 3_600.0)  # fmt: skip
"""The histograms' bucket bounds, in seconds: a claim takes milliseconds, a run or a wait
minutes."""


_MEASURED: weakref.WeakSet[Jobs] = weakref.WeakSet()  # the queues a Metrics observes


class Metrics:
    """The metrics of one queue, in a Prometheus registry, and its spans.

    Building it adds it to the queue's observers (`jobs.observe`); build it before `serve()`
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
        if jobs in _MEASURED:
            raise Refusal(
                "this job.Jobs is measured already: build one Metrics per queue and share it"
            )
        self.jobs = jobs
        self.registry = CollectorRegistry() if registry is None else registry
        self.pushed_total = Counter(
            "nilo_job_pushed",
            "Rows this process inserted, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.runs = Counter(
            "nilo_job_runs",
            "Rows this process ended, by kind and outcome (done, retrying, dead, released, "
            "dropped, snoozed).",
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
        self.retaken = Counter(
            "nilo_job_retaken",
            "Rows this process claimed back after the lease of the worker that held them ran "
            "out, by kind.",
            ["kind"],
            registry=self.registry,
        )
        # A renamed kind's rows of an old name are counted under its name.
        self._renamed = {alias: kind.name for kind in jobs.kinds for alias in kind.aliases}
        self.run_seconds = Histogram(
            "nilo_job_run_seconds",
            "Seconds one call of run took, by kind.",
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
        jobs.observe(self)
        _MEASURED.add(jobs)

    def __repr__(self) -> str:
        return f"Metrics({self.jobs!r})"

    # ------------------------------------------------------------------------------ scrape

    async def refresh(self) -> None:
        """Read the rows by kind and state from the store, for the next scrape.

        A store that cannot be read leaves `nilo_job_store_up` at 0 and no `nilo_job_rows`
        (stale counts would be worse than none); it is logged, not raised. So is any other
        failure of the reads (what a row another program wrote could cause), with its
        traceback: a scrape never fails.
        """
        store = self.jobs.store
        try:
            now = wall_us()
            counts = await store.counts()
            oldest = await store.oldest_due(now)
            paused = await store.paused()
            entries = await store.workers()
            registry_now = (await store.now_us()) or wall_us()  # the beats' clock
        except (JobError, OSError) as error:
            log.warning("metrics: the store cannot be read: %s", error)
            self._rows.counts = None
        except Exception as error:
            log.warning("metrics: the store cannot be read: %r", error, exc_info=True)
            self._rows.counts = None
        else:
            self._rows.counts = counts
            self._rows.waited_s = {kind: max(0, now - at) / 1e6 for kind, at in oldest.items()}
            self._rows.paused = set(paused)
            alive: dict[str, int] = {}
            for entry in entries:
                if is_alive(entry, registry_now):
                    for kind in entry.kinds:
                        alive[kind] = alive.get(kind, 0) + 1
            self._rows.alive = alive
        try:
            held = await store.held_back()
        except Exception as error:  # a role that may not look: the rest stands
            log.debug("metrics: cannot look at what holds back the cleanup: %r", error)
            held = None
        self._rows.held_s = 0.0 if held is None else held.age_s

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

    # -------------------------------------------------------------------------- observer

    def pushing(self, kind: str) -> contextlib.AbstractContextManager[Any]:
        """The span current while a push writes: `push <kind>`, PRODUCER."""
        if self._tracer is None:
            return contextlib.nullcontext()
        return self._tracer.start_as_current_span(
            f"push {kind}",
            kind=otel.SpanKind.PRODUCER,
            attributes={
                "messaging.system": "nilo_job",
                "messaging.operation.type": "send",
                "messaging.destination.name": kind,
            },
        )

    def pushed(self, kind: str, row_id: int | None) -> None:
        """Count a row written; mark the push's span with its id (or the key taken)."""
        span = otel.get_current_span() if otel is not None else None
        if row_id is None:
            if span is not None and span.is_recording():
                span.set_attribute("nilo_job.unique_taken", True)
            return
        self.pushed_total.labels(kind).inc()
        if span is not None and span.is_recording():
            span.set_attribute("messaging.message.id", str(row_id))

    def claimed(self, rows: Sequence[Claimed], now_us: int, seconds: float) -> None:
        """Time the claim, and how late each row it took was, on the claim's clock; count the
        rows it took back after a lease ran out."""
        self.claim_seconds.observe(seconds)
        for row in rows:
            self.claim_delay_seconds.labels(row.kind).observe(
                max(now_us - row.run_at, 0) / 1_000_000
            )
            if row.retaken_from is not None:
                self.retaken.labels(self._renamed.get(row.kind, row.kind)).inc()

    def running(
        self, kind: str, tick: Tick, trace: str | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """The span current while `run` is called: `run <kind>`, CONSUMER; a failure sets its
        status to ERROR with the exception's class name. `trace` is the context the row's push
        recorded: the first attempt's span is its child, a later attempt's a root linked to it;
        without one the span is a root."""
        if self._tracer is None:
            return contextlib.nullcontext()
        return self._run_span(self._tracer, kind, tick, trace)

    @staticmethod
    @contextlib.contextmanager
    def _run_span(tracer: Tracer, kind: str, tick: Tick, trace: str | None) -> Iterator[None]:
        attributes: dict[str, str | int] = {
            "messaging.system": "nilo_job",
            "messaging.operation.type": "process",
            "messaging.destination.name": kind,
            "messaging.message.id": str(tick.id),
            "nilo_job.attempt": tick.attempts,
        }
        parent, links = run_context(trace, tick.attempts)
        with tracer.start_as_current_span(
            f"run {kind}",
            context=parent,
            kind=otel.SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except BaseException as error:
                name = type(error).__name__
                span.set_attribute("error.type", name)
                span.set_status(otel.Status(otel.StatusCode.ERROR, name))
                raise

    def ended(self, kind: str, outcome: Outcome, error: str | None, seconds: float) -> None:
        """Count the end by outcome and error name, and time the run."""
        if outcome == "lost":
            self.lost_leases.labels(kind).inc()
            return
        self.runs.labels(kind, outcome).inc()
        if outcome in ("done", "retrying", "dead", "released", "snoozed") and seconds > 0:
            self.run_seconds.labels(kind).observe(seconds)
        if error is not None:
            self.failures.labels(kind, error).inc()


class _Rows:
    """The `nilo_job_rows` and `nilo_job_store_up` gauges, from the last `refresh`.

    Every kind of the queue has a series in every state, zero when it has no rows, so an alert
    on `nilo_job_rows{state="dead"} > 0` sees the series before the first dead row.
    """

    def __init__(self, kinds: Sequence[str]) -> None:
        self.kinds = tuple(kinds)
        self.counts: dict[tuple[str, str], int] | None = None
        self.waited_s: dict[str, float] = {}
        self.paused: set[str] = set()
        self.alive: dict[str, int] = {}  # live serving processes per kind
        self.held_s = 0.0  # how long the cleanup of the tables has been held back

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        rows = GaugeMetricFamily(
            "nilo_job_rows", "Rows in the table now, by kind and state.", labels=["kind", "state"]
        )
        up = GaugeMetricFamily("nilo_job_store_up", "1 when the last read of the rows worked.")
        waited = GaugeMetricFamily(
            "nilo_job_oldest_due_seconds",
            "How long the oldest due row of the kind has waited (queue latency).",
            labels=["kind"],
        )
        paused = GaugeMetricFamily(
            "nilo_job_paused", "1 while the kind is paused.", labels=["kind"]
        )
        alive = GaugeMetricFamily(
            "nilo_job_workers_alive",
            "Serving processes of the worker registry that run the kind and are alive.",
            labels=["kind"],
        )
        held = GaugeMetricFamily(
            "nilo_job_cleanup_held_back_seconds",
            "How long the oldest transaction holding back the cleanup of the queue's tables "
            "has lasted (0: none).",
        )
        return rows, up, waited, paused, alive, held

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        rows, up, waited, paused, alive, held = self._families()
        counts = self.counts
        up.add_metric([], 0 if counts is None else 1)
        if counts is None:
            return [rows, up]
        every = {(kind, state): 0 for kind in self.kinds for state in ROW_STATES}
        every.update(counts)
        for (kind, state), n in sorted(every.items()):
            rows.add_metric([kind, state], n)
        for kind in sorted({*self.kinds, *self.waited_s}):
            waited.add_metric([kind], self.waited_s.get(kind, 0.0))
            paused.add_metric([kind], 1 if kind in self.paused else 0)
        for kind in sorted({*self.kinds, *self.alive}):
            alive.add_metric([kind], self.alive.get(kind, 0))
        held.add_metric([], self.held_s)
        return [rows, up, waited, paused, alive, held]
