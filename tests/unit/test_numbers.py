"""Every number a call or a setting takes is checked where it is given, against what every store
can hold: a moment from 1970 to the year 9000, a duration of at most ten years, a row id of 64
bits, a count of retries whose attempts fit 32 bits. A bool, NaN, a fraction or a value out of
range is a `Refusal` that names the call, why, and the range, and nothing is written."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job._base.clock import Clock
from nilo_job.store.contract import Store
from nilo_job.web import lifespan

LAST_US = 221_845_392_000_000_000  # 9000-01-01 00:00 UTC
TICK_LAST_US = 250_246_627_200_000_000  # 9900-01-01 00:00 UTC: a schedule's next
TEN_YEARS_MS = 315_360_000_000
INT64_MAX = 2**63 - 1

MOMENT = (
    "must be µs since the epoch (an int) or an aware datetime, from 1970-01-01 (0) to "
    "9000-01-01 (221,845,392,000,000,000)"
)
AT = f"at {MOMENT}"
NOW = f"now_us {MOMENT}"
AFTER = "after_ms must be whole milliseconds from 0 to 315,360,000,000 (ten years)"
ROW_ID = (
    "must be an int from 1 to 9,223,372,036,854,775,807 (the id push returned, 64-bit in every "
    "store)"
)
PAST = "past what a store can hold"


@dataclass
class Note:
    nilo_job = "note"
    retry = job.Retry(times=1, backoff=job.Fixed(ms=TEN_YEARS_MS))

    text: str = "hi"

    def run(self) -> None:
        raise RuntimeError("again")


Call = Callable[[job.Jobs, int], Awaitable[object]]

CALLS: list[tuple[str, Call, str]] = [
    # moments
    (
        "at=2**63-1",
        lambda jobs, row: jobs.push(Note(), at=INT64_MAX),
        f"push(at=9223372036854775807) is after 9999-12-31, {PAST}: {AT}",
    ),
    (
        "at=a µs past 9000",
        lambda jobs, row: jobs.push(Note(), at=LAST_US + 1),
        f"push(at=221845392000000001) is 9000-01-01 00:00:00.000001 UTC, {PAST}: {AT}",
    ),
    (
        "at=-1",
        lambda jobs, row: jobs.push(Note(), at=-1),
        f"push(at=-1) is 1969-12-31 23:59:59.999999 UTC, before the epoch: {AT}",
    ),
    (
        "at=a datetime in 9999, past datetime's last instant in UTC",
        lambda jobs, row: jobs.push(
            Note(), at=datetime(9999, 12, 31, 23, tzinfo=timezone(-timedelta(hours=14)))
        ),
        f"push(at=9999-12-31T23:00:00-14:00) is after 9999-12-31, {PAST}: {AT}",
    ),
    (
        "at=a datetime in 9500",
        lambda jobs, row: jobs.push(Note(), at=datetime(9500, 1, 1, tzinfo=UTC)),
        f"push(at=9500-01-01T00:00:00+00:00) is 9500-01-01 00:00:00 UTC, {PAST}: {AT}",
    ),
    (
        "at=a naive datetime",
        lambda jobs, row: jobs.push(Note(), at=datetime(2030, 1, 1)),
        "push(at=datetime.datetime(2030, 1, 1, 0, 0)) is a naive datetime, so its instant is "
        "unknown: give it a tzinfo (datetime(..., tzinfo=timezone.utc)) or pass microseconds",
    ),
    (
        "at=True",
        lambda jobs, row: jobs.push(Note(), at=True),
        f"push(at=True) is a bool, not a number: {AT}",
    ),
    (
        "at=1.5",
        lambda jobs, row: jobs.push(Note(), at=1.5),  # type: ignore[arg-type]
        f"push(at=1.5) is not a whole number: {AT}",
    ),
    (
        "push_many at=nan",
        lambda jobs, row: jobs.push_many([Note()], at=math.nan),  # type: ignore[arg-type]
        f"push_many(at=nan) is not a number: {AT}",
    ),
    (
        "push_in at=2**63",
        lambda jobs, row: jobs.push_in(None, Note(), at=2**63),
        f"push_in(at=9223372036854775808) is after 9999-12-31, {PAST}: {AT}",
    ),
    # durations
    (
        "after_ms over ten years",
        lambda jobs, row: jobs.push(Note(), after_ms=TEN_YEARS_MS + 1),
        f"push(after_ms=315360000001) is more than 315,360,000,000: {AFTER}",
    ),
    (
        "after_ms=-1",
        lambda jobs, row: jobs.push(Note(), after_ms=-1),
        f"push(after_ms=-1) is below 0: {AFTER}",
    ),
    (
        "after_ms=True",
        lambda jobs, row: jobs.push(Note(), after_ms=True),
        f"push(after_ms=True) is a bool, not a number: {AFTER}",
    ),
    (
        "after_ms=inf",
        lambda jobs, row: jobs.push(Note(), after_ms=math.inf),  # type: ignore[arg-type]
        f"push(after_ms=inf) is not a finite number: {AFTER}",
    ),
    (
        "after_ms=1000.0",
        lambda jobs, row: jobs.push(Note(), after_ms=1000.0),  # type: ignore[arg-type]
        f"push(after_ms=1000.0) is a float, not an int: {AFTER}",
    ),
    # a test's clock
    (
        "drain_at past 9000",
        lambda jobs, row: jobs.drain_at(2**62),
        f"drain_at(4611686018427387904) is after 9999-12-31, {PAST}: {NOW}",
    ),
    (
        "drain_at before 1970",
        lambda jobs, row: jobs.drain_at(-(2**62)),
        f"drain_at(-4611686018427387904) is before 0001-01-01, before the epoch: {NOW}",
    ),
    (
        "run_one_at 1.5",
        lambda jobs, row: jobs.run_one_at(1.5),  # type: ignore[arg-type]
        f"run_one_at(1.5) is not a whole number: {NOW}",
    ),
    (
        "seed_at 2**64",
        lambda jobs, row: jobs.seed_at(2**64),
        f"seed_at(18446744073709551616) is after 9999-12-31, {PAST}: {NOW}",
    ),
    (
        "prune_at -2**63",
        lambda jobs, row: jobs.prune_at(-(2**63)),
        f"prune_at(-9223372036854775808) is before 0001-01-01, before the epoch: {NOW}",
    ),
    # ids
    ("cancel 0", lambda jobs, row: jobs.cancel(0), f"cancel(0) is below 1: row_id {ROW_ID}"),
    (
        "cancel 2**63",
        lambda jobs, row: jobs.cancel(2**63),
        f"cancel(9223372036854775808) is more than 9,223,372,036,854,775,807: row_id {ROW_ID}",
    ),
    (
        "cancel True",
        lambda jobs, row: jobs.cancel(True),
        f"cancel(True) is a bool, not a number: row_id {ROW_ID}",
    ),
    (
        "retry_dead -5",
        lambda jobs, row: jobs.retry_dead(-5),
        f"retry_dead(-5) is below 1: row_id {ROW_ID}",
    ),
    (
        "status 2**64",
        lambda jobs, row: jobs.status(2**64),
        f"status(18446744073709551616) is more than 9,223,372,036,854,775,807: row_id {ROW_ID}",
    ),
    (
        "row 1.0",
        lambda jobs, row: jobs.row(1.0),  # type: ignore[arg-type]
        f"row(1.0) is a float, not an int: row_id {ROW_ID}",
    ),
    (
        "progress of id 0",
        lambda jobs, row: jobs.progress(0, 1),
        f"progress(0, n) is below 1: row_id {ROW_ID}",
    ),
    (
        "progress 2**63",
        lambda jobs, row: jobs.progress(row, 2**63),
        "progress(row, n=9223372036854775808) is more than 9,223,372,036,854,775,807: n must be "
        "an int from -9,223,372,036,854,775,808 to 9,223,372,036,854,775,807 (64-bit)",
    ),
    (
        "retry_many of an id past 64 bits",
        lambda jobs, row: jobs.retry_many([row, 2**63]),
        "retry_many([..., 9223372036854775808, ...]) is more than 9,223,372,036,854,775,807: "
        f"a row id {ROW_ID}",
    ),
    (
        "delete_many of Where(ids) with 0",
        lambda jobs, row: jobs.delete_many(job.Where(ids=[row, 0])),
        f"Where(ids=[..., 0, ...]) is below 1: a row id {ROW_ID}",
    ),
    (
        "find after a cursor whose id is past 64 bits",
        lambda jobs, row: jobs.find(job.Where(state="queued"), after="1.9223372036854775808"),
        "after='1.9223372036854775808' is not a cursor find() gave (its Found.next)",
    ),
    # counts
    (
        "cancel_many at_most=-1",
        lambda jobs, row: jobs.cancel_many(job.Where(state="queued"), at_most=-1),
        "cancel_many(at_most=-1) is below 0: at_most must be a count of rows from 0 to "
        "9,223,372,036,854,775,807 (64-bit in every store)",
    ),
    (
        "retry_many at_most=2**63",
        lambda jobs, row: jobs.retry_many(job.Where(state="dead"), at_most=2**63),
        "retry_many(at_most=9223372036854775808) is more than 9,223,372,036,854,775,807: "
        "at_most must be a count of rows from 0 to 9,223,372,036,854,775,807 (64-bit in every "
        "store)",
    ),
    (
        "find limit True",
        lambda jobs, row: jobs.find(job.Where(state="queued"), limit=True),
        "find(limit=True) is a bool, not a number: limit must be a count of rows from 1 to 1,000",
    ),
    (
        "dead_ones limit 0",
        lambda jobs, row: jobs.dead_ones(0),
        "dead_ones(limit=0) is below 1: limit must be a count of rows from 1 to 100,000",
    ),
    (
        "flow minutes 1441",
        lambda jobs, row: jobs.flow(minutes=1_441),
        "flow(minutes=1441) is more than 1,440: minutes must be whole minutes from 1 to 1,440 "
        "(a day)",
    ),
    # serving
    (
        "serve grace over ten years",
        lambda jobs, row: jobs.serve(grace_ms=TEN_YEARS_MS + 1),
        "serve(grace_ms=315360000001) is more than 315,360,000,000: grace_ms must be whole "
        "milliseconds from 0 to 315,360,000,000 (ten years)",
    ),
]


async def rows(jobs: job.Jobs) -> list[tuple[object, ...]]:
    """Every row of the table, as a tuple of what a store keeps of it."""
    found = await jobs.find(job.Where(), limit=1_000)
    return [(r.id, r.state, r.run_at, r.attempts, r.unique_key, r.payload) for r in found.rows]


@pytest.mark.parametrize(
    ("call", "said"), [(c, s) for _l, c, s in CALLS], ids=[c[0] for c in CALLS]
)
async def test_a_number_no_store_can_hold_is_refused_by_name_and_nothing_is_written(
    store: Store, t: int, call: Call, said: str
) -> None:
    jobs = job.Jobs(kinds=[Note], store=store, status=job.MemorySpace(ttl_s=60))
    row = await jobs.push(Note(), at=t, unique="k")
    assert row is not None
    assert await jobs.drain_at(t) == 1  # failed once: queued for its retry, ten years on
    before = await rows(jobs)
    assert [(state, run_at) for _id, state, run_at, *_ in before] == [
        ("queued", t + TEN_YEARS_MS * 1_000)
    ]
    with pytest.raises(job.Refusal) as refused:
        await call(jobs, row)
    assert str(refused.value) == said
    assert await rows(jobs) == before
    assert await jobs.stats() == (1, 0, 0)


async def test_the_edges_of_every_range_are_taken(store: Store) -> None:
    jobs = job.Jobs(kinds=[Note], store=store)
    first = await jobs.push(Note(), at=0)
    last = await jobs.push(Note(), at=datetime(9000, 1, 1, tzinfo=UTC))
    assert [r.run_at for r in (await jobs.find(job.Where(state="queued"))).rows] == [0, LAST_US]
    assert await jobs.push(Note(), after_ms=TEN_YEARS_MS) > last
    # A row run at the last moment a call takes, and its retry ten years on: still a date.
    assert await jobs.drain_at(LAST_US) == 3
    row = await jobs.row(first)
    assert row is not None
    assert row.run_at == LAST_US + TEN_YEARS_MS * 1_000
    assert datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=row.run_at) == datetime(
        9009, 12, 30, tzinfo=UTC
    )
    assert await jobs.cancel(INT64_MAX) is False
    assert await jobs.retry_many([INT64_MAX], at_most=INT64_MAX) == 0
    assert await jobs.prune_at(0) == 0


@dataclass
class Decade:
    nilo_job = "decade"
    retry = job.Retry.NONE
    schedule = job.every(TEN_YEARS_MS)
    overlap = job.Overlap.SKIP
    missed = job.Missed.DROP

    def run(self) -> None:
        pass


async def test_a_tick_seeded_at_the_last_moment_can_be_skipped(store: Store) -> None:
    jobs = job.Jobs(kinds=[Decade], store=store)
    await jobs.seed_at(LAST_US)
    (tick,) = (await jobs.find(job.Where(state="queued"))).rows
    assert tick.run_at == LAST_US + TEN_YEARS_MS * 1_000  # past 9000: derived, not given
    assert await jobs.cancel(tick.id) is True
    (after,) = (await jobs.find(job.Where(state="queued"))).rows
    assert after.run_at == LAST_US + 2 * TEN_YEARS_MS * 1_000


async def test_a_delay_that_takes_the_clock_past_9000_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = job.Jobs(kinds=[Note], store=job.Memory())
    monkeypatch.setattr(Clock, "now", lambda self: LAST_US - 1_000_000)
    with pytest.raises(job.Refusal) as refused:
        await jobs.push(Note(), after_ms=2_000)
    assert str(refused.value) == (
        "push(after_ms=2000) from now (8999-12-31 23:59:59 UTC) is 9000-01-01 00:00:01 UTC, "
        f"{PAST}: the latest moment is 9000-01-01 00:00:00 UTC"
    )
    assert await jobs.push(Note(), after_ms=1_000) == 1
    assert await jobs.stats() == (1, 0, 0)


@dataclass
class Fine:
    nilo_job = "fine"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


SETTINGS: list[tuple[str, Callable[[Path], object], str]] = [
    (
        "Retry(times) past what a 32-bit attempts column counts",
        lambda tmp: job.Retry(times=2**31 - 1),
        "Retry(times=2147483647) is more than 2,147,483,646: times must be a count of retries "
        "from 0 to 2,147,483,646 (a row's attempts, times + 1, are a 32-bit integer in "
        "PostgreSQL)",
    ),
    (
        "Retry(times=True)",
        lambda tmp: job.Retry(times=True),
        "Retry(times=True) is a bool, not a number: times must be a count of retries from 0 to "
        "2,147,483,646 (a row's attempts, times + 1, are a 32-bit integer in PostgreSQL)",
    ),
    (
        "Fixed(ms=-1)",
        lambda tmp: job.Fixed(ms=-1),
        "Fixed(ms=-1) is below 0: ms must be whole milliseconds from 0 to 315,360,000,000 (ten "
        "years)",
    ),
    (
        "Exponential(from_ms=nan)",
        lambda tmp: job.Exponential(from_ms=math.nan, to_ms=1),  # type: ignore[arg-type]
        "Exponential(from_ms=nan) is not a number: from_ms must be whole milliseconds from 1 to "
        "315,360,000,000 (ten years)",
    ),
    (
        "every(True)",
        lambda tmp: job.every(True),
        "job.every(True) is a bool, not a number: ms must be whole milliseconds from 1 to "
        "315,360,000,000 (ten years)",
    ),
    (
        "cron's next past 9900",
        lambda tmp: job.cron("0 3 * * *").next(2**70),
        "cron(...).next(1180591620717411303424) is after 9999-12-31, past what a store can hold: "
        "after_us must be µs since the epoch (an int) or an aware datetime, from 1970-01-01 (0) "
        "to 9900-01-01 (250,246,627,200,000,000)",
    ),
    (
        "every's next past 9900",
        lambda tmp: job.every(1_000).next(TICK_LAST_US + 1),
        "every(...).next(250246627200000001) is 9900-01-01 00:00:00.000001 UTC, past what a "
        "store can hold: after_us must be µs since the epoch (an int) or an aware datetime, "
        "from 1970-01-01 (0) to 9900-01-01 (250,246,627,200,000,000)",
    ),
    (
        "job.Jobs(workers) past a process's tasks",
        lambda tmp: job.Jobs(kinds=[Fine], store=job.Memory(), workers=100_001),
        "job.Jobs(workers=100001) is more than 100,000: workers must be a count of runs at once "
        "from 1 to 100,000 (each is a task of this process)",
    ),
    (
        "job.Jobs(retention_ms=True)",
        lambda tmp: job.Jobs(kinds=[Fine], store=job.Memory(), retention_ms=True),
        "job.Jobs(retention_ms=True) is a bool, not a number: retention_ms must be whole "
        "milliseconds from 0 to 315,360,000,000 (ten years)",
    ),
    (
        "jobs.workers = 0",
        lambda tmp: setattr(job.Jobs(kinds=[Fine], store=job.Memory()), "workers", 0),
        "jobs.workers = 0 is below 1: workers must be a count of runs at once from 1 to 100,000 "
        "(each is a task of this process)",
    ),
    (
        "MemorySpace(ttl_s=-1)",
        lambda tmp: job.MemorySpace(ttl_s=-1),
        "MemorySpace(ttl_s=-1) is not above 0: ttl_s must be a positive number of seconds, at "
        "most 315,360,000 (ten years)",
    ),
    (
        "SQLite's busy timeout past 32 bits (SQLite would take it as 0)",
        lambda tmp: job.Table(f"sqlite:///{tmp}/q.db", busy_timeout_ms=2**31),
        "job.Table(..., busy_timeout_ms=2147483648) is more than 2,147,483,647: busy_timeout_ms "
        "must be whole milliseconds from 1 to 2,147,483,647 (SQLite keeps its busy timeout in 32 "
        "bits)",
    ),
    (
        "a PostgreSQL pool of no connections",
        lambda tmp: job.Table("postgresql://nobody@127.0.0.1:1/none", max_size=0),
        "job.Table(..., max_size=0) is below 1: max_size must be a count of connections from 1 "
        "to 262,143 (PostgreSQL's most connections)",
    ),
    (
        "lifespan(grace_ms=2**63)",
        lambda tmp: lifespan(job.Jobs(kinds=[Fine], store=job.Memory()), grace_ms=2**63),
        "lifespan(grace_ms=9223372036854775808) is more than 315,360,000,000: grace_ms must be "
        "whole milliseconds from 0 to 315,360,000,000 (ten years)",
    ),
]


@pytest.mark.parametrize(
    ("make", "said"), [(m, s) for _l, m, s in SETTINGS], ids=[s[0] for s in SETTINGS]
)
def test_a_setting_no_store_or_clock_can_hold_is_refused_where_it_is_written(
    tmp_path: Path, make: Callable[[Path], object], said: str
) -> None:
    with pytest.raises(job.Refusal) as refused:
        make(tmp_path)
    assert str(refused.value) == said
    assert not (tmp_path / "q.db").exists()
