"""One trace from the push to the run: the W3C trace context a row carries (OpenTelemetry).

A push records on its row the trace context current at the call, in the W3C format that
OpenTelemetry's `TraceContextTextMapPropagator` writes: the JSON of its carrier,
`{"traceparent": "00-…-…-01"}`, with `"tracestate"` when the span has one. Under
`nilo_job.metrics.Metrics` the current span is the push's own `push <kind>` span; otherwise it
is whatever span the application made current (a web request's). Without OpenTelemetry, or
with no span current, the row's `trace` is None (NULL), and the push costs one check.

The run's span reads it back (`run_context`): the first attempt's span is a child of the
recorded span; a later attempt's is a root of its own, linked to it; a row without one (a
schedule's tick, a row pushed outside any span) makes a root.

OpenTelemetry is imported at the first push, never at `import nilo_job`: the core imports no
edge at import time, and a process without the package never pays for it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link

_propagator: Any = None  # TraceContextTextMapPropagator, once imported
_absent = False  # OpenTelemetry could not be imported: no trace is ever recorded


def _the_propagator() -> Any:
    """OpenTelemetry's W3C trace-context propagator, or None when the package is absent."""
    global _propagator, _absent
    if _propagator is None and not _absent:
        try:
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError:
            _absent = True
        else:
            _propagator = TraceContextTextMapPropagator()
    return _propagator


def current() -> str | None:
    """The trace context of the span current here, as a row's `trace` keeps it (the JSON of a
    W3C carrier); None without OpenTelemetry or without a valid span context current."""
    propagator = _the_propagator()
    if propagator is None:
        return None
    carrier: dict[str, str] = {}
    propagator.inject(carrier)
    if "traceparent" not in carrier:
        return None
    return json.dumps(carrier, separators=(",", ":"))


def run_context(trace: str | None, attempts: int) -> tuple[Context, list[Link]]:
    """The parent context and the links of a run's span, for a row whose push recorded `trace`
    (None: none), at its `attempts`-th attempt (1 the first time; a snooze spends none).

    The first attempt continues the recorded trace: its span's parent is the push's span.
    A later attempt starts a trace of its own, linked to the push's span. A row without a
    readable trace starts one of its own, linked to nothing. Never raises: a `trace` that is
    not one this module wrote (another program's row) counts as none.
    """
    from opentelemetry import trace as otel
    from opentelemetry.context import Context

    root = Context()  # an empty context: the span is a root, whatever is current here
    propagator = _the_propagator()
    if trace is None or propagator is None:
        return root, []
    try:
        carrier = json.loads(trace)
    except ValueError:
        return root, []
    if not isinstance(carrier, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in carrier.items()
    ):
        return root, []
    pushed = propagator.extract(carrier, context=root)
    span = otel.get_current_span(pushed).get_span_context()
    if not span.is_valid:
        return root, []
    if attempts <= 1:
        return pushed, []
    return root, [otel.Link(span)]
