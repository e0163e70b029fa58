"""Observers: how metrics and tracing see the queue without the queue knowing about them.

`jobs.observe(observer)` adds one; the queue calls it around each push and run, after each
claim, and at each end (`Observers` holds a queue's observers and makes those calls). The core
imports no metrics or tracing library: `nilo_job.metrics` (Prometheus, OpenTelemetry) is an
observer like any other. With no observer the queue pays one empty-tuple check per event.

`running` is handed the trace context the row's push recorded (`_watch.tracing`), so that a tracing
observer's run span continues the push's trace. An observer written before it had that
argument, whose `running` takes (kind, tick) only, is still called so.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, runtime_checkable

from .._base.values import Tick
from ..store.contract import Claimed, NewRow

Outcome = Literal["done", "retrying", "dead", "released", "dropped", "lost", "snoozed"]
"""How a claimed row ended: run and done; failed and queued again; dead (a run that failed for the
last time, or a payload that no longer fits, as `BadPayload`); given back unrun at a shutdown;
run and snoozed (`job.Snooze`: queued again, its attempt uncounted); a schedule's missed tick
dropped unrun; or lost: the end was not written because another worker had taken the row after
its lease ran out."""


@runtime_checkable
class Observer(Protocol):
    """What the queue tells an observer. Each method must return quickly and never raise.

    `nilo_job.metrics.Metrics` is one (Prometheus counters and histograms, OpenTelemetry spans).
    """

    def pushing(self, kind: str) -> AbstractContextManager[None]:
        """Entered around the store write of a push, push_in, push_many (its first row's
        kind) or seed; a span made current here is the push's."""

    def pushed(self, kind: str, row_id: int | None) -> None:
        """One row of `kind` was written (`row_id`), or its unique key was taken (None)."""

    def claimed(self, rows: Sequence[Claimed], now_us: int, seconds: float) -> None:
        """A claim (by `serve` or a drain) took `rows` at `now_us` on the claim's clock, in
        `seconds` of wall time against the store. A row whose `retaken_from` is not None was
        taken back after the lease of the worker that held it ran out (`Claimed`)."""

    def running(self, kind: str, tick: Tick, trace: str | None) -> AbstractContextManager[None]:
        """Entered around the call of `run` for `tick`; a span made current here is the parent
        of whatever the run traces. `trace` is the W3C trace context the row's push recorded
        (the JSON of a `traceparent` carrier), or None: see `nilo_job.metrics` for its use."""

    def ended(self, kind: str, outcome: Outcome, error: str | None, seconds: float) -> None:
        """A claimed row ended as `outcome`; `error` is the failure's class name, `seconds` the
        duration of the run call (0 for a row that did not run)."""


@contextlib.contextmanager
def around(managers: Sequence[AbstractContextManager[None]]) -> Iterator[None]:
    """Enter every manager of `managers`, innermost last."""
    with contextlib.ExitStack() as stack:
        for manager in managers:
            stack.enter_context(manager)
        yield


_NONE: AbstractContextManager[None] = contextlib.nullcontext()  # reusable: it holds no state


class Observers:
    """The observers of one queue, and the calls its parts make to them.

    `all` is read before each call where the cost matters: with no observer an event costs one
    truth test of an empty tuple.

    Raises:
        Refusal: (`add`) the observer lacks one of `Observer`'s methods.
    """

    __slots__ = ("all", "traced")

    def __init__(self) -> None:
        self.all: tuple[Observer, ...] = ()
        self.traced: tuple[bool, ...] = ()  # per observer: its `running` takes the trace

    def add(self, observer: object) -> None:
        if not isinstance(observer, Observer):
            from .._base.errors import Refusal

            raise Refusal(
                f"observe({observer!r}): an observer has pushing, pushed, claimed, running and "
                "ended; see nilo_job.metrics for one"
            )
        self.all = (*self.all, observer)
        self.traced = (*self.traced, _takes_trace(observer))

    def pushing(self, kind: str) -> AbstractContextManager[None]:
        if not self.all:
            return _NONE
        return around([observer.pushing(kind) for observer in self.all])

    def pushed(self, rows: Sequence[NewRow], ids: Sequence[int | None]) -> None:
        for observer in self.all:
            for row, row_id in zip(rows, ids, strict=True):
                observer.pushed(row.kind, row_id)

    def claimed(self, rows: Sequence[Claimed], now_us: int, began: float) -> None:
        """`began` is the `time.monotonic()` reading taken as the claim was sent."""
        seconds = time.monotonic() - began
        for observer in self.all:
            observer.claimed(rows, now_us, seconds)

    def running(self, kind: str, tick: Tick, trace: str | None) -> AbstractContextManager[None]:
        """Every observer's `running`; `trace` (the row's recorded trace context) goes to those
        that take it."""
        if not self.all:
            return _NONE
        managers = []
        for observer, traced in zip(self.all, self.traced, strict=True):
            if traced:
                managers.append(observer.running(kind, tick, trace))
            else:
                older: Any = observer  # its running(kind, tick) predates the trace
                managers.append(older.running(kind, tick))
        return around(managers)

    def ended(self, kind: str, outcome: Outcome, error: str | None, seconds: float) -> None:
        for observer in self.all:
            observer.ended(kind, outcome, error, seconds)


def _takes_trace(observer: Observer) -> bool:
    """Whether `observer.running` takes a third argument, the trace (one written before it had
    that argument takes kind and tick only)."""
    try:
        inspect.signature(observer.running).bind("kind", None, None)
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): call it as the protocol says
        return True
    return True
