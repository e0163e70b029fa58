"""A queue whose `nilo-job worker` process traces its runs (`tests.helpers.tracing_kinds:jobs`).

Its OpenTelemetry provider writes every finished span as one JSON line to the file
`NILO_TEST_SPANS` names, so that a test can read the spans of another process. The store comes
from `NILO_TEST_STORE`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import nilo_job as job
from nilo_job.metrics import Metrics

STORE = os.environ.get("NILO_TEST_STORE", "sqlite:///:memory:")
SPANS = os.environ.get("NILO_TEST_SPANS")


def span_line(span: ReadableSpan) -> dict[str, object]:
    """What a test asserts of a span: its name, kind, ids (hex), parent's id, row id and
    links."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "message_id": (span.attributes or {}).get("messaging.message.id"),
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
    }


class JsonLines(SpanExporter):
    """Appends each finished span to `path` as a line of JSON (`span_line`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a") as out:
            for span in spans:
                out.write(json.dumps(span_line(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


@dataclass
class Greet:
    """Greets a new user; the test reads its run's span."""

    nilo_job = "greet"
    retry = job.Retry.NONE

    name: str

    def run(self) -> None:
        return None


provider = TracerProvider()
if SPANS:
    provider.add_span_processor(SimpleSpanProcessor(JsonLines(Path(SPANS))))

jobs = job.Jobs(kinds=[Greet], store=job.Table(STORE), poll_ms=50)
metrics = Metrics(jobs, tracer_provider=provider)
