"""The feed: how rows claimed in this process reach serve's workers.

The claim loop puts the rows it claimed here, and a push that claimed its own row for an idle
worker hands it over here too; each of serve's workers takes one row at a time. A row handed to
a waiting worker is started there and then (`start`, serve's), in the call that put it: its run
begins at the next turn of the loop, without waiting for the worker to wake first. The feed also
knows how many workers wait (`idle`), how many of those a push in flight is claiming a row for
(`promised`), and which rows have started and not yet ended (`tasks`), which is what serve's
claim loop and its stop read.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
from collections.abc import Callable, Collection, Sequence

from ..store.contract import Claimed

Start = Callable[[Claimed, int, Callable[[], None]], "asyncio.Task[None] | None"]
"""serve's start of a row claimed at a clock reading (µs): its run's task, which calls the
function given once the row no longer needs its worker; None, starting nothing, when the row can
no longer run under its lease (its worker then gives it back)."""

Taken = tuple[Claimed, int, "asyncio.Future[None] | None"]
"""What a worker is handed: a row, the clock reading of its claim (µs), and the future that
frees the worker once the row's run no longer needs it; None when the row was not started."""


AHEAD_S = 0.02
"""serve claims ahead what its workers would start within this many seconds (at the runs' recent
pace)."""
AHEAD_MOST = 16
"""and at most this many rows per worker."""
WAIT_MOST_S = 0.25
"""A row claimed ahead and not started after this many seconds is given back to the table."""


def settle(freed: asyncio.Future[None]) -> None:
    """Free the worker waiting on `freed` (its row's run no longer needs it), unless it is."""
    if not freed.done():
        freed.set_result(None)


class Feed:
    """Rows claimed and not yet started (each with the clock reading of its claim, µs), and the
    workers waiting for one; one feed per run of `serve`.

    A row goes to a waiting worker directly, started as it is handed over, or waits in `rows`
    for the next worker that asks, started as it is taken; a worker taking a row costs no
    future while rows wait. `want()` (serve's wake-up) is called when a worker finds nothing, or
    leaves `low` rows or fewer behind it.

    `kinds` is what a push may hand to an idle worker here: the kinds serve claims now (none
    paused), less the `limited` ones (with a concurrency limit), whose rows only a claim may
    take, since a claim counts them against their limit.
    """

    def __init__(
        self,
        want: Callable[[], None],
        kinds: Sequence[str],
        start: Start,
        limited: Collection[str] = (),
    ) -> None:
        self.limited = frozenset(limited)
        self.kinds = frozenset(kinds)  # what serve claims now (none paused), less `limited`
        self.rows: collections.deque[tuple[Claimed, int]] = collections.deque()
        self.idle: collections.deque[asyncio.Future[Taken | None]] = collections.deque()
        self.start = start
        self.want = want
        self.low = 0
        self.tasks: dict[asyncio.Task[None], int] = {}  # rows started and not yet ended: ids
        # When each busy worker started its row (loop time, s), until the row frees it.
        self.busy_since: dict[asyncio.Future[None], float] = {}
        self.promised = 0  # idle workers a push in flight is claiming a row for
        self.closed = False

    @property
    def kinds(self) -> frozenset[str]:
        """The kinds a push may hand to an idle worker here (see the class)."""
        return self._kinds

    @kinds.setter
    def kinds(self, kinds: frozenset[str]) -> None:
        """serve claims `kinds` now (none paused): those of them without a limit."""
        self._kinds = kinds - self.limited

    def _taken(self, row: Claimed, claimed_at: int) -> Taken:
        """`row` started for the worker it goes to (see `Taken`): its task is among `tasks`
        until it ends, and the worker counts as busy (`busy_since`) until the row frees it."""
        loop = asyncio.get_running_loop()
        freed: asyncio.Future[None] = loop.create_future()
        task = self.start(row, claimed_at, functools.partial(settle, freed))
        if task is None:
            return row, claimed_at, None
        self.tasks[task] = row.id
        task.add_done_callback(functools.partial(self._ended, freed))
        self.busy_since[freed] = loop.time()  # (its worker takes it out once freed)
        return row, claimed_at, freed

    def _ended(self, freed: asyncio.Future[None], task: asyncio.Task[None]) -> None:
        self.tasks.pop(task, None)
        settle(freed)  # (if its run had not freed the worker yet)

    def has_unpromised_idle(self) -> bool:
        """Whether a worker waits with no row promised to it by a push in flight."""
        return not self.closed and len(self.idle) > self.promised

    async def get(self) -> Taken | None:
        """The next row for a worker, started, waiting for one; None once the feed is
        closed."""
        if self.closed:
            return None
        if self.rows:
            row, claimed_at = self.rows.popleft()
            if len(self.rows) <= self.low:
                self.want()
            return self._taken(row, claimed_at)
        waiter: asyncio.Future[Taken | None] = asyncio.get_running_loop().create_future()
        self.idle.append(waiter)
        self.want()
        try:
            return await waiter
        except asyncio.CancelledError:
            handed = waiter.result() if waiter.done() and not waiter.cancelled() else None
            if handed is not None and handed[2] is None:
                # Handed over, not started, as the worker was cancelled: it waits again. (A
                # started one is among `tasks`, which serve's stop sees to.)
                self.rows.appendleft(handed[:2])
            raise
        finally:
            with contextlib.suppress(ValueError):
                self.idle.remove(waiter)

    def put(self, rows: Sequence[Claimed], claimed_at: int) -> None:
        """Hand `rows` to waiting workers, first come first served, starting each; the rest
        wait here."""
        for row in rows:
            while self.idle:
                waiter = self.idle.popleft()
                if not waiter.done():
                    waiter.set_result(self._taken(row, claimed_at))
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

    def wanted(self, pace_s: float | None, workers: int) -> int:
        """How many rows the claim loop should claim now (0: none) for serve's `workers`, whose
        runs took `pace_s` seconds each of late (None: none ran yet).

        That is the idle workers no push has promised a row to, plus claiming ahead: as many
        rows as the workers would start within `AHEAD_S` at that pace, at most `AHEAD_MOST` per
        worker, less the rows already waiting. None while runs are slow (a slow row waiting
        here is a row another process could run), and none beyond the idle workers while more
        than half of what is claimed ahead still waits. A worker whose run has gone on for
        longer than `AHEAD_S` counts for none: it will not start a row claimed ahead soon.
        """
        ahead = 0
        if pace_s is not None:
            now = asyncio.get_running_loop().time()
            able = workers - sum(1 for since in self.busy_since.values() if now - since > AHEAD_S)
            if able > 0:
                ahead = min(able * AHEAD_MOST, int(able * AHEAD_S / max(pace_s, 1e-6)))
        self.low = ahead // 2  # a worker leaving this few rows behind wakes the claim loop
        idle = len(self.idle) - self.promised  # a push may be claiming for the others
        waiting = len(self.rows)
        if idle <= 0 and waiting > self.low:
            return 0
        return max(0, idle + ahead - waiting)

    def nap_s(self, poll_s: float) -> float:
        """How long the claim loop may sleep while it wants nothing: the poll, or less while
        rows wait here (to give back those that wait too long)."""
        return min(poll_s, WAIT_MOST_S) if self.rows else poll_s

    def take_stale(self, now_us: int) -> list[Claimed]:
        """The rows that have waited here longer than `WAIT_MOST_S` at `now_us`, taken out of
        the feed. Rows wait in the order they were claimed, so these are at its front."""
        claimed_before = now_us - int(WAIT_MOST_S * 1_000_000)
        old = []
        while self.rows and self.rows[0][1] < claimed_before:
            old.append(self.rows.popleft()[0])
        return old

    def take_all(self) -> list[tuple[Claimed, int]]:
        """Every row still waiting, taken out of the feed."""
        taken = list(self.rows)
        self.rows.clear()
        return taken
