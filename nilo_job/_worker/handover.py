"""Hand-over: a push that finds one of serve's workers idle takes its row straight to it.

When a row is due now and one of serve's workers waits idle on the pushing event loop, the push
inserts the row already claimed (running, under a lease, by this process) and hands it to that
worker: no claim, and no wait for the claim loop to wake. Meanwhile the worker is promised the
row, so that the claim loop does not claim for it too. A push cancelled before its row was sent
writes nothing; one cancelled after lets the write finish and hands the row over itself, never
leaving it running and unrun for a lease. If serve has stopped by then, the row is given back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools

from .._base.group_commit import Grouped
from .._base.process import worker
from ..store.contract import Claimed, NewRow
from .feed import Feed
from .parts import Parts


class HandOver:
    """Pushes of one queue's rows straight to serve's idle workers.

    Args:
        parts: the queue's parts.
        write: the producer's grouped write of one row.
    """

    def __init__(self, parts: Parts, write: Grouped[NewRow, int | None]) -> None:
        self.parts = parts
        self.write = write

    def idle_feed(self, row: NewRow) -> Feed | None:
        """serve's feed, when `row` is due now and one of serve's workers is idle on the
        running event loop with no row promised to it; None otherwise. Never for a kind serve
        does not claim (paused, or not served here)."""
        wakeups = self.parts.wakeups
        feed = wakeups.feed
        if feed is None or not feed.has_unpromised_idle() or row.kind not in feed.kinds:
            return None
        if wakeups.serving_loop() is not asyncio.get_running_loop():
            return None
        return feed if row.run_at <= self.parts.clock.now() else None

    def claim(self, row: NewRow) -> tuple[NewRow, int]:
        """`row` as it is inserted claimed by this process, and the clock reading of the claim
        (µs)."""
        claimed_at = self.parts.clock.now()
        lease_until = claimed_at + self.parts.lease_ms * 1_000
        return dataclasses.replace(row, lease_until=lease_until, worker=worker()), claimed_at

    async def push(self, feed: Feed, row: NewRow, claimed_at: int) -> int | None:
        """Write `row` (from `claim`) for `feed`'s idle worker; its id, or None when its key was
        taken. The caller hands it over (`hand_over`) once it has written the row's status."""
        feed.promised += 1
        write = asyncio.ensure_future(self.write(row))
        try:
            return await asyncio.shield(write)
        except asyncio.CancelledError:
            if not write.done() and not self.write.in_flight(row):
                write.cancel()  # not sent: nothing is written (a group drops it)
            else:
                write.add_done_callback(functools.partial(self._written, feed, row, claimed_at))
            raise
        finally:
            feed.promised -= 1
            if not write.done() or write.cancelled() or write.exception() is not None:
                self.parts.wakeups.wake_at(None)  # the promised worker is idle: claim for it

    def _written(
        self, feed: Feed, row: NewRow, claimed_at: int, write: asyncio.Future[int | None]
    ) -> None:
        """`hand_over` for a push whose caller was cancelled while its row was written."""
        if not write.cancelled() and write.exception() is None:
            row_id = write.result()
            if row_id is not None:
                self.hand_over(feed, row, row_id, claimed_at)
            else:
                self.parts.wakeups.wake_at(None)  # its key was taken: the worker is idle

    def hand_over(self, feed: Feed, row: NewRow, row_id: int, claimed_at: int) -> None:
        """Give the row a push claimed for `feed` to serve's workers; if serve has stopped
        meanwhile, queue it again unrun."""
        claimed = Claimed(
            row_id, row.kind, row.payload, 1, row.run_at, row.unique_key, trace=row.trace
        )
        if not feed.closed:
            feed.put([claimed], claimed_at)
            return
        ends = self.parts.ends
        ends.later(ends.give_back([claimed]))
