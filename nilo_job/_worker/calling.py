"""Calling a kind's `run`: its arguments, its timeout, and the thread a sync run gets.

`arguments` answers each parameter of `run` after `self` from what the kind read of it: the tick,
the tick's scope (`job.Run`), the queue itself, or a field of `deps`. An async run is awaited
until its deadline (`deadlines`), when its task is cancelled; a sync run gets a daemon thread of
its own (so the event loop never blocks, and a hung run cannot keep a stopping process alive) and
runs in a copy of the caller's context (so a span made current around it is its parent). Python
cannot stop a thread: a timed-out sync run is reported as `TimedOut` at once, and its
`Execution` resolves only when the thread returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .._base import deadlines
from .._base.errors import TimedOut
from .._base.values import Run, Tick
from .._kinds.kind import Kind

log = logging.getLogger("nilo_job")


def arguments(kind: Kind, tick: Tick, now_us: int, queue: object, deps: object) -> dict[str, Any]:
    """The keyword arguments of `kind`'s run for `tick`, at `now_us` (µs, the tick's clock).

    `queue` answers a parameter annotated `job.Jobs`; `deps` every dependency.
    """
    kwargs: dict[str, Any] = {}
    for param in kind.params:
        if param.source == "tick":
            kwargs[param.name] = tick
        elif param.source == "run":
            bound = logging.LoggerAdapter(log, {"kind": kind.name, "row": tick.id})
            kwargs[param.name] = Run(now_us=now_us, tick=tick, log=bound)
        elif param.source == "jobs":
            kwargs[param.name] = queue
        else:
            kwargs[param.name] = getattr(deps, param.attr)
    return kwargs


async def call_async(kind: Kind, value: object, kwargs: dict[str, Any], timeout_s: float) -> Any:
    """Await an async `run` within `timeout_s`; what it returned.

    Raises:
        TimedOut: it ran longer.
    """
    coro = kind.cls.run(value, **kwargs)  # type: ignore[attr-defined]
    deadline = deadlines.start(timeout_s)
    try:
        returned = await coro
    except asyncio.CancelledError:
        if deadline.end():
            raise TimedOut(
                f"{kind.name} ran longer than {timeout_s:g} s and was cancelled"
            ) from None
        raise
    except BaseException:
        deadline.end()
        raise
    deadline.end()
    return returned


class Execution:
    """One execution of a row in this process; it has wholly ended once `end()` was called,
    its thread included (a sync run's thread may outlive its timeout).

    `on_end(execution)` is called once, at that moment (handed the execution, so that it needs
    no reference back to it: an execution and its callback in a cycle would wait for the cyclic
    garbage collector, one cycle per run). The future behind `wait()` is made only for a
    waiter, so an async run, which nobody waits for this way, costs none.
    """

    __slots__ = ("_on_end", "_waiter", "done", "thread_started")

    def __init__(self, on_end: Callable[[Execution], None]) -> None:
        self.done = False
        self.thread_started = False
        self._on_end = on_end
        self._waiter: asyncio.Future[None] | None = None

    def end(self) -> None:
        if self.done:
            return
        self.done = True
        self._on_end(self)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        """Until `end()` has been called (at once if it has)."""
        if self.done:
            return
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._waiter)


async def call_in_thread(
    kind: Kind,
    value: object,
    kwargs: dict[str, Any],
    timeout_s: float,
    execution: Execution,
) -> Any:
    """Run a sync `run` in a daemon thread of its own so the event loop never blocks; what it
    returned.

    `done` resolves when the thread returns, whatever happened to the waiting: Python cannot
    stop a thread, so a timed-out run keeps going until it returns, and its row stays busy in
    this process until then (see `Runner.execute`).
    """
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[Any] = loop.create_future()

    def settle(error: BaseException | None, returned: Any = None) -> None:
        if not outcome.done():
            if error is None:
                outcome.set_result(returned)
            elif isinstance(error, StopIteration | KeyboardInterrupt | SystemExit):
                # A future cannot carry these three as they are; the attempt still fails
                # under their name.
                outcome.set_exception(_carried(error))
            else:
                outcome.set_exception(error)
        execution.end()

    def work() -> None:
        error: BaseException | None = None
        returned: Any = None
        try:
            returned = kind.cls.run(value, **kwargs)  # type: ignore[attr-defined]
        except BaseException as failure:  # handed to the loop, which decides
            error = failure
        with contextlib.suppress(RuntimeError):  # the loop closed while the thread ran
            loop.call_soon_threadsafe(settle, error, returned)

    started = time.monotonic()
    # The thread runs in a copy of this task's context, so a span made current around the run
    # (an observer's) is the parent of the spans the run makes.
    context = contextvars.copy_context()
    threading.Thread(
        target=context.run, args=(work,), name=f"nilo-job {kind.name}", daemon=True
    ).start()
    execution.thread_started = True
    try:
        async with asyncio.timeout(timeout_s):
            return await asyncio.shield(outcome)
    except TimeoutError:
        if outcome.done():
            raise
        raise TimedOut(
            f"{kind.name} ran longer than {timeout_s:g} s; its thread cannot be stopped and "
            f"was left to finish ({time.monotonic() - started:.1f} s so far)"
        ) from None


def _carried(error: BaseException) -> Exception:
    """An exception a future can carry, named after `error` (SystemExit, KeyboardInterrupt,
    StopIteration), so the dead row keeps the name the run raised."""
    carrier: type[Exception] = type(type(error).__name__, (Exception,), {"__module__": "nilo_job"})
    return carrier(str(error))
