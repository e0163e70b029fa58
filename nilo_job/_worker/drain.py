"""The test helpers: `drain`, `drain_at`, `run_one` and `run_one_at` run due rows here and now.

A test moves the clock by handing a moment to `drain_at(now_us)`: the claim, the lease, a retry's
wait and a schedule's next tick all read that one number, so tomorrow, a backoff or a lease is a
call rather than a sleep. Rows run one at a time, in the caller's task, through the same
`Runner` that serve uses.
"""

from __future__ import annotations

import time

from .._bounds import moment
from .._process import worker
from .parts import Parts
from .runner import Runner


class Drain:
    """Runs one queue's due rows at a given moment, through the queue's `parts` and `runner`."""

    def __init__(self, parts: Parts, runner: Runner) -> None:
        self.store = parts.store
        self.names = tuple(parts.kinds)
        self.lease_ms = parts.lease_ms  # the lease a claim takes, on the drain's clock
        self.runner = runner
        self.observers = parts.observers

    async def run_one_at(self, now_us: int) -> bool:
        """`Jobs.run_one_at`: True if a run was called.

        Raises:
            Refusal: `now_us` is not a moment a store can hold (`_bounds.moment`).
        """
        moment(now_us, "run_one_at({})", "now_us")
        return await self._run_one_at(now_us, await self.claimable())

    async def _run_one_at(self, now_us: int, names: tuple[str, ...]) -> bool:
        """One due row of the kinds `names` claimed and run at `now_us`; True if run was called."""
        if not names:
            return False
        while True:
            began = time.monotonic()
            rows = await self.store.claim(
                names, now_us, now_us + self.lease_ms * 1_000, 1, worker()
            )
            if self.observers.all:
                self.observers.claimed(rows, now_us, began)
            if not rows:
                return False
            if await self.runner.execute(rows[0], lambda: now_us):
                return True

    async def drain_at(self, now_us: int) -> int:
        """`Jobs.drain_at`: how many runs were called.

        Raises:
            Refusal: `now_us` is not a moment a store can hold (`_bounds.moment`).
        """
        moment(now_us, "drain_at({})", "now_us")
        count = 0
        names = await self.claimable()
        while await self._run_one_at(now_us, names):
            count += 1
        return count

    async def claimable(self) -> tuple[str, ...]:
        """The kinds to claim: every kind of the queue that is not paused."""
        paused = await self.store.paused()
        return tuple(name for name in self.names if name not in paused)
