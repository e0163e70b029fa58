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


async def test_push_many_names_the_value_it_refuses_by_its_place_in_the_list(
    store: job.Store,
) -> None:
    jobs = job.Jobs(kinds=[Item], store=store)
    values: list[object] = [Item(n) for n in range(10)]
    refusals = {
        2: (
            math.inf,
            "push_many: item 3 of 10 (values[2]): Item.score holds a float that is not finite "
            "(NaN or infinity), which JSON cannot carry: store None or a sentinel instead; "
            "nothing was pushed",
        ),
        9: (
            {"n": 9},
            "push_many: item 10 of 10 (values[9]): push_many takes a value of one of this "
            "queue's kinds (Item), not a dict: build it first, like push_many([Item(...), ...]) "
            "with its fields",
        ),
        0: (
            Item,
            "push_many: item 1 of 10 (values[0]): push_many takes a Item value, not the class "
            "itself: push_many([Item(...), ...]) with its fields",
        ),
        4: (
            Other(),
            "push_many: item 5 of 10 (values[4]): Other is not a kind of this queue (Item): add "
            "it to job.Jobs(kinds=[...])",
        ),
    }
    for index, (bad, said) in refusals.items():
        given = list(values)
        given[index] = Item(index, score=bad) if isinstance(bad, float) else bad
        with pytest.raises(job.Refusal) as refused:
            await jobs.push_many(given)
        assert str(refused.value) == said
    # An option is refused once, for every value: no item is named.
    with pytest.raises(job.Refusal) as refused:
        await jobs.push_many(values, after_ms=-1)
    assert str(refused.value) == (
        "push_many(after_ms=-1) is below 0: after_ms must be whole milliseconds from 0 to "
        "315,360,000,000 (ten years)"
    )
    assert await jobs.stats() == (0, 0, 0)


async def test_push_many_on_a_full_memory_store_writes_nothing() -> None:
    store = job.Memory(bytes=100)
    jobs = job.Jobs(kinds=[Item], store=store)
    with pytest.raises(job.QueueFull):
        await jobs.push_many([Item(n) for n in range(10)])
    assert await jobs.stats() == (0, 0, 0)
