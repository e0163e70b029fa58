"""Wake-ups: how serve in this process hears of work before its next poll.

serve's claim loop sleeps `poll_ms` when nothing is due. What wakes it sooner comes through here:
a push from this process (at once for a row due now; when due for a row due later), a retry's
wait, a schedule's next tick, a row given back, `jobs.wake()` from any thread, and another
process's push (PostgreSQL's NOTIFY, which carries the row's due time). A push of a row due now
may also find one of serve's workers idle on its own event loop (`idle_feed`), claim the row
itself and hand it over, with no claim at all.

`Wakeups` is serve's presence as the rest of the process sees it: the loop it runs on, the
`Wakeup` its claim loop sleeps on, the due times it knows of (a heap) and its feed. Outside serve
every call is a no-op; it is safe from any thread, and a forked child (which has no serve) is told
apart by its pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import os

from .._clock import Clock
from .feed import Feed

_DUE_KNOWN_MOST = 4_096  # later due times kept for a wake-up; past that, the poll finds rows


class Wakeup:
    """The flag serve's claim loop sleeps on: set by every wake-up, cleared by the loop as it
    looks for work. Like `asyncio.Event` with `asyncio.timeout` around its wait, for one waiter
    and at the cost of one future and one timer: the loop sleeps here every time it is idle,
    and what it spends between a NOTIFY and its claim is latency."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        """Set the flag and wake the sleeper, if any (on the loop's thread only)."""
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def sleep(self, seconds: float) -> None:
        """Until the flag is set or `seconds` have passed, whichever comes first (at once if it
        is set already). One sleeper at a time."""
        if self._set:
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(seconds, _ring, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None


def _ring(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Wakeups:
    """Serve's wake-up in this process, and what a push needs to reach it.

    Args:
        clock: the queue's clock, by which due times are compared.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pid = 0
        self.wakeup: Wakeup | None = None
        self.feed: Feed | None = None  # serve's, once its workers run
        # When rows this process knows of fall due later (µs, a heap): pushed with a delay, a
        # retry's wait, a schedule's next tick, another process's NOTIFY.
        self.due: list[int] = []

    def start(self, loop: asyncio.AbstractEventLoop) -> Wakeup:
        """serve begins on `loop`: the flag it sleeps on, set by every wake-up from now on."""
        self.loop, self.pid = loop, os.getpid()
        self.wakeup = Wakeup()
        self.due = []
        return self.wakeup

    def stop(self) -> None:
        """serve has ended: wake-ups are no-ops again."""
        self.feed = None
        self.loop = self.wakeup = None

    def serving_loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop `serve` runs on in this process, if it runs here (not in a parent this
        process was forked from)."""
        loop = self.loop
        if loop is None or self.pid != os.getpid() or loop.is_closed():
            return None
        return loop

    def idle_feed(self, run_at: int, kind: str) -> Feed | None:
        """serve's feed, when a row of `kind` due at `run_at` (µs) is due now and one of serve's
        workers is idle on the running event loop with no row promised to it: the push may then
        insert the row already claimed and hand it to that worker (no claim, no wait for the
        claim loop). Never for a kind serve does not claim (paused, or not served here)."""
        feed = self.feed
        if feed is None or not feed.has_unpromised_idle() or kind not in feed.kinds:
            return None
        if self.serving_loop() is not asyncio.get_running_loop():
            return None
        return feed if run_at <= self.clock.now() else None

    def wake_at(self, run_at: int | None) -> None:
        """Wake serve's claim loop for a row due at `run_at` (µs, the queue's clock; None for
        now): at once when the row is due, else when it falls due, rather than at the next
        poll. Safe to call from any thread; a no-op when serve is not running here.

        A row another process pushed is due by that process's clock, which may run a few
        milliseconds ahead of this one: a row due "now" there is then found here at that time,
        not a poll later.
        """
        loop = self.loop
        if loop is None or self.pid != os.getpid():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._note(run_at)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed between the check and the call
            loop.call_soon_threadsafe(self._note, run_at)

    def _note(self, run_at: int | None) -> None:
        wakeup = self.wakeup
        if wakeup is None:
            return
        if run_at is None or run_at <= self.clock.now():
            wakeup.set()
            return
        due = self.due
        if len(due) >= _DUE_KNOWN_MOST:
            # Times already past wake nobody (the claim loop claims what is due whenever a
            # worker is free); past the cap, the latest go, and the poll finds their rows.
            now = self.clock.now()
            # (nsmallest's list is sorted, so it is a heap already)
            due[:] = heapq.nsmallest(_DUE_KNOWN_MOST // 2, (at for at in due if at > now))
        earliest = not due or run_at < due[0]
        heapq.heappush(due, run_at)
        if earliest:
            wakeup.set()  # the claim loop sleeps until this earlier time instead

    def sleep_s(self, poll_s: float, claimed_at: int) -> float:
        """How long the claim loop sleeps when nothing more is due: `poll_s`, or less when a
        row this process knows of falls due sooner. Due times up to `claimed_at` (µs, the
        reading the last claim used) were covered by that claim."""
        due = self.due
        while due and due[0] <= claimed_at:
            heapq.heappop(due)
        if not due:
            return poll_s
        return min(poll_s, max(0.0, (due[0] - self.clock.now()) / 1_000_000))
