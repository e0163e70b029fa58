"""Calling a kind's `run`, and writing ends in batches: the mechanics under `Jobs`.

An async run is awaited under `asyncio.timeout`; a sync run gets a daemon thread of its own (so
the event loop never blocks, and a hung run cannot keep a stopping process alive) and runs in a
copy of the caller's context (so a span made current around it is its parent). Python cannot
stop a thread: a timed-out sync run is reported as `TimedOut` at once, and its `Execution`
resolves only when the thread returns. `Grouped` turns the ends of concurrent runs into one
`store.finish` per group, and concurrent pushes into one `store.push`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from ._errors import StoreUnavailable, TimedOut
from ._kinds import Kind

T = TypeVar("T")
R = TypeVar("R")


async def call_async(kind: Kind, value: object, kwargs: dict[str, Any], timeout_s: float) -> None:
    coro = kind.cls.run(value, **kwargs)  # type: ignore[attr-defined]
    try:
        async with asyncio.timeout(timeout_s) as scope:
            await coro
    except TimeoutError:
        if scope.expired():
            raise TimedOut(
                f"{kind.name} ran longer than {timeout_s:g} s and was cancelled"
            ) from None
        raise


class Grouped(Generic[T, R]):
    """`write(items)` shared by concurrent callers (a group commit): calls made while a write is
    in flight wait and go together in the next one, up to `MOST` items each.

    Each caller still waits for its own item's answer, so grouping costs durability nothing; it
    turns one transaction per item into one per group. When a group fails with anything but
    `StoreUnavailable` (an outage fails every item alike), each of its items is written again
    alone, so that one caller's bad item is never another caller's error. A group is written in
    a context of its own (no caller's contextvars), since it is no one caller's.

    Two kinds of caller:
    - `detached=False` (pushes): a call made while none is in flight writes its item at once,
      in the caller's own task and context; an item whose caller is cancelled before its group
      was sent is dropped.
    - `detached=True` (the ends of runs): every write runs in a task of this object's own and
      goes to the end even when its callers are cancelled; `idle()` waits for it.
    """

    MOST = 256

    def __init__(
        self, write: Callable[[list[T]], Awaitable[list[R]]], *, detached: bool = False
    ) -> None:
        self.write = write
        self.detached = detached
        self.pending: list[tuple[T, asyncio.Future[R], Callable[[R], None] | None]] = []
        self.busy = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[None] | None = None
        self.flying: list[T] = []  # the items of the write in flight
        self.lone: list[T] = []  # items written alone, for another loop than the owner
        # One event loop owns the group at a time (busy, on `loop`); a call from another loop's
        # thread (the sync face's and an application's own) writes alone instead. The lock makes
        # taking and giving up that ownership atomic across threads.
        self.lock = threading.Lock()

    def _own(self, loop: asyncio.AbstractEventLoop) -> bool | None:
        """Take the group for `loop`: True if it was free (now ours), False if `loop` already
        owns it, None if another loop does."""
        with self.lock:
            if not self.busy:
                self.busy, self.loop = True, loop
                return True
            return False if self.loop is loop else None

    def submit(self, item: T, late: Callable[[R], None] | None = None) -> asyncio.Future[R]:
        """(detached) Queue `item` for the next group; the future is its answer, and the item
        is written whatever happens to whoever awaits it: if the future was cancelled by then,
        `late(answer)` is called instead."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        owned = self._own(loop)
        if owned is None:  # another loop's: written alone, in a task of this loop
            task = loop.create_task(self._alone(item), context=contextvars.Context())
            task.add_done_callback(functools.partial(_copy_outcome, future, late))
            return future
        self.pending.append((item, future, late))
        if owned:
            self._next(loop)
        return future

    async def _alone(self, item: T) -> R:
        with self.lock:
            self.lone.append(item)
        try:
            (answer,) = await self.write([item])
            return answer
        finally:
            with self.lock:
                for index, lone in enumerate(self.lone):
                    if lone is item:
                        del self.lone[index]
                        break

    async def __call__(self, item: T) -> R:
        if self.detached:
            return await self.submit(item)
        loop = asyncio.get_running_loop()
        owned = self._own(loop)
        if owned is None:
            # In flight on another event loop (the sync face's, a closed one): not ours to join.
            return await self._alone(item)
        if not owned:
            future: asyncio.Future[R] = loop.create_future()
            self.pending.append((item, future, None))
            return await future
        self.flying = [item]
        try:
            (answer,) = await self.write([item])
            return answer
        finally:
            self.flying = []
            self._next(loop)

    def in_flight(self, item: T) -> bool:
        """Whether `item` is part of the write in flight (sent, or about to be): its caller may
        no longer take it back."""
        with self.lock:
            return any(sent is item for sent in (*self.flying, *self.lone))

    def _next(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.pending:
            self.task = loop.create_task(self._drain(), context=contextvars.Context())
        else:
            with self.lock:
                self.busy = False

    async def _drain(self) -> None:
        try:
            while self.pending:
                group = self.pending[: self.MOST]
                del self.pending[: self.MOST]
                if not self.detached:  # a push whose caller gave up before it was sent
                    group = [entry for entry in group if not entry[1].done()]
                if group:
                    await self._write_group(group)
        finally:
            with self.lock:
                self.busy = False

    async def _write_group(
        self, group: list[tuple[T, asyncio.Future[R], Callable[[R], None] | None]]
    ) -> None:
        items = [item for item, _, _ in group]
        self.flying = items
        try:
            answers = await self.write(items)
        except StoreUnavailable as error:
            _settle_all(group, error)
            return
        except Exception as error:
            if len(group) == 1:
                _settle_all(group, error)
                return
            answers = None
        finally:
            self.flying = []
        if answers is None:  # the group failed: each of its items alone
            for one in group:
                await self._write_group([one])
            return
        for (_, future, late), answer in zip(group, answers, strict=True):
            if not future.done():
                future.set_result(answer)
            elif late is not None:
                late(answer)

    async def idle(self) -> None:
        """Until the groups waiting when called are written."""
        while self.task is not None and not self.task.done():
            await asyncio.shield(self.task)


def _copy_outcome(
    future: asyncio.Future[Any], late: Callable[[Any], None] | None, task: asyncio.Task[Any]
) -> None:
    """Give `task`'s outcome to `future` (or to `late`, if the future was cancelled)."""
    if task.cancelled():
        future.cancel()
    elif (error := task.exception()) is not None:
        if not future.done():
            future.set_exception(error)
    elif not future.done():
        future.set_result(task.result())
    elif late is not None:
        late(task.result())


def _settle_all(
    group: Sequence[tuple[object, asyncio.Future[Any], object]], error: Exception
) -> None:
    for _, future, _late in group:
        if not future.done():
            future.set_exception(error)


class Execution:
    """One execution of a row in this process; it has wholly ended once `end()` was called,
    its thread included (a sync run's thread may outlive its timeout).

    `on_end` is called once, at that moment. The future behind `wait()` is made only for a
    waiter, so an async run, which nobody waits for this way, costs none.
    """

    __slots__ = ("_on_end", "_waiter", "done", "thread_started")

    def __init__(self, on_end: Callable[[], None]) -> None:
        self.done = False
        self.thread_started = False
        self._on_end = on_end
        self._waiter: asyncio.Future[None] | None = None

    def end(self) -> None:
        if self.done:
            return
        self.done = True
        self._on_end()
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
) -> None:
    """Run a sync `run` in a daemon thread of its own so the event loop never blocks.

    `done` resolves when the thread returns, whatever happened to the waiting: Python cannot
    stop a thread, so a timed-out run keeps going until it returns, and its row stays busy in
    this process until then (see `_execute`).
    """
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if not outcome.done():
            if error is None:
                outcome.set_result(None)
            elif isinstance(error, StopIteration | KeyboardInterrupt | SystemExit):
                # A future cannot carry these three as they are; the attempt still fails
                # under their name.
                outcome.set_exception(_carried(error))
            else:
                outcome.set_exception(error)
        execution.end()

    def work() -> None:
        error: BaseException | None = None
        try:
            kind.cls.run(value, **kwargs)  # type: ignore[attr-defined]
        except BaseException as failure:  # handed to the loop, which decides
            error = failure
        with contextlib.suppress(RuntimeError):  # the loop closed while the thread ran
            loop.call_soon_threadsafe(settle, error)

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
            await asyncio.shield(outcome)
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
