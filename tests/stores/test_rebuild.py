"""The room a swollen index took is given back: on PostgreSQL, `rebuild_swollen` rebuilds the
indexes of `nilo_jobs` far larger than their live entries need (`REINDEX INDEX CONCURRENTLY`),
and serve asks for it every minute, saying what it rebuilt or why it could not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import psycopg
import pytest

import nilo_job as job
from nilo_job._worker import rebuilds
from nilo_job._worker.rebuilds import Rebuilds
from nilo_job.store.contract import NewRow, Rebuilt, Store
from nilo_job.store.postgres import rebuild
from nilo_job.store.postgres.store import PostgresTable

ROWS = 60_000


def sizes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Each valid index of `nilo_jobs`, with its size in bytes."""
    found = conn.execute(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = 'nilo_jobs'::regclass AND i.indisvalid"
    ).fetchall()
    return dict(found)


def run_down_a_backlog(conn: psycopg.Connection[Any]) -> None:
    """`ROWS` rows queued, claimed and done (deleted), then vacuumed: their entries' pages stay
    in every index's file."""
    conn.execute(
        "INSERT INTO nilo_jobs (kind, payload, state, run_at, pushed_at, attempts) "
        "SELECT 'k', '{}', 'queued', g, g, 0 FROM generate_series(1, %s) AS g",
        (ROWS,),
    )
    conn.execute(
        "UPDATE nilo_jobs SET state = 'running', attempts = 1, lease_until = run_at + 10, "
        "started_at = run_at, worker = 'w'"
    )
    conn.execute("DELETE FROM nilo_jobs")
    conn.execute("VACUUM nilo_jobs")


@pytest.mark.postgres
async def test_the_swollen_indexes_are_rebuilt_and_give_their_room_back(pg_url: str) -> None:
    store = job.Table(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        fresh = sizes(conn)
        assert await store.rebuild_swollen() == []  # nothing has swollen yet
        run_down_a_backlog(conn)
        swollen = sizes(conn)
        try:
            rebuilt = await store.rebuild_swollen()
        finally:
            await store.close()
        after = sizes(conn)
    names = [r.index for r in rebuilt]
    # (`nilo_jobs_unique` holds the rows with a unique key alone: none here)
    assert names == ["nilo_jobs_due", "nilo_jobs_lease", "nilo_jobs_pkey"]
    for r in rebuilt:
        assert r.before_bytes == swollen[r.index] > 1_048_576
        assert r.after_bytes == after[r.index] == fresh[r.index]
    assert after == fresh  # every index as small as on the fresh table, none left invalid


@pytest.mark.postgres
async def test_an_index_is_rebuilt_only_past_twice_its_size_before_the_hold(pg_url: str) -> None:
    """Under heavy traffic an index's working size is far larger than its live entries need:
    measured before a hold, it is what the index may grow back to, so an index at most twice
    that (one another process has rebuilt since, say) is left alone."""
    store = job.Table(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        run_down_a_backlog(conn)
        swollen = sizes(conn)
        try:
            assert await store.index_sizes() == swollen
            at_working_size = {name: -(-size // 2) for name, size in swollen.items()}
            assert await store.rebuild_swollen(at_working_size) == []
            assert sizes(conn) == swollen
            past_twice = {**swollen, "nilo_jobs_due": swollen["nilo_jobs_due"] // 2 - 1}
            rebuilt = await store.rebuild_swollen(past_twice)
        finally:
            await store.close()
        after = sizes(conn)
    assert [(r.index, r.before_bytes) for r in rebuilt] == [
        ("nilo_jobs_due", swollen["nilo_jobs_due"])
    ]
    assert after["nilo_jobs_due"] < swollen["nilo_jobs_due"] // 10
    assert {n: s for n, s in after.items() if n != "nilo_jobs_due"} == {
        n: s for n, s in swollen.items() if n != "nilo_jobs_due"
    }


@pytest.mark.postgres
async def test_no_rebuild_while_a_transaction_holds_back_the_cleanup(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rebuild, "HELD_S", 0.0)
    store = job.Table(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        run_down_a_backlog(conn)
        swollen = sizes(conn)
        with psycopg.connect(pg_url, autocommit=True) as held:
            held.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            held.execute("SELECT count(*) FROM nilo_jobs").fetchone()
            try:
                assert await store.rebuild_swollen() == []
            finally:
                held.execute("ROLLBACK")
                await store.close()
        assert sizes(conn) == swollen


@pytest.mark.postgres
async def test_what_a_rebuild_cut_short_left_is_dropped_first(pg_url: str) -> None:
    store = job.Table(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts) "
            "VALUES ('k', '{}', 'queued', 1, 0), ('k', '{}', 'queued', 2, 0)"
        )
        # A concurrent build that fails leaves its index behind, invalid, as a cut-short
        # REINDEX CONCURRENTLY leaves `…_ccnew`.
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("CREATE UNIQUE INDEX CONCURRENTLY nilo_jobs_due_ccnew ON nilo_jobs (kind)")
        invalid = "SELECT count(*) FROM pg_class WHERE relname = 'nilo_jobs_due_ccnew'"
        assert conn.execute(invalid).fetchone() == (1,)
        try:
            assert await store.rebuild_swollen() == []
        finally:
            await store.close()
        assert conn.execute(invalid).fetchone() == (0,)


async def test_a_fresh_table_has_nothing_to_rebuild(store: Store) -> None:
    await store.push([NewRow("k", b"{}", 1, None)])
    assert await store.rebuild_swollen() == []
    assert await store.rebuild_swollen({}) == []


async def test_only_postgresql_has_index_sizes_to_measure(
    store: Store, request: pytest.FixtureRequest
) -> None:
    measured = await store.index_sizes()
    if isinstance(store, PostgresTable):
        with psycopg.connect(request.getfixturevalue("pg_url")) as conn:
            assert measured == sizes(conn)
        assert {"nilo_jobs_due", "nilo_jobs_lease", "nilo_jobs_pkey"} <= set(measured)
        assert all(size > 0 for size in measured.values())
    else:
        assert measured == {}


@dataclasses.dataclass
class Idle:
    nilo_job = "idle"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


class Rebuilding(job.Memory):
    """A store whose rebuilds answer what the test says."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[list[Rebuilt] | Exception] = []
        self.asked_with: list[dict[str, int] | None] = []  # each rebuild's `before`
        self.sizes: list[dict[str, int] | Exception] = []  # what `index_sizes` answers

    async def index_sizes(self) -> dict[str, int]:
        answer = self.sizes.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def rebuild_swollen(self, before: Mapping[str, int] | None = None) -> list[Rebuilt]:
        self.asked_with.append(None if before is None else dict(before))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_each_rebuild_is_said_and_a_failure_once_until_it_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Rebuilding()
    denied = psycopg.errors.InsufficientPrivilege("must be owner of index nilo_jobs_due")
    store.answers = [
        [Rebuilt("nilo_jobs_due", 5_600_000, 16_384), Rebuilt("nilo_jobs_pkey", 8_300_000, 8_192)],
        denied,
        denied,
        RuntimeError("another"),
        [],
    ]
    watch = Rebuilds(store, "job.Table('postgresql://app@db/app')")
    with caplog.at_level(logging.INFO, logger="nilo_job"):
        for _ in range(5):
            await watch.look()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "INFO",
            "rebuilt the index nilo_jobs_due of job.Table('postgresql://app@db/app'), which had "
            "swollen: 5.6 MB → 0.0 MB",
        ),
        (
            "INFO",
            "rebuilt the index nilo_jobs_pkey of job.Table('postgresql://app@db/app'), which had "
            "swollen: 8.3 MB → 0.0 MB",
        ),
        (
            "WARNING",
            "rebuilding the swollen indexes of job.Table('postgresql://app@db/app') failed "
            "(InsufficientPrivilege: must be owner of index nilo_jobs_due); trying again in 60 s",
        ),
        (
            "WARNING",
            "rebuilding the swollen indexes of job.Table('postgresql://app@db/app') failed "
            "(RuntimeError: another); trying again in 60 s",
        ),
    ]


async def test_serve_looks_only_after_a_hold_and_then_until_a_rebuild(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No look as serve starts (a rebuild then would only have the indexes grow back to their
    working size); once a hold has ended, looks until one rebuilds, then none."""
    from tests.helpers.serving import until

    monkeypatch.setattr(rebuilds, "EVERY_S", 0.01)
    monkeypatch.setattr(rebuilds, "LOOKS", 3)
    store = Rebuilding()
    swollen = [Rebuilt("nilo_jobs_due", 5_600_000, 16_384)]
    store.answers = [[], swollen, [], []]
    watch = Rebuilds(store, "a store")
    running = asyncio.create_task(watch.run())
    try:
        for _ in range(20):  # (twenty looks' time: none is made)
            await asyncio.sleep(0.01)
        assert len(store.answers) == 4
        watch.arm()  # a hold has ended: looks until one rebuilds something
        await until("the look that rebuilt", lambda: len(store.answers) == 2)
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert store.answers == [[], []]
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_serve_makes_no_look_as_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.serving import until

    monkeypatch.setattr(rebuilds, "EVERY_S", 0.01)
    store = Rebuilding()
    store.answers = [[]]
    jobs = job.Jobs(kinds=[Idle], store=store)
    async with jobs.serving():
        await until("serve to start", lambda: jobs._parts.wakeups.feed is not None)
        for _ in range(20):  # (twenty looks' time)
            await asyncio.sleep(0.01)
    assert store.answers == [[]]


async def test_a_hold_that_ends_arms_the_rebuilds() -> None:
    from nilo_job._worker.holdback import HoldWatch
    from nilo_job.store.contract import HeldBack

    store = Rebuilding()
    holds = [HeldBack(age_s=61.0, pid=7, state="idle in transaction"), None]

    async def held_back() -> HeldBack | None:
        return holds.pop(0)

    store.held_back = held_back  # type: ignore[method-assign]
    watch = Rebuilds(store, "a store")
    watch.looks = 0
    hold_watch = HoldWatch(store, "a store", ended=watch.arm)
    await hold_watch.look()  # the hold, said
    assert watch.looks == 0
    await hold_watch.look()  # ended
    assert watch.looks == rebuilds.LOOKS


async def test_the_sizes_before_a_hold_are_kept_until_the_looks_after_it_are_over() -> None:
    """The watch has the sizes measured at each look that finds nothing holding back the
    cleanup (a hold younger than its look's interval counts as none), never while a hold
    lasts nor while the looks after one are left; each look passes them to the rebuild."""
    from nilo_job._worker.holdback import HoldWatch
    from nilo_job.store.contract import HeldBack

    store = Rebuilding()
    short = HeldBack(age_s=0.2, pid=8, state="active")
    long = HeldBack(age_s=61.0, pid=7, state="idle in transaction")
    holds = [None, short, long, long, None, None]

    async def held_back() -> HeldBack | None:
        return holds.pop(0)

    store.held_back = held_back  # type: ignore[method-assign]
    store.sizes = [{"nilo_jobs_due": 100}, {"nilo_jobs_due": 120}, RuntimeError("gone")]
    rebuilds_ = Rebuilds(store, "a store")
    watch = HoldWatch(store, "a store", ended=rebuilds_.arm, quiet=rebuilds_.measure)
    await watch.look()  # nothing held: measured
    assert rebuilds_.before == {"nilo_jobs_due": 100}
    await watch.look()  # a short transaction: measured
    assert rebuilds_.before == {"nilo_jobs_due": 120}
    await watch.look()  # the hold: not measured
    await watch.look()
    await watch.look()  # ended: armed, and not measured
    assert rebuilds_.looks == rebuilds.LOOKS
    assert rebuilds_.before == {"nilo_jobs_due": 120}
    store.answers = [[]]
    await rebuilds_.look()
    assert store.asked_with == [{"nilo_jobs_due": 120}]
    rebuilds_.looks = 0  # the looks are over: measured again, a failure keeps the last
    await watch.look()
    assert rebuilds_.before == {"nilo_jobs_due": 120}
    assert store.sizes == []
