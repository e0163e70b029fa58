"""push_many: bulk pushes in one transaction, all or nothing, ids in order, on every store."""

from __future__ import annotations

import dataclasses
import math

import pytest

import nilo_job as job

ran: list[int] = []


@dataclasses.dataclass
class Item:
    nilo_job = "item"
    retry = job.Retry.NONE

    n: int
    score: float = 0.0

    async def run(self) -> None:
        ran.append(self.n)


@dataclasses.dataclass
class Other:
    nilo_job = "other"
    retry = job.Retry.NONE

    def run(self) -> None:
        ran.append(-1)


async def test_push_many_returns_ids_in_order_and_the_rows_run_in_order(
    store: job.Store, t: int
) -> None:
    ran.clear()
    jobs = job.Jobs(kinds=[Item, Other], store=store)
    ids = await jobs.push_many([Item(n) for n in range(300)] + [Other()], at=t)
    assert len(ids) == 301
    assert ids == sorted(ids)
    assert len(set(ids)) == 301
    assert await jobs.stats() == (301, 0, 0)
    assert await jobs.drain_at(t) == 301
    assert ran == [*range(300), -1]


async def test_push_many_writes_nothing_when_one_value_is_bad(store: job.Store) -> None:
    jobs = job.Jobs(kinds=[Item], store=store)
    with pytest.raises(job.Refusal, match="not finite"):
        await jobs.push_many([Item(1), Item(2, score=math.nan), Item(3)])
    with pytest.raises(job.Refusal, match="after_ms or at, not both"):
        await jobs.push_many([Item(1)], after_ms=1, at=1)
    assert await jobs.stats() == (0, 0, 0)
    assert await jobs.push_many([]) == []


async def test_push_many_on_a_full_memory_store_writes_nothing() -> None:
    store = job.Memory(bytes=100)
    jobs = job.Jobs(kinds=[Item], store=store)
    with pytest.raises(job.QueueFull):
        await jobs.push_many([Item(n) for n in range(10)])
    assert await jobs.stats() == (0, 0, 0)
