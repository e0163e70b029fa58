"""History's end: done rows are kept for the queue's retention, then pruned in small batches.

Every process that serves prunes (the batches are one statement each, so several processes
pruning at once only share the work). A batch deletes at most `BATCH` rows, oldest first; after a
full batch the pruner rests for `REST` times as long as the batch took, so it holds the table
a small part of the time and a claim seldom waits behind it. Its first look is `EVERY_S` after
serve starts, and once nothing is left to prune it looks again after `EVERY_S`.

That pace prunes a few thousand rows a second. A queue that finishes more than that for longer
than `BEHIND_S` falls behind its retention; the pruner then rests only `REST_BEHIND` times a
batch, catching up at some cost to the claims' p99 until it has.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ..store.contract import Store

log = logging.getLogger("nilo_job")

BATCH = 1_000
"""The most done rows one prune statement deletes."""

REST = 200
"""After a full batch, rest this many times the batch's own time before the next."""

BEHIND_S = 60.0
"""Full batches for this long, one after another, mean the pruner is behind the retention."""

REST_BEHIND = 20
"""The rest after a full batch, in batch times, while the pruner is behind."""

EVERY_S = 5.0
"""With nothing left to prune, look again after this many seconds."""


class Pruner:
    """Deletes the done rows of `store` that finished more than `retention_ms` ago.

    Args:
        store: the queue's store.
        retention_ms: how long a done row is kept, in milliseconds (more than 0).
        clock: the queue's clock (µs since the epoch).
    """

    def __init__(self, store: Store, retention_ms: int, clock: Callable[[], int]) -> None:
        self.store = store
        self.retention_ms = retention_ms
        self.clock = clock

    async def prune_at(self, now_us: int, most: int | None = None) -> int:
        """Delete the done rows that finished before `now_us - retention_ms`, in batches, with
        no rest between them; at most `most` (None: all of them). How many went."""
        before = now_us - self.retention_ms * 1_000
        gone = 0
        while most is None or gone < most:
            batch = BATCH if most is None else min(BATCH, most - gone)
            n = await self.store.prune(before, batch)
            gone += n
            if n < batch:
                break
        return gone

    async def run(self) -> None:
        """Prune for as long as serve runs (until cancelled); a failure is logged and tried
        again at the next look."""
        full_since: float | None = None  # when the run of full batches began
        await asyncio.sleep(EVERY_S)  # (its first look: a serve stopped at once prunes nothing)
        while True:
            began = time.monotonic()
            try:
                n = await self.store.prune(self.clock() - self.retention_ms * 1_000, BATCH)
            except Exception as error:
                log.warning("pruning done rows failed (%s); trying again in %g s", error, EVERY_S)
                n = 0
            if n < BATCH:
                full_since = None
                await asyncio.sleep(EVERY_S)
                continue
            took = time.monotonic() - began
            full_since = began if full_since is None else full_since
            behind = began - full_since > BEHIND_S
            await asyncio.sleep(max(took, 0.000_1) * (REST_BEHIND if behind else REST))
