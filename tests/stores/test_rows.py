"""The operator's view of the store: rows by state and counts by kind and state, on every store."""

from __future__ import annotations

from nilo_job.store.contract import Died, NewRow, RowView, Store

P = b'{"n":1}'


async def test_rows_and_counts_by_state_and_kind(store: Store, t: int) -> None:
    first, second, third = await store.push(
        [NewRow("a", P, t + 20), NewRow("a", P, t + 10, "k"), NewRow("b", P, t + 30)]
    )
    assert first is not None
    assert second is not None
    assert third is not None
    (_claimed,) = await store.claim(["b"], t + 30, t + 1_000, 1)
    assert await store.rows("queued", 10) == [
        RowView(second, "a", "queued", P, t + 10, 0, "k", None, None, None, snoozes=0),
        RowView(first, "a", "queued", P, t + 20, 0, None, None, None, None, snoozes=0),
    ]
    assert await store.rows("queued", 1) == [
        RowView(second, "a", "queued", P, t + 10, 0, "k", None, None, None, snoozes=0)
    ]
    assert await store.rows("running", 10) == [
        RowView(
            third, "b", "running", P, t + 30, 1, None, t + 1_000, None, None, started_at=t + 30,
            snoozes=0,
        )
    ]  # fmt: skip
    assert await store.counts() == {("a", "queued"): 2, ("b", "running"): 1}
    assert await store.finish([Died(third, 1, t + 40, "Boom", "it broke")]) == [True]
    (second_claim,) = await store.claim(["a"], t + 10, t + 1_000, 1, "host:7")
    assert await store.finish([Died(second, 1, t + 50, "Nope", "")]) == [True]
    assert second_claim.id == second
    assert await store.rows("dead", 10) == [
        RowView(
            second, "a", "dead", P, t + 10, 1, None, None, "Nope", t + 50, "", "",
            started_at=t + 10, worker="host:7", snoozes=0,
        ),
        RowView(
            third, "b", "dead", P, t + 30, 1, None, None, "Boom", t + 40, "it broke", "",
            started_at=t + 30, snoozes=0,
        ),
    ]  # fmt: skip
    assert await store.counts() == {("a", "queued"): 1, ("a", "dead"): 1, ("b", "dead"): 1}


async def test_rows_of_an_unknown_state_is_refused(store: Store) -> None:
    import pytest

    import nilo_job as job

    with pytest.raises(job.Refusal, match="'queued', 'running', 'dead' or 'done'"):
        await store.rows("finished", 10)


async def test_holding_finds_the_row_of_each_kind_that_holds_a_key(store: Store, t: int) -> None:
    first, second, _third = await store.push(
        [NewRow("a", P, t, "schedule"), NewRow("b", P, t + 5, "schedule"), NewRow("c", P, t)]
    )
    assert await store.holding("schedule", ["c", "b", "a"]) == [
        RowView(first, "a", "queued", P, t, 0, "schedule", None, None, None, snoozes=0),  # type: ignore[arg-type]
        RowView(second, "b", "queued", P, t + 5, 0, "schedule", None, None, None, snoozes=0),  # type: ignore[arg-type]
    ]
    assert await store.holding("other", ["a"]) == []
