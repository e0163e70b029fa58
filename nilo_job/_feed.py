"""The feed: how rows claimed in this process reach serve's workers.

The claim loop puts the rows it claimed here, and a push that claimed its own row for an idle
worker hands it over here too; each of serve's workers takes one row at a time. The feed also
knows how many workers wait (`idle`), how many of those a push in flight is claiming a row for
(`promised`), and which rows have started and not yet ended (`tasks`), which is what serve's
claim loop and its stop read.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
from collections.abc import Sequence

from .store.contract import Claimed


def settle(freed: asyncio.Future[None]) -> None:
    """Free the worker waiting on `freed` (its row's run no longer needs it), unless it is."""
    if not freed.done():
        freed.set_result(None)


class Feed:
    """Rows claimed and not yet started (each with the clock reading of its claim, µs), and the
    workers waiting for one; one feed per run of `serve`.

    A row goes to a waiting worker directly, or waits in `rows` for the next worker that asks;
    a worker taking a row costs no future while rows wait. `want` (serve's wake-up event) is
    set when a worker finds nothing, or leaves `low` rows or fewer behind it.
    """

    def __init__(self, want: asyncio.Event, kinds: Sequence[str] = ()) -> None:
        self.kinds: frozenset[str] = frozenset(kinds)  # what serve claims now (none paused)
        self.rows: collections.deque[tuple[Claimed, int]] = collections.deque()
        self.idle: collections.deque[asyncio.Future[tuple[Claimed, int] | None]] = (
            collections.deque()
        )
        self.want = want
        self.low = 0
        self.tasks: set[asyncio.Task[None]] = set()  # rows started and not yet ended
        # When each busy worker started its row (loop time, s), until the row frees it.
        self.busy_since: dict[asyncio.Future[None], float] = {}
        self.promised = 0  # idle workers a push in flight is claiming a row for
        self.closed = False

    def started(self, task: asyncio.Task[None], freed: asyncio.Future[None]) -> None:
        """`task` runs a row that a worker waiting on `freed` took: it is among `tasks` until
        it ends, and its end frees that worker if its run had not."""
        self.tasks.add(task)
        task.add_done_callback(functools.partial(self._ended, freed))

    def _ended(self, freed: asyncio.Future[None], task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        settle(freed)

    def has_unpromised_idle(self) -> bool:
        """Whether a worker waits with no row promised to it by a push in flight."""
        return not self.closed and len(self.idle) > self.promised

    async def get(self) -> tuple[Claimed, int] | None:
        """The next row for a worker, waiting for one; None once the feed is closed."""
        if self.closed:
            return None
        if self.rows:
            taken = self.rows.popleft()
            if len(self.rows) <= self.low:
                self.want.set()
            return taken
        waiter: asyncio.Future[tuple[Claimed, int] | None] = (
            asyncio.get_running_loop().create_future()
        )
        self.idle.append(waiter)
        self.want.set()
        try:
            return await waiter
        except asyncio.CancelledError:
            handed = waiter.result() if waiter.done() and not waiter.cancelled() else None
            if handed is not None:
                self.rows.appendleft(handed)  # handed over as the worker was cancelled
            raise
        finally:
            with contextlib.suppress(ValueError):
                self.idle.remove(waiter)

    def put(self, rows: Sequence[Claimed], claimed_at: int) -> None:
        """Hand `rows` to waiting workers, first come first served; the rest wait here."""
        for row in rows:
            while self.idle:
                waiter = self.idle.popleft()
                if not waiter.done():
                    waiter.set_result((row, claimed_at))
                    break
            else:
                self.rows.append((row, claimed_at))

    def close(self) -> None:
        """No more rows: waiting workers get None, and so does every later `get`."""
        self.closed = True
        while self.idle:
            waiter = self.idle.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def take_older(self, claimed_before: int) -> list[tuple[Claimed, int]]:
        """The rows waiting that were claimed before `claimed_before` (µs), taken out of the
        feed. Rows wait in the order they were claimed, so these are at its front."""
        old = []
        while self.rows and self.rows[0][1] < claimed_before:
            old.append(self.rows.popleft())
        return old

    def take_all(self) -> list[tuple[Claimed, int]]:
        """Every row still waiting, taken out of the feed."""
        taken = list(self.rows)
        self.rows.clear()
        return taken
