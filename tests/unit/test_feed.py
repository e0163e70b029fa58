"""How much serve's claim loop claims ahead of its free workers (as many rows as the workers
would start within 20 ms at the runs' recent pace, at most 64 per worker, and within the bound
on the rows the process holds), and how long a row claimed ahead may wait for one."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from nilo_job._worker.feed import Bound, Feed
from nilo_job.store.contract import Claimed


def _feed(workers: int, largest_write: int) -> Feed:
    """A feed of serve's with `workers` workers, none idle nor busy, no row waiting, whose
    largest recent write of ends took `largest_write` ends."""
    bound = Bound(lease_ms=30_000)
    bound.serve(workers)
    bound.written(largest_write)
    return Feed(
        lambda: None, ["k"], lambda row, claimed_at, freed: None, now=lambda: 0, bound=bound
    )


@pytest.mark.parametrize(
    ("pace_s", "workers", "expected"),
    [
        (0.000_01, 4, 256),  # fast runs: 64 a worker
        (0.000_01, 1, 64),
        (0.001, 4, 80),  # 1-ms runs: what 4 workers start in 20 ms
        (0.005, 2, 8),
        (0.05, 4, 1),  # 50-ms runs: 4 workers start 1.6 in 20 ms
        (0.1, 4, 0),  # none ahead
    ],
)
async def test_a_claim_takes_ahead_what_the_workers_start_within_20_ms_at_most_64_each(
    pace_s: float, workers: int, expected: int
) -> None:
    feed = _feed(workers, largest_write=100)
    assert feed.wanted(pace_s, workers) == expected
    assert feed.low == expected // 2  # the next claim once half of it has started


async def test_a_claim_ahead_stays_within_the_rows_the_process_may_hold() -> None:
    # The bound: 2 a worker, plus 8 for each end of the largest recent write of ends.
    feed = _feed(4, largest_write=10)
    assert feed.wanted(0.000_01, 4) == 4 * 2 + 8 * 10
    assert feed.starved  # woken when room comes back


async def test_a_row_waits_its_time_from_when_it_came_and_one_handed_back_keeps_its_place() -> None:
    clock = [1_000_000]  # the queue's clock, µs
    bound = Bound(lease_ms=30_000)
    bound.serve(1)
    feed = Feed(
        lambda: None, ["k"], lambda row, claimed_at, freed: None, now=lambda: clock[0], bound=bound
    )  # (a row handed to a worker is not started here: its worker hands it back if cancelled)
    worker = asyncio.create_task(feed.get())
    await asyncio.sleep(0)  # the worker waits for a row
    # A claim sent long before it was answered: row 1 goes to the waiting worker, 2 waits.
    feed.put([Claimed(1, "k", b"{}", 1, 0, None), Claimed(2, "k", b"{}", 1, 0, None)], 0)
    clock[0] += 100_000
    worker.cancel()  # before it took row 1, which waits again, first
    with contextlib.suppress(asyncio.CancelledError):
        await worker
    assert feed.waiting_ids() == [1, 2]
    clock[0] += 100_000
    assert feed.take_stale(clock[0]) == []  # 200 ms since they came
    clock[0] += 100_000
    assert [row.id for row in feed.take_stale(clock[0])] == [1, 2]  # 300 ms: both go back
