"""Where serve's claims start reading: from the front of the rows it claimed last, so that a
transaction holding an old snapshot (which keeps the entries of every row claimed since from
cleanup) does not make every claim read past them; a full claim, from the earliest row and with
the leases that ran out, when a wake-up names a row due before the front, and every few seconds.

On every store: the store's `claim(..., due_from_us=...)`, and serve's use of it. On PostgreSQL
with a real held snapshot: what such a claim reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import psycopg
import pytest

import nilo_job as job
from nilo_job._worker import front
from nilo_job.store.contract import Claimed, Done, NewRow, Store
from nilo_job.store.postgres import SQL
from tests.helpers.serving import until

S = 1_000_000


def row(run_at: int, n: int) -> NewRow:
    return NewRow("k", f'{{"n": {n}}}'.encode(), run_at, None)


async def test_a_claim_from_a_moment_takes_only_the_queued_rows_due_from_it(
    store: Store, t: int
) -> None:
    ids = await store.push([row(t - 3 * S, 0), row(t - 2 * S, 1), row(t - S, 2), row(t + S, 3)])
    # The row due first is claimed, and its lease runs out.
    [expired] = await store.claim(["k"], t - 3 * S, t - S // 2, 1, "host-a:1")
    assert expired.id == ids[0]

    taken = await store.claim(["k"], t, t + 60 * S, 10, "host-b:2", due_from_us=t - 2 * S)

    assert [(r.id, r.run_at, r.retaken_from) for r in taken] == [
        (ids[1], t - 2 * S, None),
        (ids[2], t - S, None),
    ]
    # A full claim takes the row whose lease ran out; the row due later stays queued.
    full = await store.claim(["k"], t, t + 60 * S, 10, "host-b:2")
    assert [(r.id, r.retaken_from) for r in full] == [(ids[0], "host-a:1")]


async def test_a_claim_from_a_moment_takes_nothing_of_other_kinds_or_before_it(
    store: Store, t: int
) -> None:
    await store.push([row(t - 2 * S, 0), NewRow("other", b"{}", t - S, None)])
    assert await store.claim(["k"], t, t + 60 * S, 10, due_from_us=t - S) == []
    assert [r.kind for r in await store.claim(["k"], t, t + 60 * S, 10)] == ["k"]


ran: list[int] = []
gate: asyncio.Event  # (each test's own: an event belongs to its test's loop)


@dataclasses.dataclass
class Mark:
    nilo_job = "mark"
    retry = job.Retry.NONE

    n: int

    async def run(self) -> None:
        if self.n < 0:
            await gate.wait()  # holds the worker
        ran.append(self.n)


class Claims:
    """The `due_from_us` of every claim serve sends."""

    def __init__(self, store: Store) -> None:
        self.claim = store.claim
        self.from_us: list[int | None] = []
        store.claim = self  # type: ignore[method-assign]

    async def __call__(self, *args: Any, **kwargs: Any) -> list[Claimed]:
        self.from_us.append(kwargs.get("due_from_us"))
        return await self.claim(*args, **kwargs)


async def test_serve_claims_from_its_front_and_a_wake_up_before_it_makes_a_full_claim(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    global gate
    monkeypatch.setattr(front, "FULL_S", 3_600.0)  # no full claim but those something asks for
    ran.clear()
    gate = asyncio.Event()
    jobs = job.Jobs(kinds=[Mark], store=store, workers=1, poll_ms=100)
    now = job.now_us()
    await jobs.push(Mark(1), at=now - S)  # queued before serve: its first claim takes it
    claims = Claims(store)
    async with jobs.serving():
        await until("the first row ran", lambda: ran == [1])
        # The polls' claims read from that row's due time, less the margin behind it.
        await until("a claim from the front", lambda: now - S - front.BEHIND_US in claims.from_us)
        await jobs.push(Mark(-1))  # handed to the idle worker, which it holds
        await jobs.push(Mark(2), at=now - 10 * S)  # due long before the front: a full claim
        gate.set()
        await until("the row due before the front ran", lambda: ran == [1, -1, 2])
    assert claims.from_us[0] is None  # serve's first claim is a full one
    assert set(claims.from_us) == {None, now - S - front.BEHIND_US}


async def test_rows_due_before_the_front_are_claimed_one_full_claim_after_another(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows that come due before the front (here pushed with `at` in the past; under load,
    pushes that commit late) are more than one claim takes (a claim takes no more than the
    workers and the rows they have waiting can hold): each full claim that takes such a row is
    followed by another, and every one of them runs at once, not a full claim's interval
    apart."""
    global gate
    monkeypatch.setattr(front, "FULL_S", 3_600.0)  # no full claim but those something asks for
    ran.clear()
    gate = asyncio.Event()
    jobs = job.Jobs(kinds=[Mark], store=store, workers=1, poll_ms=100)
    now = job.now_us()
    await jobs.push(Mark(1), at=now - S)
    claims = Claims(store)
    async with jobs.serving():
        await until("the first row ran", lambda: ran == [1])
        await until("a claim from the front", lambda: now - S - front.BEHIND_US in claims.from_us)
        await jobs.push_many([Mark(n) for n in range(2, 42)], at=now - 10 * S)
        await until("every row due before the front ran", lambda: ran == list(range(1, 42)), 10)
        await until("a claim from the front again", lambda: claims.from_us[-1] is not None)
    assert claims.from_us[0] is None


@pytest.mark.postgres
async def test_a_claim_from_the_front_does_not_read_the_rows_a_held_snapshot_keeps(
    pg_url: str, t: int
) -> None:
    store = job.Table(pg_url)
    await store.open()
    try:
        with psycopg.connect(pg_url, autocommit=True) as held:
            held.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            held.execute("SELECT count(*) FROM nilo_jobs").fetchone()  # the snapshot, held
            # 2,000 rows pushed, claimed and done while it is held: their index entries stay.
            for first in range(0, 2_000, 500):
                await store.push([row(t - 10 * S + n, n) for n in range(first, first + 500)])
                taken = await store.claim(["k"], t, t + 60 * S, 500)
                assert len(taken) == 500
                await store.finish([Done(r.id, r.attempts) for r in taken])
            await store.push([row(t, 1), row(t, 2)])
            with psycopg.connect(pg_url, autocommit=True) as conn:
                full = explained(conn, "claim", t, None)
                quick = explained(conn, "claim_from", t, t - front.BEHIND_US)
            held.execute("ROLLBACK")
    finally:
        await store.close()
    assert full["rows"] == quick["rows"] == 2
    # The full claim read every page of the table the 2,000 rows the snapshot keeps are on
    # (an index scan reads a page once for the entries in a row that point into it).
    assert full["pages"] >= 25, full
    assert quick["pages"] <= 5, quick


def explained(conn: psycopg.Connection[Any], name: str, now: int, from_us: int | None) -> Any:
    """The rows the statement `name` claims at `now`, and the pages its scan of the due rows'
    index read (index and table), in a transaction rolled back, with the settings of the store's
    sessions (no bitmap scan)."""
    params = {"now": now, "lease_until": now + 60 * S, "limit": 16, "kinds": "{k}", "worker": "w"}
    cur = psycopg.ClientCursor(conn)
    conn.execute("BEGIN")
    try:
        conn.execute("SET LOCAL enable_bitmapscan = off")
        conn.execute("SET LOCAL enable_seqscan = off")
        cur.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {SQL[name]}", {**params, "from": from_us}
        )
        found = cur.fetchone()
    finally:
        conn.execute("ROLLBACK")
    assert found is not None
    plan = found[0][0]["Plan"]
    nodes = [plan]
    scans = []
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", ()))
        if node.get("Index Name") == "nilo_jobs_due":
            scans.append(node)
    assert scans, plan
    pages = sum(n["Shared Hit Blocks"] + n["Shared Read Blocks"] for n in scans)
    return {"rows": plan["Actual Rows"], "pages": pages}


def test_while_a_hold_lasts_the_timed_full_claims_come_a_minute_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full claim reads past every entry a held snapshot keeps, longer the longer it lasts,
    while the rows pushed meanwhile wait: while the hold watch says one lasts, the timed full
    claims come every `FULL_HELD_S` instead of `FULL_S`; those something asks for come as
    before."""
    clock = [100.0]
    monkeypatch.setattr(front.time, "monotonic", lambda: clock[0])
    at = front.Front()
    assert at.from_us(["k"]) is None  # the first claim is a full one
    at.claimed([Claimed(1, "k", b"{}", 1, 5 * S, None)])
    clock[0] += front.FULL_S + 0.1
    assert at.from_us(["k"]) is None  # FULL_S later: a full claim
    at.holding(True)
    clock[0] += front.FULL_S + 0.1
    assert at.from_us(["k"]) == 5 * S - front.BEHIND_US  # held: from the front
    at.woken(S)  # a wake-up for a row due before the front still asks for one
    assert at.from_us(["k"]) is None
    clock[0] += front.FULL_HELD_S - 1.0
    assert at.from_us(["k"]) == 5 * S - front.BEHIND_US
    clock[0] += 1.1
    assert at.from_us(["k"]) is None  # FULL_HELD_S after the last
    at.holding(False)
    clock[0] += front.FULL_S + 0.1
    assert at.from_us(["k"]) is None  # the hold has ended: FULL_S apart again


async def test_the_hold_watch_tells_the_front_whether_a_hold_lasts() -> None:
    """After each look that answers: held once something has held back the cleanup for the
    watch's interval (a younger transaction is the traffic's own), not held otherwise; a look
    that fails tells nothing."""
    from nilo_job._worker import holdback
    from nilo_job.store.contract import HeldBack

    store = job.Memory()
    answers: list[HeldBack | Exception | None] = [
        None,
        HeldBack(age_s=holdback.EVERY_S - 0.5, pid=8, state="active"),
        HeldBack(age_s=holdback.EVERY_S, pid=7, state="idle in transaction"),
        RuntimeError("gone"),
        HeldBack(age_s=holdback.EVERY_S + 30, pid=7, state="idle in transaction"),
        None,
    ]

    async def held_back() -> HeldBack | None:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    store.held_back = held_back  # type: ignore[method-assign]
    told: list[bool] = []
    watch = holdback.HoldWatch(store, "a store", held=told.append)
    for _ in range(6):
        await watch.look()
    assert told == [False, False, True, True, False]
