"""A group commit: concurrent calls of one write share one store call.

`Grouped(write)` turns concurrent pushes of one queue into one `store.push` (one transaction,
one multi-row INSERT where it can), and the ends of concurrent runs into one `store.finish`.
Each caller still waits for its own item's answer, so grouping costs durability nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from .errors import StoreUnavailable

T = TypeVar("T")
R = TypeVar("R")


class Grouped(Generic[T, R]):
    """`write(items)` shared by concurrent callers (a group commit): calls made while a write is
    in flight wait and go together in the next one, up to `MOST` items each.

    Each caller still waits for its own item's answer, so grouping costs durability nothing; it
    turns one transaction per item into one per group. When a group fails with anything but
    `StoreUnavailable` (an outage fails every item alike), each of its items is written again
    alone, so that one caller's bad item is never another caller's error. When a push's write
    fails with `StoreUnavailable`, the pushes waiting for the next write fail with it too,
    unsent: none waits out another bound of its own behind one that found the store away. A
    group is written in a context of its own (no caller's contextvars), since it is no one
    caller's.

    Two kinds of caller:
    - `detached=False` (pushes): a call made while none is in flight lets the loop turn once
      (so that callers ready in that turn join it), then writes its item in the caller's own
      task and context when it is still alone, or as the first of a group; an item whose caller
      is cancelled before its group was sent is dropped.
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
        try:
            # One turn of the loop first: the callers ready in it join this write as a group,
            # instead of each waiting for the one before (a write may not yield: SQLite's
            # single push is written on this thread).
            await asyncio.sleep(0)
        except BaseException:
            self._next(loop)
            raise
        if self.pending:
            mine: asyncio.Future[R] = loop.create_future()
            self.pending.insert(0, (item, mine, None))
            self._next(loop)
            return await mine
        self.flying = [item]
        try:
            (answer,) = await self.write([item])
            return answer
        except StoreUnavailable as error:
            self._fail_waiting(error)
            raise
        finally:
            self.flying = []
            self._next(loop)

    def _fail_waiting(self, error: StoreUnavailable) -> None:
        """(pushes) A write just found the store away: the pushes waiting for the next one fail
        with `error` now, unsent (so nothing of theirs is written)."""
        if not self.detached:
            waiting, self.pending = self.pending, []
            _settle_all(waiting, error)

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
            self._fail_waiting(error)
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
