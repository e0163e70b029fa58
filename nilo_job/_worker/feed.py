"""The feed: how rows claimed in this process reach serve's workers.

The claim loop puts the rows it claimed here, and a push that claimed its own row for an idle
worker hands it over here too; each of serve's workers takes one row at a time. A row handed to
a waiting worker is started there and then (`start`, serve's), in the call that put it: its run
begins at the next turn of the loop, without waiting for the worker to wake first. The feed also
knows how many workers wait (`idle`), how many of those a push in flight is claiming a row for
(`promised`), and which rows have started and not yet ended (`tasks`), which is what serve's
claim loop and its stop read.

It also keeps serve within its bound (`Bound`) on the rows this process holds whose ends are not
yet written: the rows started and not yet ended (running, or run and their ends being written),
the rows claimed and waiting here, the rows a push in flight claims for an idle worker, and the
rows whose ends could not be written, until their leases may have run out. A worker starts a row
only while fewer than the bound are started or unwritten, and the claim loop and a push claim
only into what is left of it. So while ends cannot be written, this process stops taking rows,
instead of running the whole queue under leases that will run out.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from collections.abc import Callable, Collection, Sequence

from ..store.contract import Claimed

Start = Callable[[Claimed, int, Callable[[], None]], "asyncio.Task[None] | None"]
"""serve's start of a row claimed at a clock reading (µs): its run's task, which calls the
function given once the row no longer needs its worker; None, starting nothing, when the row can
no longer run under its lease (its worker then gives it back)."""

Waiting = tuple[Claimed, int, int]
"""A row waiting in the feed: the row, the clock reading of its claim (µs: its lease runs from
then), and the clock reading when it came to the feed (µs: once the claim was answered, which may
be much later), from which `WAIT_MOST_S` counts."""

Taken = tuple[Claimed, int, "asyncio.Future[None] | None"]
"""What a worker is handed: a row, the clock reading of its claim (µs), and the future that
frees the worker once the row's run no longer needs it; None when the row was not started."""


AHEAD_S = 0.02
"""serve claims ahead what its workers would start within this many seconds (at the runs' recent
pace)."""
AHEAD_MOST = 64
"""and at most this many rows per worker: enough for the workers of fast runs to keep busy while
the next claim is answered, which takes a few milliseconds where the database is across a network
or a claim is more than one statement (MariaDB and MySQL)."""
WAIT_MOST_S = 0.25
"""A row claimed ahead and not started this many seconds after it came here is given back to the
table."""
HELD_PER_WORKER = 2
"""serve holds at most this many rows whose ends are not yet written per worker, plus what its
writes of ends have shown they take (`Bound`)."""
HELD_PER_WRITTEN = 8
"""and this many more for each end of its largest recent write of ends (`Bound`)."""
RECENT_S = 1.0
"""A write of ends is recent for this many seconds."""


def settle(freed: asyncio.Future[None]) -> None:
    """Free the worker waiting on `freed` (its row's run no longer needs it), unless it is."""
    if not freed.done():
        freed.set_result(None)


def _nothing() -> None:
    return None


class Bound:
    """serve's bound on the rows its process holds whose ends are not yet written (`most`), and
    the rows whose ends could not be written (`unwritten`), which count against it.

    The bound is `HELD_PER_WORKER` rows per worker (a row running on each, and as many more
    claimed for them or run with their ends being written), plus `HELD_PER_WRITTEN` for each end
    of the largest write of ends in the last `RECENT_S` (`wrote`). So while ends are written,
    the bound follows the group commit: the workers start their next rows while the ends of the
    last ones are written, and a write carries every end that came meanwhile. While ends fail
    (`failing`), or when no write of ends has come back for `RECENT_S`, it is the rows per
    worker alone.

    A row whose end could not be written (the store refused it, or did not take it for the whole
    lease), or that could not be given back, stays `running` in the table under its lease, and
    then runs again: this process still holds it (`unwritten`) until its lease may have run out,
    `lease_ms` after the failure (its lease is renewed no more: the beat renews only the rows
    serve runs). `freed()` is called whenever the bound may have room again: such a row is
    forgotten, or ends are written again after failing; `lapsed()` as such a row is forgotten
    (a claim may take it back now). `held()` counts the rows held now
    (serve's feed counts them: `Feed.held`), which may be more than `most()`: the rows taken
    while the bound was larger stay held as it shrinks (ends begin to fail, or no write of ends
    came back for `RECENT_S`).

    Args:
        lease_ms: the queue's lease, in milliseconds.
    """

    def __init__(self, lease_ms: int) -> None:
        self.lease_ms = lease_ms
        self.unwritten: dict[int, asyncio.TimerHandle] = {}  # row id: the timer to forget it
        self.freed: Callable[[], None] = _nothing
        self.lapsed: Callable[[], None] = _nothing  # (serve's: its claims' front)
        self.held: Callable[[], int] = self.unwritten.__len__  # (serve's feed: `Feed.held`)
        self.base = 0  # `HELD_PER_WORKER` per worker, while serve runs
        self.wrote = 0  # the ends of the largest recent write of ends
        self.wrote_at = 0.0  # when it was written (monotonic, s)
        self.last_at = 0.0  # when the last write of ends was written (monotonic, s)
        self.failing = False  # writing ends failed, and none has been written since

    def most(self) -> int:
        """The most rows whose ends are not yet written that serve may hold now."""
        if self.failing or time.monotonic() - self.last_at > RECENT_S:
            return self.base
        return self.base + HELD_PER_WRITTEN * self.wrote

    def written(self, ends: int) -> None:
        """A write of ends took `ends`: the largest recent one, unless one as large was written
        within `RECENT_S` before."""
        now = self.last_at = time.monotonic()
        if ends >= self.wrote or now - self.wrote_at > RECENT_S:
            self.wrote, self.wrote_at = ends, now

    def serve(self, workers: int) -> None:
        """serve begins with `workers` workers: its bound starts at the rows per worker alone."""
        self.clear()
        self.base, self.wrote, self.failing = workers * HELD_PER_WORKER, 0, False
        self.wrote_at = self.last_at = 0.0

    def hold(self, row_id: int) -> None:
        """`row_id`'s end could not be written: held until its lease may have run out."""
        timer = self.unwritten.pop(row_id, None)
        if timer is not None:
            timer.cancel()
        loop = asyncio.get_running_loop()
        self.unwritten[row_id] = loop.call_later(self.lease_ms / 1_000, self._forget, row_id)

    def _forget(self, row_id: int) -> None:
        if self.unwritten.pop(row_id, None) is not None:
            self.lapsed()
            self.freed()

    def clear(self) -> None:
        """Forget every unwritten row, telling no one (serve begins, or has ended)."""
        for timer in self.unwritten.values():
            timer.cancel()
        self.unwritten.clear()


class Feed:
    """Rows claimed and not yet started (each with the clock readings of its claim and of its
    coming here, µs: `Waiting`), and the workers waiting for one; one feed per run of `serve`.

    A row goes to a waiting worker directly, started as it is handed over, or waits in `rows`
    for the next worker that asks, started as it is taken; a worker taking a row costs no
    future while rows wait. `want()` (serve's wake-up) is called when a worker finds nothing, or
    leaves `low` rows or fewer behind it.

    `kinds` is what a push may hand to an idle worker here: the kinds serve claims now (none
    paused), less the `limited` ones (with a concurrency limit), whose rows only a claim may
    take, since a claim counts them against their limit.

    `now` is the queue's clock (µs), which stamps when each row came here.

    `bound` bounds the rows held whose ends are not yet written (see the module): a row is
    started only while fewer than `bound.most()` are started and not yet ended or unwritten,
    and `wanted` and `has_unpromised_idle` leave room for no more than that in all. When room
    comes back (a row ends, an unwritten one is forgotten, ends are written again), rows waiting
    here go to idle workers and `want()` wakes the claim loop.
    """

    def __init__(
        self,
        want: Callable[[], None],
        kinds: Sequence[str],
        start: Start,
        limited: Collection[str] = (),
        *,
        now: Callable[[], int],
        bound: Bound,
    ) -> None:
        self.limited = frozenset(limited)
        self.kinds = frozenset(kinds)  # what serve claims now (none paused), less `limited`
        self.rows: collections.deque[Waiting] = collections.deque()
        self.now = now
        self.idle: collections.deque[asyncio.Future[Taken | None]] = collections.deque()
        self.start = start
        self.want = want
        self.low = 0
        self.tasks: dict[asyncio.Task[None], int] = {}  # rows started and not yet ended: ids
        # When each busy worker started its row (loop time, s), until the row frees it.
        self.busy_since: dict[asyncio.Future[None], float] = {}
        self.promised = 0  # idle workers a push in flight is claiming a row for
        self.closed = False
        self.bound = bound  # on the rows held whose ends are not yet written
        bound.freed = self._room_back
        bound.held = self.held
        self.starved = False  # the bound left the claim loop less than it wanted

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
        if self.starved or (self.rows and self.idle):  # (rows wait for idle workers: the bound)
            self._room_back()

    def held(self) -> int:
        """How many rows this process holds now whose ends are not yet written, each once: the
        rows started and not yet ended, those claimed and waiting here, and the unwritten ones.
        (What a push in flight may claim is not held yet.)"""
        return len({*self.tasks.values(), *self.waiting_ids(), *self.bound.unwritten})

    def waiting_ids(self) -> list[int]:
        """The ids of the rows claimed and waiting here, in the order they came."""
        return [row.id for row, _claimed_at, _came in self.rows]

    def startable(self) -> bool:
        """Whether a row may start now: fewer than the bound are started and not yet ended, or
        unwritten."""
        return len(self.tasks) + len(self.bound.unwritten) < self.bound.most()

    def room(self) -> int:
        """How many more rows this process may claim now (a claim, or a push for an idle
        worker): the bound less the rows held whose ends are not yet written."""
        held = len(self.tasks) + len(self.bound.unwritten) + len(self.rows) + self.promised
        return self.bound.most() - held

    def _room_back(self) -> None:
        """The bound may have room again (a row ended while it kept rows from starting or from
        being claimed, an unwritten one was forgotten, ends are written again): rows waiting
        here start on idle workers, and the claim loop is woken if it may claim."""
        if self.closed:
            return
        while self.rows and self.idle and self.startable():
            waiter = self.idle.popleft()
            if not waiter.done():
                row, claimed_at, _came = self.rows.popleft()
                waiter.set_result(self._taken(row, claimed_at))
        if self.room() > 0:
            self.starved = False
            self.want()

    def has_unpromised_idle(self) -> bool:
        """Whether a worker waits with no row promised to it by a push in flight, and a row
        pushed for it may be held (`room`)."""
        return not self.closed and len(self.idle) > self.promised and self.room() > 0

    async def get(self) -> Taken | None:
        """The next row for a worker, started, waiting for one; None once the feed is
        closed."""
        if self.closed:
            return None
        if self.rows and self.startable():
            row, claimed_at, _came = self.rows.popleft()
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
                # (It counts as come no later than the rows behind it: `take_stale` reads the
                # rows in the order they came.)
                came = min(self.now(), self.rows[0][2]) if self.rows else self.now()
                self.rows.appendleft((handed[0], handed[1], came))
            raise
        finally:
            if waiter in self.idle:  # (a miss would raise, and its message reprs the future)
                self.idle.remove(waiter)

    def put(self, rows: Sequence[Claimed], claimed_at: int) -> None:
        """Hand `rows`, claimed at `claimed_at` (µs), to waiting workers, first come first
        served, starting each while rows may start (`startable`); the rest wait here."""
        came = self.now()
        for row in rows:
            while self.idle and self.startable():
                waiter = self.idle.popleft()
                if not waiter.done():
                    waiter.set_result(self._taken(row, claimed_at))
                    break
            else:
                self.rows.append((row, claimed_at, came))

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
        Never more than `room()`: none while this process holds as many rows whose ends are not
        yet written as its bound allows.
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
        wanted, room = idle + ahead - waiting, self.room()
        if wanted > room:
            self.starved = True  # woken when room comes back (`_room_back`)
            return max(0, room)
        return max(0, wanted)

    def nap_s(self, poll_s: float) -> float:
        """How long the claim loop may sleep while it wants nothing: the poll, or less while
        rows wait here (to give back those that wait too long)."""
        return min(poll_s, WAIT_MOST_S) if self.rows else poll_s

    def take_stale(self, now_us: int) -> list[Claimed]:
        """The rows that have waited here longer than `WAIT_MOST_S` at `now_us`, taken out of
        the feed. Rows wait in the order they came, so these are at its front."""
        came_before = now_us - int(WAIT_MOST_S * 1_000_000)
        old = []
        while self.rows and self.rows[0][2] < came_before:
            old.append(self.rows.popleft()[0])
        return old

    def take_all(self) -> list[Claimed]:
        """Every row still waiting, taken out of the feed."""
        taken = [row for row, _claimed_at, _came in self.rows]
        self.rows.clear()
        return taken
