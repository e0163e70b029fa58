"""Wake-ups: how serve in this process hears of work before its next poll.

serve's claim loop sleeps `poll_ms` when nothing is due. What wakes it sooner comes through here:
a push from this process (at once for a row due now; when due for a row due later), a retry's
wait, a schedule's next tick, a row given back, `jobs.wake()` from any thread, and another
process's push (PostgreSQL's NOTIFY, which carries the row's due time). (A push of a row due now
that finds one of serve's workers idle hands the row over instead: `handover`.)

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

from .._base.clock import Clock
from .feed import Feed
from .front import Front

_DUE_KNOWN_MOST = 4_096  # later due times kept for a wake-up; past that, the poll finds rows


class Wakeup:
    """The flag serve's claim loop sleeps on: set by every wake-up, cleared by the loop as it
    looks for work (an `asyncio.Event`, on the loop's thread only)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        """Set the flag and wake the sleeper, if any."""
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    async def sleep(self, seconds: float) -> None:
        """Until the flag is set or `seconds` have passed, whichever comes first (at once if it
        is set already)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._event.wait()


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
        self.front = Front()  # where serve's next claim starts reading

    def start(self, loop: asyncio.AbstractEventLoop) -> Wakeup:
        """serve begins on `loop`: the flag it sleeps on, set by every wake-up from now on."""
        self.loop, self.pid = loop, os.getpid()
        self.wakeup = Wakeup()
        self.due = []
        self.front = Front()
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
        if run_at is not None:
            self.front.woken(run_at)
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
