"""Schedules: cron and every, overlap and missed, as rows with no leader. Fake clock only."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

import pytest

import nilo_job as job
from nilo_job._base.clock import datetime_to_us

MINUTE = 60_000_000
DAY = 86_400_000_000


def at(*parts: int) -> int:
    """A UTC moment as microseconds since the epoch."""
    return datetime_to_us(datetime(*parts, tzinfo=UTC))  # type: ignore[misc]


def utc(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, tz=UTC)


# ------------------------------------------------------------------------------------- cron


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("0 9 1-7,15-21 * 1", at(2027, 3, 7, 10), at(2027, 3, 8, 9)),  # either day field matches
        ("0 0 29 2 *", at(2027, 3, 1), at(2028, 2, 29)),
        ("0 3 * * *", at(2027, 3, 1, 3), at(2027, 3, 2, 3)),  # strictly after
        ("0 3 * * *", at(2027, 3, 1, 3) - 1, at(2027, 3, 1, 3)),
        ("0 0 * * 7", at(2027, 3, 1), at(2027, 3, 7)),  # 7 is Sunday
        ("0 0 * * 5-7", at(2027, 3, 6, 1), at(2027, 3, 7)),  # also at the end of a range
        ("*/90 * * * *", at(2027, 3, 1, 0, 1), at(2027, 3, 1, 1)),  # a step past its field
    ],
)
def test_cron_next_is_the_first_tick_strictly_after(expr: str, after: int, expected: int) -> None:
    assert utc(job.cron(expr).next(after)) == utc(expected)


def test_a_step_on_a_range_counts_from_the_range_start() -> None:
    schedule = job.cron("1-10/2 * * * *")
    ticks, moment = [], at(2027, 3, 1) - 1
    for _ in range(6):
        moment = schedule.next(moment)
        ticks.append(utc(moment).minute)
    assert ticks == [1, 3, 5, 7, 9, 1]


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("60 * * * *", ["60 is out of range for the minute field", "0-59"]),
        ("0 24 * * *", ["24 is out of range for the hour field"]),
        ("0 0 0 * *", ["0 is out of range for the day-of-month field"]),
        ("0 0 * 13 *", ["13 is out of range for the month field"]),
        ("0 0 * * 8", ["8 is out of range for the day-of-week field"]),
        ("0 0 * * * *", ["has 6 fields", "write five"]),
        ("0 0 * *", ["has 4 fields"]),
        ("10-5 * * * *", ["the minute range 10-5 runs backwards", "write 5-10"]),
        ("*/0 * * * *", ["minute field '*/0' has a step of 0"]),
        ("0 0 30 2 *", ["day-of-month", "can never match"]),
        ("0 0 31 4 *", ["day-of-month", "can never match"]),
    ],
)
def test_a_bad_cron_is_refused_naming_the_field(expr: str, words: list[str]) -> None:
    with pytest.raises(job.Refusal) as refused:
        job.cron(expr)
    for word in words:
        assert word in str(refused.value)


def test_cron_in_a_time_zone() -> None:
    jakarta = job.cron("0 20 * * *", tz="Asia/Jakarta")  # UTC+7, no DST
    assert utc(jakarta.next(at(2027, 3, 1))) == utc(at(2027, 3, 1, 13))
    with pytest.raises(job.Refusal, match="no such time zone"):
        job.cron("0 20 * * *", tz="Mars/Olympus")


def test_a_tick_in_a_skipped_or_repeated_hour_runs_once() -> None:
    berlin = job.cron("30 2 * * *", tz="Europe/Berlin")
    # 28 March 2027: 02:00 becomes 03:00 (01:00 UTC). The 02:30 tick runs once, at 03:00 CEST.
    skipped = berlin.next(at(2027, 3, 27, 12))
    assert utc(skipped) == utc(at(2027, 3, 28, 1))
    assert utc(berlin.next(skipped)) == utc(at(2027, 3, 29, 0, 30))
    # 31 October 2027: 03:00 becomes 02:00 again. 02:30 happens twice; the tick runs once.
    repeated = berlin.next(at(2027, 10, 30, 12))
    assert utc(repeated) == utc(at(2027, 10, 31, 0, 30))
    assert utc(berlin.next(repeated)) == utc(at(2027, 11, 1, 1, 30))


def test_every_is_refused_without_a_positive_int() -> None:
    for bad in (0, -5, 1.5, True):
        with pytest.raises(job.Refusal, match="ms must be whole milliseconds from 1 to"):
            job.every(bad)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------- kinds


def test_a_scheduled_kind_must_say_overlap_and_missed_and_default_every_field() -> None:
    @dataclasses.dataclass
    class NoOverlap:
        nilo_job = "no-overlap"
        retry = job.Retry.NONE
        schedule = job.every(1_000)
        missed = job.Missed.DROP

        def run(self) -> None: ...

    @dataclasses.dataclass
    class NoMissed:
        nilo_job = "no-missed"
        retry = job.Retry.NONE
        schedule = job.every(1_000)
        overlap = job.Overlap.SKIP

        def run(self) -> None: ...

    @dataclasses.dataclass
    class NoDefault:
        nilo_job = "no-default"
        retry = job.Retry.NONE
        schedule = job.every(1_000)
        overlap = job.Overlap.SKIP
        missed = job.Missed.DROP
        region: str

        def run(self) -> None: ...

    @dataclasses.dataclass
    class Unscheduled:
        nilo_job = "unscheduled"
        retry = job.Retry.NONE
        overlap = job.Overlap.SKIP

        def run(self) -> None: ...

    cases = {
        NoOverlap: "NoOverlap has a schedule and no overlap, which has no default",
        NoMissed: "NoMissed has a schedule and no missed, which has no default",
        NoDefault: "NoDefault.region has no default, and nobody pushes a scheduled job",
        Unscheduled: "Unscheduled.overlap decides nothing on a kind with no schedule",
    }
    for cls, words in cases.items():
        with pytest.raises(job.Refusal) as refused:
            job.Jobs(kinds=[cls], store=job.Memory())
        assert words in str(refused.value)


# ---------------------------------------------------------------------------------- ticking

ran: list[tuple[str, int, int]] = []


class Boom(Exception):
    pass


@dataclasses.dataclass
class Nightly:
    nilo_job: ClassVar[str] = "nightly-report"
    retry = job.Retry.NONE
    schedule = job.cron("0 3 * * *")
    overlap = job.Overlap.SKIP
    missed = job.Missed.DROP

    region: str = "eu"

    def run(self, tick: job.Tick) -> None:
        ran.append((self.nilo_job, tick.run_at, tick.attempts))


def every_kind(missed: job.Missed, overlap: job.Overlap = job.Overlap.SKIP) -> type:
    @dataclasses.dataclass
    class Minutely:
        nilo_job = "minutely"
        retry = job.Retry.NONE
        schedule = job.every(60_000)

        async def run(self, tick: job.Tick, queue: job.Jobs) -> None:
            ran.append((self.nilo_job, tick.run_at, (await queue.stats()).queued))

    Minutely.missed = missed  # type: ignore[attr-defined]
    Minutely.overlap = overlap  # type: ignore[attr-defined]
    return Minutely


@pytest.fixture(autouse=True)
def clear_runs() -> None:
    ran.clear()


async def test_the_report_runs_at_three_and_again_the_next_day(store: job.Store) -> None:
    jobs = job.Jobs(kinds=[Nightly], store=store)
    ten = at(2027, 3, 1, 10)
    await jobs.seed_at(ten)
    three = Nightly.schedule.next(ten)
    assert utc(three) == utc(at(2027, 3, 2, 3))
    assert await jobs.drain_at(three - 1) == 0
    assert await jobs.drain_at(three) == 1
    assert await jobs.drain_at(three + DAY) == 1
    assert [r[1] for r in ran] == [three, three + DAY]


async def test_every_first_fires_its_interval_after_seeding_not_a_microsecond_before(
    store: job.Store,
) -> None:
    jobs = job.Jobs(kinds=[every_kind(job.Missed.DROP)], store=store)
    t0 = at(2027, 3, 1, 10)
    await jobs.seed_at(t0)
    assert await jobs.drain_at(t0 + MINUTE - 1) == 0
    assert await jobs.drain_at(t0 + MINUTE) == 1


async def test_lateness_never_accumulates(store: job.Store) -> None:
    jobs = job.Jobs(kinds=[every_kind(job.Missed.DROP)], store=store)
    t0 = at(2027, 3, 1, 10)
    await jobs.seed_at(t0)
    for k in range(1, 11):
        assert await jobs.drain_at(t0 + k * MINUTE + 5_000_000) == 1
    assert [r[1] for r in ran] == [t0 + k * MINUTE for k in range(1, 11)]
    assert await jobs.drain_at(t0 + 11 * MINUTE - 1) == 0
    assert await jobs.drain_at(t0 + 11 * MINUTE) == 1


@pytest.mark.parametrize(("missed", "runs"), [(job.Missed.CATCH_UP, 1), (job.Missed.DROP, 0)])
async def test_ten_missed_ticks(store: job.Store, missed: job.Missed, runs: int) -> None:
    jobs = job.Jobs(kinds=[every_kind(missed)], store=store)
    t0 = at(2027, 3, 1, 10)
    await jobs.seed_at(t0)
    assert await jobs.drain_at(t0 + 10 * MINUTE + 30_000_000) == runs
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.drain_at(t0 + 11 * MINUTE - 1) == 0
    assert await jobs.drain_at(t0 + 11 * MINUTE) == 1


async def test_a_failing_tick_is_retried_as_its_own_row_and_the_schedule_goes_on(
    store: job.Store,
) -> None:
    @dataclasses.dataclass
    class Fails:
        nilo_job = "fails"
        retry = job.Retry(times=3, backoff=job.Fixed(ms=600_000))
        schedule = job.cron("*/5 * * * *")
        overlap = job.Overlap.SKIP
        missed = job.Missed.DROP

        def run(self, tick: job.Tick) -> None:
            ran.append(("fails", tick.run_at, tick.attempts))
            raise Boom

    jobs = job.Jobs(kinds=[Fails], store=store)
    midnight = at(2027, 3, 1)
    await jobs.seed_at(midnight)
    assert await jobs.drain_at(midnight + 5 * MINUTE) == 1
    assert await jobs.drain_at(midnight + 10 * MINUTE) == 1
    assert await jobs.drain_at(midnight + 15 * MINUTE) == 2
    # The 00:15 tick, and the 00:05 tick's retry (its row now due at 00:15).
    assert sorted(ran[-2:]) == [
        ("fails", midnight + 15 * MINUTE, 1),
        ("fails", midnight + 15 * MINUTE, 2),
    ]


async def test_a_dead_tick_does_not_stop_the_schedule(store: job.Store) -> None:
    @dataclasses.dataclass
    class Dies:
        nilo_job = "dies"
        retry = job.Retry.NONE
        schedule = job.every(60_000)
        overlap = job.Overlap.SKIP
        missed = job.Missed.DROP

        def run(self) -> None:
            raise Boom

    jobs = job.Jobs(kinds=[Dies], store=store)
    t0 = at(2027, 3, 1)
    await jobs.seed_at(t0)
    assert await jobs.drain_at(t0 + MINUTE) == 1
    assert await jobs.stats() == (1, 0, 1)
    assert (await jobs.dead_ones())[0].error == "Boom"
    assert await jobs.drain_at(t0 + 2 * MINUTE) == 1


@pytest.mark.parametrize(
    ("overlap", "queued_inside"), [(job.Overlap.SKIP, 0), (job.Overlap.QUEUE, 1)]
)
async def test_overlap_decides_when_the_next_tick_is_pushed(
    store: job.Store, overlap: job.Overlap, queued_inside: int
) -> None:
    jobs = job.Jobs(kinds=[every_kind(job.Missed.DROP, overlap)], store=store)
    t0 = at(2027, 3, 1)
    await jobs.seed_at(t0)
    assert await jobs.drain_at(t0 + MINUTE) == 1
    # With SKIP no tick exists while one runs; with QUEUE the next was pushed at the claim.
    assert ran == [("minutely", t0 + MINUTE, queued_inside)]
    assert await jobs.stats() == (1, 0, 0)


async def test_seeding_again_or_with_a_clock_behind_pushes_nothing(tmp_path: Path) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/s.db")
    await table.create_missing()
    jobs = job.Jobs(kinds=[Nightly], store=table)
    ten = at(2027, 3, 1, 10)
    await jobs.seed_at(ten)
    await jobs.seed_at(ten + 5 * DAY)
    three = at(2027, 3, 2, 3)
    assert await jobs.drain_at(three) == 1
    await jobs.seed_at(ten)  # a process whose clock is behind: the 3:00 tick already ran
    assert await jobs.drain_at(three) == 0
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as conn, conn:
        held = conn.execute("SELECT run_at FROM nilo_jobs WHERE unique_key = 'schedule'").fetchall()
    assert held == [(three + DAY,)]
    await table.close()


def test_ten_queues_seeding_one_file_from_ten_threads_make_one_row(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"

    async def create() -> None:
        table = job.Table(url)
        await table.create_missing()
        await table.close()

    asyncio.run(create())
    start = threading.Barrier(10)
    errors: list[BaseException] = []

    def seed() -> None:
        async def go() -> None:
            table = job.Table(url)
            jobs = job.Jobs(kinds=[Nightly], store=table)
            await table.open()
            start.wait(timeout=30)
            await jobs.seed_at(at(2027, 3, 1, 10))
            await table.close()

        try:
            asyncio.run(go())
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=seed) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as conn, conn:
        rows = conn.execute("SELECT kind, state, unique_key FROM nilo_jobs").fetchall()
    assert rows == [("nightly-report", "queued", "schedule")]


async def test_a_pushed_run_of_a_scheduled_kind_runs_beside_the_schedule(store: job.Store) -> None:
    jobs = job.Jobs(kinds=[Nightly], store=store)
    ten = at(2027, 3, 1, 10)
    await jobs.seed_at(ten)
    assert await jobs.push(Nightly()) is not None
    assert await jobs.drain_at(ten + 1) == 1
    assert await jobs.stats() == (1, 0, 0)  # the schedule's own row is still waiting for 3:00


async def test_cancelling_a_schedules_next_tick_skips_that_tick_and_the_schedule_goes_on(
    store: job.Store,
) -> None:
    jobs = job.Jobs(kinds=[Nightly], store=store)
    ten = at(2027, 3, 1, 10)
    await jobs.seed_at(ten)
    three = Nightly.schedule.next(ten)
    (tick,) = await store.holding("schedule", ["nightly-report"])
    assert tick.run_at == three
    assert await jobs.cancel(tick.id) is True
    (after,) = await store.holding("schedule", ["nightly-report"])
    assert (after.run_at, after.id != tick.id) == (three + DAY, True)
    assert await jobs.drain_at(three) == 0
    assert await jobs.drain_at(three + DAY) == 1
    assert [r[1] for r in ran] == [three + DAY]
    assert await jobs.stats() == (1, 0, 0)  # and the tick after that is queued


async def test_serve_brings_back_a_schedule_whose_row_was_deleted_another_way(
    store: job.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("nilo_job._worker.server._SEED_EVERY_US", 0)  # seed again at every claim
    jobs = job.Jobs(kinds=[Nightly], store=store, poll_ms=20)
    async with jobs.serving(grace_ms=1_000):
        async with asyncio.timeout(10):
            while not (held := await store.holding("schedule", ["nightly-report"])):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert await store.cancel(held[0].id)  # as `nilo-job cancel URL ID` does: no kinds
        async with asyncio.timeout(10):
            while not await store.holding("schedule", ["nightly-report"]):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    (back,) = await store.holding("schedule", ["nightly-report"])
    assert back.run_at == held[0].run_at  # the same next tick, seeded again
