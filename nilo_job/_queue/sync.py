"""`jobs.sync`: the queue for callers that do not run asyncio (Flask and Django views, scripts).

Bridged, not copied: each method hands the async method's coroutine to an event loop and blocks
for its answer. The loop is the one `serve()` runs on when this process serves, and otherwise a
loop of the bridge's own in a daemon thread, started on first use. `push_in` is the exception: it
writes through the caller's own connection in the caller's thread, so it runs right here.

A script need not call `close`: when the interpreter exits, the bridge's own loop closes the store
and ends what it still runs, so that nothing is left pending for asyncio to complain of.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from .._base.errors import Refusal, refuse_within
from .._base.spaces import Space
from .._base.values import Dead, Flow, Found, Row, Stats, Status, Where
from ..store.contract import Store

T = TypeVar("T")

CLOSE_AT_EXIT_S = 5.0
"""At the interpreter's exit, how long the bridge's own loop is given to close the store (s)."""


PushInNow = Callable[[object, object, int | None, int | datetime | None, str | None], int | None]
"""`push_in` through a synchronous transaction, in the caller's thread: (tx, value, after_ms, at,
unique) to the new row's id, or None."""


class AsyncFace(Protocol):
    """The async calls of a queue that the sync face bridges (`job.Jobs` has them all)."""

    @property
    def store(self) -> Store: ...

    async def push(
        self,
        value: object,
        *,
        after_ms: int | None = None,
        at: int | datetime | None = None,
        unique: str | None = None,
        within: Space | None = None,
    ) -> int | None: ...

    def wake(self) -> None: ...
    async def cancel(self, row_id: int) -> bool: ...
    async def stats(self) -> Stats: ...
    async def status(self, row_id: int) -> Status | None: ...
    async def dead_ones(self, limit: int = 1_000) -> list[Dead]: ...
    async def retry_dead(self, row_id: int) -> bool: ...
    async def progress(self, row_id: int, n: int) -> None: ...
    async def drain(self, *, raises: bool = False) -> int: ...
    async def drain_at(self, now_us: int, *, raises: bool = False) -> int: ...
    async def row(self, row_id: int) -> Row | None: ...
    async def find(self, where: Where, *, after: str | None = None, limit: int = 100) -> Found: ...
    async def count(self, where: Where) -> int: ...
    async def retry_many(
        self, rows: Sequence[int] | Where, *, at_most: int | None = None
    ) -> int: ...
    async def cancel_many(
        self, rows: Sequence[int] | Where, *, at_most: int | None = None
    ) -> int: ...
    async def delete_many(
        self, rows: Sequence[int] | Where, *, at_most: int | None = None
    ) -> int: ...
    async def pause(self, kind: str) -> bool: ...
    async def resume(self, kind: str) -> bool: ...
    async def paused(self) -> dict[str, int]: ...
    async def flow(self, *, minutes: int = 60) -> list[Flow]: ...


class SyncJobs:
    """Blocking versions of the queue's producer and operator calls; see `Jobs` for each.

    Args:
        jobs: the queue whose async calls are bridged.
        serving_loop: the event loop `serve` runs on in this process, or None; calls go there
            when it runs, and to the bridge's own loop otherwise.
        push_in_now: `push_in` through the caller's synchronous transaction, run right here.

    Raises:
        Refusal: a method is called from inside a running event loop (use the async API there).
    """

    def __init__(
        self,
        jobs: AsyncFace,
        serving_loop: Callable[[], asyncio.AbstractEventLoop | None],
        push_in_now: PushInNow,
    ) -> None:
        self._jobs = jobs
        self._push_in_now = push_in_now  # push_in through a synchronous transaction, here
        self._serving_loop = serving_loop  # serve's loop in this process, if it runs here
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        if self._pid != os.getpid():
            # A forked child (gunicorn --preload, multiprocessing): the parent's loop thread is
            # not here. Start a loop of this process's own.
            self._pid, self._loop, self._lock = os.getpid(), None, threading.Lock()
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=_run_until_stopped,
                    args=(loop,),
                    name="nilo-job sync bridge",
                    daemon=True,
                )
                thread.start()
                self._loop, self._thread = loop, thread
                atexit.register(self._close_at_exit)
            return self._loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            name = str(getattr(coro, "__qualname__", "push")).rsplit(".", 1)[-1]  # its method
            coro.close()
            raise Refusal(
                f"jobs.sync.{name} blocks, and this code runs inside an event loop: await the "
                f"async method (await jobs.{name}(...)) here instead"
            )
        loop = self._serving_loop() or self._own_loop()
        # The coroutine runs in a copy of this thread's context (asyncio copies the caller's
        # context variables with the call it schedules): a push made here inside a span records
        # that span's trace, and the push's own span is that span's child.
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def push(
        self,
        value: object,
        *,
        after_ms: int | None = None,
        at: int | datetime | None = None,
        unique: str | None = None,
        within: Space | None = None,
    ) -> int | None:
        """`Jobs.push`, blocking."""
        return self._call(
            self._jobs.push(value, after_ms=after_ms, at=at, unique=unique, within=within)
        )

    def push_in(
        self,
        tx: object,
        value: object,
        *,
        after_ms: int | None = None,
        at: int | datetime | None = None,
        unique: str | None = None,
        within: object = None,
    ) -> int | None:
        """`Jobs.push_in` through a synchronous connection or session, in this thread.

        Raises:
            Refusal: `tx` needs awaiting (an async connection or session): use the async API;
                or as for `Jobs.push_in`.
        """
        refuse_within(within)
        return self._push_in_now(tx, value, after_ms, at, unique)

    def wake(self) -> None:
        """`Jobs.wake`."""
        self._jobs.wake()

    def cancel(self, row_id: int) -> bool:
        """`Jobs.cancel`, blocking."""
        return self._call(self._jobs.cancel(row_id))

    def stats(self) -> Stats:
        """`Jobs.stats`, blocking."""
        return self._call(self._jobs.stats())

    def status(self, row_id: int) -> Status | None:
        """`Jobs.status`, blocking."""
        return self._call(self._jobs.status(row_id))

    def dead_ones(self, limit: int = 1_000) -> list[Dead]:
        """`Jobs.dead_ones`, blocking."""
        return self._call(self._jobs.dead_ones(limit))

    def retry_dead(self, row_id: int) -> bool:
        """`Jobs.retry_dead`, blocking."""
        return self._call(self._jobs.retry_dead(row_id))

    def progress(self, row_id: int, n: int) -> None:
        """`Jobs.progress`, blocking: how far a synchronous run has got."""
        self._call(self._jobs.progress(row_id, n))

    def row(self, row_id: int) -> Row | None:
        """`Jobs.row`, blocking."""
        return self._call(self._jobs.row(row_id))

    def find(self, where: Where, *, after: str | None = None, limit: int = 100) -> Found:
        """`Jobs.find`, blocking."""
        return self._call(self._jobs.find(where, after=after, limit=limit))

    def count(self, where: Where) -> int:
        """`Jobs.count`, blocking."""
        return self._call(self._jobs.count(where))

    def retry_many(self, rows: Sequence[int] | Where, *, at_most: int | None = None) -> int:
        """`Jobs.retry_many`, blocking."""
        return self._call(self._jobs.retry_many(rows, at_most=at_most))

    def cancel_many(self, rows: Sequence[int] | Where, *, at_most: int | None = None) -> int:
        """`Jobs.cancel_many`, blocking."""
        return self._call(self._jobs.cancel_many(rows, at_most=at_most))

    def delete_many(self, rows: Sequence[int] | Where, *, at_most: int | None = None) -> int:
        """`Jobs.delete_many`, blocking."""
        return self._call(self._jobs.delete_many(rows, at_most=at_most))

    def pause(self, kind: str) -> bool:
        """`Jobs.pause`, blocking."""
        return self._call(self._jobs.pause(kind))

    def resume(self, kind: str) -> bool:
        """`Jobs.resume`, blocking."""
        return self._call(self._jobs.resume(kind))

    def paused(self) -> dict[str, int]:
        """`Jobs.paused`, blocking."""
        return self._call(self._jobs.paused())

    def flow(self, *, minutes: int = 60) -> list[Flow]:
        """`Jobs.flow`, blocking."""
        return self._call(self._jobs.flow(minutes=minutes))

    def close(self) -> None:
        """Close the store on the bridge's own loop and stop that loop (at the end of a script
        or a test; the next call starts them again)."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._pid != os.getpid():
            return
        atexit.unregister(self._close_at_exit)
        asyncio.run_coroutine_threadsafe(self._jobs.store.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._loop = self._thread = None

    def _close_at_exit(self) -> None:
        """At the interpreter's exit: close the store on the bridge's own loop, end the tasks
        still pending there, and stop it, within `CLOSE_AT_EXIT_S`."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._pid != os.getpid():
            return
        ended = asyncio.run_coroutine_threadsafe(_end(self._jobs.store), loop)
        with contextlib.suppress(Exception):  # a store that fails to close: exit all the same
            ended.result(timeout=CLOSE_AT_EXIT_S)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=CLOSE_AT_EXIT_S)
        self._loop = self._thread = None

    def drain(self, *, raises: bool = False) -> int:
        """`Jobs.drain`, blocking (for a synchronous test)."""
        return self._call(self._jobs.drain(raises=raises))

    def drain_at(self, now_us: int, *, raises: bool = False) -> int:
        """`Jobs.drain_at`, blocking (for a synchronous test)."""
        return self._call(self._jobs.drain_at(now_us, raises=raises))


async def _end(store: Store) -> None:
    """Close `store`, then cancel and await every other task of this loop."""
    try:
        async with asyncio.timeout(CLOSE_AT_EXIT_S):
            await store.close()
    finally:
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)


def _run_until_stopped(loop: asyncio.AbstractEventLoop) -> None:
    """The bridge thread: the loop runs until `close` stops it, then is closed."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()
