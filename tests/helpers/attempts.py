"""A row with four attempts, for the tests of every attempt kept (`jobs.row`, `nilo-job show`,
the row page, Django's `TaskResult.errors`): it failed twice, died, was retried by an operator,
and then succeeded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import nilo_job as job

S = 1_000_000


@dataclass
class Flaky:
    """Fails its first `fails` runs of its `name` (whatever the row's attempt), then returns
    "sent"."""

    nilo_job = "flaky"
    retry = job.Retry(times=2)
    runs: ClassVar[dict[str, int]] = {}

    name: str
    fails: int = 3

    async def run(self) -> str:
        n = Flaky.runs[self.name] = Flaky.runs.get(self.name, 0) + 1
        if n <= self.fails:
            raise ConnectionError(f"the provider is down (run {n})")
        return "sent"


async def four_attempts(jobs: job.Jobs, t: int, name: str) -> int:
    """Push `Flaky(name)` and take it through four attempts, on the drains' clock: failed at
    t and t + 1 s, died at t + 2 s, retried by `retry_many`, done at t + 3 s. Its id."""
    row_id = await jobs.push(Flaky(name), at=t)
    assert row_id is not None
    for n in range(3):
        assert await jobs.run_one_at(t + n * S) is True
    dead = await jobs.row(row_id)
    assert dead is not None
    assert dead.state == "dead"
    assert await jobs.retry_many([row_id]) == 1
    assert await jobs.run_one_at(t + 3 * S) is True
    return row_id
