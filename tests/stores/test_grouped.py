"""Concurrent pushes share a transaction (a group commit), on every store, and each caller still
gets its own answer: its id, None for a unique key already held, or its own error."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.store.contract import NewRow, Store


@dataclasses.dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str = ""

    async def run(self) -> None:
        return None


class Counting:
    """Wraps a store's push: counts the calls and their rows, and yields to the loop first (as
    a store that goes to a database does), so that pushes arriving together can group."""

    def __init__(self, store: Store) -> None:
        self.push = store.push
        self.calls: list[int] = []
        store.push = self  # type: ignore[method-assign]

    async def __call__(self, rows: Sequence[NewRow]) -> list[int | None]:
        self.calls.append(len(rows))
        await asyncio.sleep(0)
        return await self.push(rows)


async def test_pushes_that_arrive_together_share_a_write_and_get_their_own_ids(
    store: Store,
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    counting = Counting(store)
    ids = await asyncio.gather(*(jobs.push(Mail(f"{n}@example.com")) for n in range(40)))
    assert len(set(ids)) == 40
    assert None not in ids
    assert counting.calls == [40]  # pushed in one turn of the loop: one write for all
    assert (await jobs.stats()).queued == 40
    # Each id is the row of its own value.
    rows = {row.id: row.payload for row in await store.rows("queued", 100)}
    for n, row_id in enumerate(ids):
        assert rows[row_id] == f'{{"to":"{n}@example.com"}}'.encode()


async def test_a_push_alone_is_written_alone_and_pushes_one_after_another_each_alone(
    store: Store,
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    counting = Counting(store)
    for n in range(3):
        await jobs.push(Mail(f"{n}@example.com"))
    assert counting.calls == [1, 1, 1]


async def test_a_burst_after_a_lone_push_is_written_as_one_group(store: Store) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    counting = Counting(store)
    await jobs.push(Mail("alone@example.com"))  # its turn finds nobody: written alone
    ids = await asyncio.gather(*(jobs.push(Mail(f"{n}@example.com")) for n in range(40)))
    assert len(set(ids)) == 40
    # The burst's first push takes its turn of the loop, and the other 39 join it.
    assert counting.calls == [1, 40]
    assert (await jobs.stats()).queued == 41


async def test_a_lone_producer_lets_the_loop_turn_at_every_push(
    store: Store,
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    done = False
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    turns = 0
    for n in range(80):
        await jobs.push(Mail(f"{n}@example.com"))
    done = True
    await ticking
    # A turn at every push at least, whether or not the write itself yields.
    assert turns >= 80


async def test_a_push_cancelled_in_its_turn_of_the_loop_writes_nothing(store: Store) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    push = asyncio.create_task(jobs.push(Mail("never")))
    await asyncio.sleep(0)  # the push has started, and lets the loop turn before it writes
    push.cancel()
    with pytest.raises(asyncio.CancelledError):
        await push
    assert (await jobs.stats()).queued == 0
    assert isinstance(await jobs.push(Mail("after")), int)  # the group is free again
    assert (await jobs.stats()).queued == 1


async def test_a_unique_key_pushed_ten_times_at_once_is_one_row(store: Store) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    Counting(store)
    ids = await asyncio.gather(*(jobs.push(Mail("a@example.com"), unique="k") for _ in range(10)))
    assert len([row_id for row_id in ids if row_id is not None]) == 1
    assert ids.count(None) == 9
    assert (await jobs.stats()).queued == 1


async def test_one_callers_bad_row_is_not_another_callers_error() -> None:
    store = job.Memory(max_payload=100)
    jobs = job.Jobs(kinds=[Mail], store=store)
    Counting(store)
    results = await asyncio.gather(
        jobs.push(Mail("first@example.com")),
        jobs.push(Mail("second@example.com")),
        jobs.push(Mail("x" * 200)),
        jobs.push(Mail("fourth@example.com")),
        return_exceptions=True,
    )
    assert isinstance(results[2], job.PayloadTooLarge)
    assert all(isinstance(results[n], int) for n in (0, 1, 3))
    assert (await jobs.stats()).queued == 3


async def test_an_outage_fails_every_push_of_its_group_and_writes_nothing() -> None:
    store = job.Memory()
    jobs = job.Jobs(kinds=[Mail], store=store)
    counting = Counting(store)
    real = counting.push
    gate = asyncio.Event()

    async def down(rows: Sequence[NewRow]) -> list[int | None]:
        if len(rows) > 1:
            raise job.StoreUnavailable("the database went away")
        await gate.wait()
        return await real(rows)

    counting.push = down
    first = asyncio.create_task(jobs.push(Mail("first@example.com")))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(jobs.push(Mail(f"{n}@example.com"))) for n in range(3)]
    await asyncio.sleep(0)
    gate.set()
    assert isinstance(await first, int)
    for task in rest:
        with pytest.raises(job.StoreUnavailable):
            await task
    assert (await jobs.stats()).queued == 1


async def test_a_push_cancelled_before_its_group_is_sent_writes_nothing() -> None:
    store = job.Memory()
    jobs = job.Jobs(kinds=[Mail], store=store)
    counting = Counting(store)
    real = counting.push
    gate = asyncio.Event()

    async def slow(rows: Sequence[NewRow]) -> list[int | None]:
        await gate.wait()
        return await real(rows)

    counting.push = slow
    first = asyncio.create_task(jobs.push(Mail("first@example.com")))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(jobs.push(Mail("cancelled@example.com")))
    kept = asyncio.create_task(jobs.push(Mail("kept@example.com")))
    await asyncio.sleep(0)
    waiting.cancel()
    gate.set()
    assert isinstance(await first, int)
    assert isinstance(await kept, int)
    with pytest.raises(asyncio.CancelledError):
        await waiting
    payloads = sorted(row.payload for row in await store.rows("queued", 10))
    assert payloads == [b'{"to":"first@example.com"}', b'{"to":"kept@example.com"}']


def test_two_event_loops_pushing_through_one_queue_at_once_lose_nothing(tmp_path: Path) -> None:
    # The sync face's loop thread and an application's own loop may push through one Jobs at
    # the same moment: each push must get its own row, and none may touch the other loop's
    # futures.
    store = job.Table(f"sqlite:///{tmp_path / 'two.db'}")
    jobs = job.Jobs(kinds=[Mail], store=store)
    errors: list[BaseException] = []
    ids: list[int | None] = []
    lock = threading.Lock()

    def pushing(first: int) -> None:
        async def many() -> None:
            got = await asyncio.gather(
                *(jobs.push(Mail(f"{n}@example.com")) for n in range(first, first + 200))
            )
            with lock:
                ids.extend(got)

        try:
            asyncio.run(many())
        except BaseException as error:  # reported below
            errors.append(error)

    asyncio.run(store.create_missing())
    threads = [threading.Thread(target=pushing, args=(k * 1_000,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert len(ids) == 600
    assert None not in ids
    assert len(set(ids)) == 600
    assert asyncio.run(jobs.stats()).queued == 600
    asyncio.run(store.close())
