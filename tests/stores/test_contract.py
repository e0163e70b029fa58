"""The store contract, asked of each store directly: push, claim, finish, cancel, stats, dead
rows, retry_dead. The queue decides; a store applies what it is handed, in one step, and answers.

Every test runs on `job.Memory` and on SQLite (the `store` fixture), so a third store passes by
passing this file.
"""

import sqlite3
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.store.contract import (
    Claimed,
    DeadRow,
    Died,
    Done,
    NewRow,
    Released,
    Retrying,
    Store,
)

P = b'{"n":1}'
LEASE = 60_000_000


def new(run_at: int, kind: str = "a", payload: bytes = P, unique: str | None = None) -> NewRow:
    return NewRow(kind, payload, run_at, unique)


async def claim_one(store: Store, now: int, kinds: tuple[str, ...] = ("a",)) -> Claimed:
    rows = await store.claim(list(kinds), now, now + LEASE, 1)
    assert len(rows) == 1
    return rows[0]


async def test_each_store_satisfies_the_protocol(store: Store) -> None:
    assert isinstance(store, Store)


async def test_an_empty_store_counts_nothing_and_claims_nothing(store: Store, t: int) -> None:
    assert await store.stats() == job.Stats(0, 0, 0)
    assert await store.claim(["a"], t, t + LEASE, 10) == []
    assert await store.dead_ones(10) == []


async def test_push_answers_a_new_id_per_row_in_order(store: Store, t: int) -> None:
    first = await store.push([new(t), new(t)])
    second = await store.push([new(t)])
    ids = [*first, *second]
    assert all(isinstance(i, int) for i in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == 3
    assert await store.stats() == (3, 0, 0)


async def test_a_unique_key_holds_one_queued_row_per_kind(store: Store, t: int) -> None:
    (first,) = await store.push([new(t, unique="k")])
    assert first is not None
    assert await store.push([new(t, unique="k")]) == [None]
    # In one call: the second row with the key finds the first.
    (other_kind, again) = await store.push([new(t, kind="b", unique="k"), new(t, "b", unique="k")])
    assert other_kind is not None
    assert again is None
    # Rows without a key never collide.
    assert None not in await store.push([new(t), new(t)])
    assert await store.stats() == (4, 0, 0)


async def test_a_unique_key_and_a_kind_are_matched_byte_for_byte(store: Store, t: int) -> None:
    # No store folds case, pads with spaces or reads é in two spellings as one: each is its own.
    keys = ["k", "K", "k ", "\u00e9", "e\u0301"]
    assert None not in await store.push([new(t, unique=key) for key in keys])
    assert await store.push([new(t, unique=key) for key in keys]) == [None] * len(keys)
    (upper,) = await store.push([new(t, kind="A")])
    assert [row.id for row in await store.claim(["A"], t, t + LEASE, 10)] == [upper]
    assert await store.stats() == (5, 1, 0)


async def test_claim_takes_due_rows_in_run_at_order_and_counts_the_attempt(
    store: Store, t: int
) -> None:
    (late,) = await store.push([new(t + 2, payload=b'{"n":2}')])
    (early,) = await store.push([new(t, payload=b'{"n":0}')])
    (middle,) = await store.push([new(t + 1, payload=b'{"n":1}', unique="u")])
    (future,) = await store.push([new(t + 3)])
    rows = await store.claim(["a"], t + 2, t + 2 + LEASE, 10)
    assert rows == [
        Claimed(early, "a", b'{"n":0}', 1, t, None),
        Claimed(middle, "a", b'{"n":1}', 1, t + 1, "u"),
        Claimed(late, "a", b'{"n":2}', 1, t + 2, None),
    ]
    assert future not in {row.id for row in rows}
    assert await store.stats() == (1, 3, 0)


async def test_claim_takes_no_more_than_the_limit(store: Store, t: int) -> None:
    ids = await store.push([new(t + i) for i in range(5)])
    rows = await store.claim(["a"], t + 10, t + LEASE, 2)
    assert [row.id for row in rows] == ids[:2]
    assert await store.stats() == (3, 2, 0)


async def test_a_row_is_not_due_a_microsecond_before_its_run_at(store: Store, t: int) -> None:
    (row,) = await store.push([new(t)])
    assert await store.claim(["a"], t - 1, t - 1 + LEASE, 1) == []
    assert (await claim_one(store, t)).id == row


async def test_claim_never_touches_rows_of_other_kinds(store: Store, t: int) -> None:
    (other,) = await store.push([new(t, kind="b")])
    assert await store.claim(["a"], t, t + LEASE, 10) == []
    assert await store.stats() == (1, 0, 0)
    # Untouched: its first claim is still attempt one, due when it was.
    assert await store.claim(["b", "c"], t, t + LEASE, 10) == [Claimed(other, "b", P, 1, t, None)]


async def test_a_running_row_is_claimed_again_only_once_its_lease_ran_out(
    store: Store, t: int
) -> None:
    (row,) = await store.push([new(t)])
    assert (await store.claim(["a"], t, t + 100, 1))[0].attempts == 1
    assert await store.claim(["a"], t + 99, t + 199, 1) == []
    again = await store.claim(["a"], t + 100, t + 200, 1)
    assert again == [Claimed(row, "a", P, 2, t, None, retaken_from="")]  # held by no named worker
    assert await store.stats() == (0, 1, 0)


async def test_a_row_pushed_with_a_lease_is_running_at_its_first_attempt(
    store: Store, t: int
) -> None:
    claimed_row = NewRow("a", P, t, "k", lease_until=t + 100)
    first, queued = await store.push([claimed_row, new(t)])
    assert await store.stats() == (1, 1, 0)
    # Nobody else takes it while its lease lasts; the queued one is taken.
    assert await store.claim(["a"], t + 99, t + 199, 10) == [Claimed(queued, "a", P, 1, t, None)]
    # It holds its unique key like any running row.
    assert await store.push([new(t, unique="k")]) == [None]
    # Its first attempt's end applies; had its pusher died, the lease would run out.
    assert await store.finish([Done(first, 1)]) == [True]
    assert await store.stats() == (0, 1, 0)


async def test_a_row_pushed_with_a_lease_is_taken_again_once_it_ran_out(
    store: Store, t: int
) -> None:
    (row,) = await store.push([NewRow("a", P, t, None, lease_until=t + 100)])
    assert await store.claim(["a"], t + 99, t + 199, 1) == []
    taken = await store.claim(["a"], t + 100, t + 200, 1)
    assert taken == [Claimed(row, "a", P, 2, t, None, retaken_from="")]


async def test_done_deletes_the_row_and_frees_its_key(store: Store, t: int) -> None:
    (row,) = await store.push([new(t, unique="k")])
    claimed = await claim_one(store, t)
    assert await store.finish([Done(row, claimed.attempts)]) == [True]
    assert await store.stats() == (0, 0, 0)
    assert await store.claim(["a"], t + LEASE, t + 2 * LEASE, 1) == []
    assert (await store.push([new(t, unique="k")]))[0] is not None


async def test_retrying_queues_the_row_again_at_its_time_and_keeps_the_key(
    store: Store, t: int
) -> None:
    (row,) = await store.push([new(t, unique="k")])
    await claim_one(store, t)
    assert await store.finish([Retrying(row, 1, t + 500, "Boom", "down")]) == [True]
    assert await store.stats() == (1, 0, 0)
    assert await store.push([new(t, unique="k")]) == [None]
    assert await store.claim(["a"], t + 499, t + LEASE, 1) == []
    assert await store.claim(["a"], t + 500, t + LEASE, 1) == [
        Claimed(row, "a", P, 2, t + 500, "k")
    ]


async def test_died_keeps_the_row_with_its_error_and_frees_the_key(store: Store, t: int) -> None:
    (row,) = await store.push([new(t, unique="k")])
    await claim_one(store, t)
    trace = "Traceback (most recent call last):\n  ...\nRejected: no such address\n"
    died = Died(row, 1, t + 7, "Rejected", "no such address", traceback=trace)
    assert await store.finish([died]) == [True]
    assert await store.stats() == (0, 0, 1)
    assert await store.dead_ones(10) == [
        DeadRow(row, "a", "Rejected", 1, P, t + 7, "no such address", trace)
    ]
    assert await store.claim(["a"], t + LEASE, t + 2 * LEASE, 1) == []
    assert (await store.push([new(t, unique="k")]))[0] is not None


async def test_released_queues_the_row_unrun_without_counting_the_attempt(
    store: Store, t: int
) -> None:
    (row,) = await store.push([new(t, unique="k")])
    await claim_one(store, t)
    assert await store.finish([Released(row, 1, t + 3)]) == [True]
    assert await store.stats() == (1, 0, 0)
    assert await store.push([new(t, unique="k")]) == [None]
    assert await store.claim(["a"], t + 3, t + LEASE, 1) == [Claimed(row, "a", P, 1, t + 3, "k")]


async def test_an_end_from_a_claim_that_lost_its_lease_is_not_applied(store: Store, t: int) -> None:
    (row,) = await store.push([new(t)])
    await store.claim(["a"], t, t + 10, 1)
    await store.claim(["a"], t + 10, t + LEASE, 1)  # another worker, attempt 2
    assert await store.finish([Done(row, 1)]) == [False]
    assert await store.finish([Died(row, 1, t + 11, "Boom", "")]) == [False]
    assert await store.stats() == (0, 1, 0)
    assert await store.finish([Done(row, 2)]) == [True]
    assert await store.stats() == (0, 0, 0)


async def test_an_end_for_a_row_that_is_not_running_is_not_applied(store: Store, t: int) -> None:
    (row,) = await store.push([new(t)])
    assert await store.finish([Done(row, 0)]) == [False]
    assert await store.finish([Done(row + 1_000, 1)]) == [False]
    assert await store.stats() == (1, 0, 0)


async def test_finish_answers_each_end_in_order(store: Store, t: int) -> None:
    a, b = await store.push([new(t), new(t)])
    assert a is not None
    assert b is not None
    await store.claim(["a"], t, t + LEASE, 2)
    assert await store.finish([Done(a, 1), Done(b, 5), Died(b, 1, t, "E", "")]) == [
        True,
        False,
        True,
    ]
    assert await store.stats() == (0, 0, 1)


async def test_cancel_deletes_only_a_queued_row(store: Store, t: int) -> None:
    queued, running, waiting, dead = await store.push([new(t), new(t), new(t), new(t)])
    assert None not in (queued, running, waiting, dead)
    rows = await store.claim(["a"], t, t + LEASE, 4)
    assert [row.id for row in rows] == [queued, running, waiting, dead]
    await store.finish([Released(queued, 1, t), Retrying(waiting, 1, t + LEASE, "E", "")])
    await store.finish([Died(dead, 1, t, "E", "")])
    assert await store.cancel(queued) is True
    assert await store.cancel(queued) is False
    assert await store.cancel(running) is False
    assert await store.cancel(waiting) is True
    assert await store.cancel(dead) is False
    assert await store.cancel(10_000) is False
    assert await store.stats() == (0, 1, 1)


async def test_cancel_frees_the_unique_key(store: Store, t: int) -> None:
    (row,) = await store.push([new(t, unique="k")])
    assert row is not None
    assert await store.cancel(row) is True
    assert (await store.push([new(t, unique="k")]))[0] is not None


async def test_dead_ones_are_newest_first_then_by_id(store: Store, t: int) -> None:
    ids = await store.push([new(t) for _ in range(4)])
    await store.claim(["a"], t, t + LEASE, 4)
    a, b, c, d = ids
    assert None not in ids
    await store.finish([Died(a, 1, t + 5, "E", ""), Died(b, 1, t + 1, "E", "")])
    await store.finish([Died(c, 1, t + 5, "E", ""), Died(d, 1, t + 3, "E", "")])
    assert [row.id for row in await store.dead_ones(10)] == [c, a, d, b]
    assert [row.id for row in await store.dead_ones(2)] == [c, a]


async def test_retry_dead_queues_a_dead_row_from_attempt_one(store: Store, t: int) -> None:
    (row,) = await store.push([new(t, unique="k")])
    assert row is not None
    await claim_one(store, t)
    await store.finish([Died(row, 1, t, "E", "boom")])
    assert await store.retry_dead(row, t + 50) is True
    assert await store.stats() == (1, 0, 0)
    assert await store.dead_ones(10) == []
    assert await store.claim(["a"], t + 49, t + LEASE, 1) == []
    # Attempt one again, due when retried, and without the key it gave up when it died.
    assert await store.claim(["a"], t + 50, t + LEASE, 1) == [Claimed(row, "a", P, 1, t + 50, None)]


async def test_retry_dead_of_a_row_that_is_not_dead_is_false(store: Store, t: int) -> None:
    queued, running = await store.push([new(t + 1), new(t)])
    assert queued is not None
    assert running is not None
    await claim_one(store, t)
    assert await store.retry_dead(queued, t) is False
    assert await store.retry_dead(running, t) is False
    assert await store.retry_dead(10_000, t) is False
    assert await store.stats() == (1, 1, 0)


async def test_payload_bytes_come_back_as_they_went_in(store: Store, t: int) -> None:
    payload = '{"s":"é☃ \\n 😀","n":[1,2.5,null]}'.encode()
    (row,) = await store.push([new(t, payload=payload)])
    assert (await claim_one(store, t)).payload == payload
    await store.finish([Died(row, 1, t, "E", "")])
    assert (await store.dead_ones(1))[0].payload == payload


async def test_memory_refuses_a_call_that_does_not_fit_and_writes_none_of_it(t: int) -> None:
    # (max_payload is the queue's to check, at push: tests/stores/test_payload_limits.py)
    store = job.Memory(bytes=2 * len(P), max_payload=len(P))
    with pytest.raises(job.QueueFull):
        await store.push([new(t), new(t), new(t)])
    assert await store.stats() == (0, 0, 0)
    assert len(await store.push([new(t), new(t)])) == 2
    with pytest.raises(job.QueueFull):
        await store.push([new(t)])
    assert await store.stats() == (2, 0, 0)


async def test_sqlite_create_missing_is_idempotent_and_rows_outlive_the_connection(
    tmp_path: Path, t: int
) -> None:
    url = f"sqlite:///{tmp_path}/q.db"
    first = job.Table(url)
    try:
        await first.create_missing()
        await first.create_missing()
        await first.check()
        (row,) = await first.push([new(t)])
    finally:
        await first.close()
    second = job.Table(url)
    try:
        await second.create_missing()
        assert await second.stats() == (1, 0, 0)
        assert (await claim_one(second, t)).id == row
    finally:
        await second.close()


async def test_sqlite_check_without_the_table_says_to_create_it(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()  # a database, without the table
    store = job.Table(f"sqlite:///{tmp_path}/empty.db")
    try:
        with pytest.raises(job.StoreUnavailable, match="no nilo_jobs table") as caught:
            await store.check()
        assert "create_missing" in str(caught.value)
    finally:
        await store.close()


async def test_sqlite_check_of_a_table_with_other_columns_names_what_is_missing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE nilo_jobs (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    store = job.Table(f"sqlite:///{path}")
    try:
        with pytest.raises(job.StoreUnavailable, match="not nilo-job's") as caught:
            await store.check()
        assert "payload" in str(caught.value)
        assert "run_at" in str(caught.value)
    finally:
        await store.close()


# ------------------------------------------------- an end that hands on a row (schedules)


async def test_an_end_with_then_inserts_that_row_in_the_same_step(store: Store, t: int) -> None:
    a, b, c = await store.push([new(t, unique="k1"), new(t, unique="k2"), new(t, unique="k3")])
    assert None not in (a, b, c)
    await store.claim(["a"], t, t + LEASE, 3)
    assert await store.finish(
        [
            Done(a, 1, new(t + 10, unique="k1")),
            Died(b, 1, t, "E", "", new(t + 20, unique="k2")),
            Retrying(c, 1, t + 30, "E", "", True, new(t + 30, unique="k3")),
        ]
    ) == [True, True, True]
    assert await store.stats() == (4, 0, 1)
    # Each key now belongs to the handed-on row only.
    assert await store.push([new(t, unique=k) for k in ("k1", "k2", "k3")]) == [None] * 3
    rows = await store.claim(["a"], t + 30, t + LEASE, 10)
    assert [(row.run_at, row.unique_key, row.attempts) for row in rows] == [
        (t + 10, "k1", 1),
        (t + 20, "k2", 1),
        (t + 30, None, 2),  # the retried row, lower id first at one run_at
        (t + 30, "k3", 1),
    ]


async def test_an_end_that_does_not_apply_inserts_nothing(store: Store, t: int) -> None:
    (row,) = await store.push([new(t)])
    assert row is not None
    await store.claim(["a"], t, t + 10, 1)
    await store.claim(["a"], t + 10, t + LEASE, 1)
    assert await store.finish([Done(row, 1, new(t + 5, unique="next"))]) == [False]
    assert await store.stats() == (0, 1, 0)
    assert (await store.push([new(t, unique="next")]))[0] is not None


async def test_retrying_with_release_key_gives_the_key_up(store: Store, t: int) -> None:
    (row,) = await store.push([new(t, unique="k")])
    assert row is not None
    await claim_one(store, t)
    assert await store.finish([Retrying(row, 1, t + 5, "E", "", True)]) == [True]
    assert (await store.push([new(t + 100, unique="k")]))[0] is not None
    assert await store.claim(["a"], t + 5, t + LEASE, 1) == [Claimed(row, "a", P, 2, t + 5, None)]


async def test_hand_on_moves_the_key_from_a_running_row_to_a_new_row(store: Store, t: int) -> None:
    (row,) = await store.push([new(t, unique="schedule")])
    assert row is not None
    await claim_one(store, t)
    assert await store.hand_on(row, 1, new(t + 60, unique="schedule")) is True
    assert await store.stats() == (1, 1, 0)
    assert await store.push([new(t, unique="schedule")]) == [None]
    # The running row keeps running, without the key; a second hand-on has nothing to hand.
    assert await store.hand_on(row, 1, new(t + 120, unique="schedule")) is False
    assert await store.finish([Done(row, 1)]) == [True]
    assert await store.claim(["a"], t + 60, t + LEASE, 5) == [
        Claimed(row + 1, "a", P, 1, t + 60, "schedule")
    ]


async def test_hand_on_from_a_row_that_lost_its_claim_writes_nothing(store: Store, t: int) -> None:
    queued, keyless = await store.push([new(t + 1, unique="q"), new(t)])
    assert queued is not None
    assert keyless is not None
    await claim_one(store, t)
    assert await store.hand_on(queued, 0, new(t, unique="x")) is False
    assert await store.hand_on(keyless, 1, new(t, unique="y")) is False
    assert await store.hand_on(keyless, 2, new(t, unique="z")) is False
    assert await store.stats() == (1, 1, 0)
    assert None not in await store.push([new(t, unique=k) for k in ("x", "y", "z")])
