"""Observers: how metrics and tracing see the queue without the queue knowing about them.

`jobs.observe(observer)` adds one; the queue calls it around each push and run, after each
claim, and at each end. The core imports no metrics or tracing library: `nilo_job.metrics`
(Prometheus, OpenTelemetry) is an observer like any other. With no observer the queue pays one
empty-tuple check per event.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Literal, Protocol, runtime_checkable

from ._values import Tick

Outcome = Literal["done", "retry", "dead", "released", "dropped"]
"""How a claimed row ended: run and done; failed and queued again; dead; given back unrun at a
shutdown; a schedule's missed tick dropped unrun."""


@runtime_checkable
class Observer(Protocol):
    """What the queue tells an observer. Each method must return quickly and never raise."""

    def pushing(self, kind: str) -> AbstractContextManager[None]:
        """Entered around one push (or push_in) of a row of `kind`."""

    def claimed(self, rows: int, seconds: float) -> None:
        """A claim by `serve` took `rows` rows in `seconds` (wall time of the store call)."""

    def running(self, kind: str, tick: Tick) -> AbstractContextManager[None]:
        """Entered around the call of `run` for `tick`; a span made current here is the parent
        of whatever the run traces."""

    def ended(self, kind: str, outcome: Outcome, error: str | None, seconds: float) -> None:
        """A claimed row ended as `outcome`; `error` is the failure's class name, `seconds` the
        run's duration (0 for a row that did not run)."""


@contextlib.contextmanager
def around(managers: Sequence[AbstractContextManager[None]]) -> Iterator[None]:
    """Enter every manager of `managers`, innermost last."""
    with contextlib.ExitStack() as stack:
        for manager in managers:
            stack.enter_context(manager)
        yield
