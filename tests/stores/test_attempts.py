"""Every attempt kept, on every store: each end records its attempt (start, end, worker, outcome,
failure) with the row, read by `jobs.row`; a row keeps its newest 20; they go with their row;
deaths are counted by `flow()` as events, also after the rows were retried. Every test runs on
Memory, SQLite and PostgreSQL (the `store` fixture)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

import nilo_job as job
from nilo_job.store.contract import Store
from tests.helpers.attempts import Flaky, four_attempts

S = 1_000_000
MINUTE = 60 * S
WORKER = f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Dies:
    nilo_job = "dies"
    retry = job.Retry.NONE

    n: int

    def run(self) -> None:
        raise ValueError(f"bad input {self.n}")


def queue(store: Store, **settings: Any) -> job.Jobs:
    return job.Jobs(kinds=[Flaky, Dies], store=store, **settings)


async def failed_twice_died_retried_and_done(store: Store, t: int) -> tuple[job.Jobs, int]:
    jobs = queue(store)
    return jobs, await four_attempts(jobs, t, f"mail-{id(store)}-{t}")


def failure(n: int) -> tuple[str, str]:
    return "ConnectionError", f"the provider is down (run {n})"


async def test_every_attempt_of_a_row_is_read_with_it(store: Store, t: int) -> None:
    jobs, row_id = await failed_twice_died_retried_and_done(store, t)
    row = await jobs.row(row_id)
    assert row is not None
    assert (row.state, row.attempts, row.result) == ("done", 1, "sent")
    log = row.attempts_log
    assert [(a.attempt, a.outcome, a.ended_at, a.worker) for a in log] == [
        (1, "retrying", t, WORKER),
        (2, "retrying", t + S, WORKER),
        (3, "dead", t + 2 * S, WORKER),
        (1, "done", t + 3 * S, WORKER),
    ]
    assert [(a.error, a.message) for a in log] == [failure(1), failure(2), failure(3), (None, None)]
    for n, attempt in enumerate(log[:3]):
        assert attempt.started_at == t + n * S  # each claim, on the drain's clock
    started = log[3].started_at  # the done run's start, as far back as the run took
    assert started is not None
    assert t + 3 * S - S // 10 < started <= t + 3 * S
    for attempt in log[:3]:
        assert attempt.traceback is not None
        assert attempt.traceback.startswith("Traceback (most recent call last):")
        assert attempt.traceback.rstrip().endswith(f"ConnectionError: {attempt.message}")
    assert log[3].traceback is None
    # A list reads no attempts: only `row` does.
    (listed,) = (await jobs.find(job.Where(state="done"))).rows
    assert listed.attempts_log == ()


async def test_a_row_keeps_its_newest_twenty_attempts(store: Store, t: int) -> None:
    jobs = queue(store)
    row_id = await jobs.push(Dies(1), at=t)
    assert row_id is not None
    for n in range(23):  # dies 23 times, retried by an operator after each death
        assert await jobs.run_one_at(t + n * S) is True
        assert await jobs.retry_dead(row_id) is True
    row = await jobs.row(row_id)
    assert row is not None
    assert [a.ended_at for a in row.attempts_log] == [t + n * S for n in range(3, 23)]
    assert {(a.attempt, a.outcome, a.error) for a in row.attempts_log} == {
        (1, "dead", "ValueError")
    }


async def test_deaths_are_counted_in_their_minute_after_a_bulk_retry(store: Store) -> None:
    jobs = queue(store)
    t0 = (job.now_us() // MINUTE) * MINUTE - 5 * MINUTE  # five minutes ago, on the minute
    ids = [await jobs.push(Dies(n), at=t0) for n in range(18)]
    assert await jobs.drain_at(t0 + 10 * S) == 18
    assert await jobs.retry_many(job.Where(state="dead")) == 18
    assert await jobs.stats() == (18, 0, 0)
    (flow,) = [f for f in await jobs.flow(minutes=10) if f.kind == "dies"]
    assert flow.died[flow.minutes.index(t0)] == 18
    assert sum(flow.died) == 18
    assert flow.dead == 0
    # They die again now (queued again due now): both minutes count, 36 deaths of 18 rows.
    t1 = job.now_us()
    assert await jobs.drain_at(t1) == 18
    (flow,) = [f for f in await jobs.flow(minutes=10) if f.kind == "dies"]
    assert flow.died[flow.minutes.index(t0)] == 18
    assert flow.died[flow.minutes.index(t1 - t1 % MINUTE)] == 18
    assert (sum(flow.died), flow.dead) == (36, 18)
    for row_id in ids:
        row = await jobs.row(row_id)
        assert row is not None
        assert [(a.outcome, a.ended_at) for a in row.attempts_log] == [
            ("dead", t0 + 10 * S),
            ("dead", t1),
        ]


async def test_attempts_go_with_their_rows(store: Store, t: int) -> None:
    jobs = queue(store)
    dead = await jobs.push(Dies(1), at=t)
    waiting = await jobs.push(Flaky(f"w-{id(store)}-{t}", fails=1), at=t)
    done = await jobs.push(Flaky(f"d-{id(store)}-{t}", fails=0), at=t + S)
    assert dead is not None
    assert waiting is not None
    assert done is not None
    assert await jobs.run_one_at(t) is True  # dead
    assert await jobs.run_one_at(t) is True  # waiting: retrying, due again at once
    assert await jobs.cancel(waiting) is True
    assert await jobs.run_one_at(t + S) is True  # done
    assert await jobs.delete_many([dead]) == 1
    again = await jobs.push(Dies(2), at=t)
    assert again is not None
    for row_id in (dead, waiting):
        assert await jobs.row(row_id) is None
    row = await jobs.row(done)
    assert row is not None
    assert [a.outcome for a in row.attempts_log] == ["done"]
    fresh = await jobs.row(again)
    assert fresh is not None
    assert fresh.attempts_log == ()
    assert await store.prune(t + 2 * S, 10) == 1  # the done row, and its attempt with it
    assert await jobs.row(done) is None


async def test_a_done_row_not_kept_keeps_no_attempts(store: Store, t: int) -> None:
    jobs = queue(store, retention_ms=0)
    row_id = await jobs.push(Flaky(f"n-{id(store)}-{t}", fails=1), at=t)
    assert row_id is not None
    assert await jobs.run_one_at(t) is True
    row = await jobs.row(row_id)
    assert row is not None
    assert [a.outcome for a in row.attempts_log] == ["retrying"]
    assert await jobs.run_one_at(t) is True
    assert await jobs.row(row_id) is None
    assert await store.prune(t + 10 * S, 10) == 0


async def test_a_snooze_is_an_attempt_that_did_not_count(store: Store, t: int) -> None:
    @dataclass
    class Later:
        nilo_job = "later"
        retry = job.Retry.NONE
        snoozes = 1

        def run(self, tick: job.Tick) -> None:
            if tick.attempts == 1 and not Later.seen:
                Later.seen = True
                raise job.Snooze(ms=1_000)

        seen: ClassVar[bool] = False

    jobs = job.Jobs(kinds=[Later], store=store)
    row_id = await jobs.push(Later(), at=t)
    assert row_id is not None
    assert await jobs.run_one_at(t) is True
    assert await jobs.run_one_at(t + S) is True
    row = await jobs.row(row_id)
    assert row is not None
    assert [(a.attempt, a.outcome, a.ended_at) for a in row.attempts_log] == [
        (1, "snoozed", t),
        (1, "done", t + S),
    ]


async def test_a_done_end_keeps_the_newest_twenty_too(store: Store, t: int) -> None:
    """The plain done end (one statement on PostgreSQL) trims as the others do."""
    jobs = queue(store)
    row_id = await jobs.push(Flaky(f"twenty-{id(store)}-{t}", fails=21), at=t)
    assert row_id is not None
    for n in range(22):  # seven lives of three failures, each retried, then done
        assert await jobs.run_one_at(t + n * S) is True
        if n % 3 == 2 and n < 21:
            assert await jobs.retry_dead(row_id) is True
    row = await jobs.row(row_id)
    assert row is not None
    assert row.state == "done"
    log = row.attempts_log
    assert [a.ended_at for a in log] == [t + n * S for n in range(2, 22)]
    assert [a.outcome for a in log[-4:]] == ["retrying", "retrying", "dead", "done"]
    assert [a.attempt for a in log[:4]] == [3, 1, 2, 3]


async def test_a_death_stays_counted_after_its_row_is_deleted(store: Store) -> None:
    jobs = queue(store)
    t0 = (job.now_us() // MINUTE) * MINUTE - 3 * MINUTE  # three minutes ago, on the minute
    for n in range(3):
        await jobs.push(Dies(n), at=t0)
    assert await jobs.drain_at(t0 + S) == 3
    assert await jobs.delete_many(job.Where(state="dead")) == 3
    (flow,) = [f for f in await jobs.flow(minutes=5) if f.kind == "dies"]
    assert (flow.died[flow.minutes.index(t0)], sum(flow.died), flow.dead) == (3, 3, 0)


@pytest.mark.parametrize("fails", [0, 1], ids=["then-done", "then-dead"])
async def test_an_attempt_lost_with_its_lease_is_recorded_by_the_worker_that_took_it_back(
    store: Store, t: int, fails: int
) -> None:
    jobs = queue(store)
    kind = Flaky(f"lost-{id(store)}-{t}", fails=0) if not fails else Dies(7)
    row_id = await jobs.push(kind, at=t)
    claimed = await store.claim([type(kind).nilo_job], t, t + S, 1, "host-a:11")
    assert [row.id for row in claimed] == [row_id]
    assert await jobs.run_one_at(t + 2 * S) is True  # its lease ran out at t + 1 s
    row = await jobs.row(row_id)
    assert row is not None
    lost = job.Attempt(1, "lost", None, t + 2 * S, "host-a:11")
    assert row.attempts_log[0] == lost
    ends = [(a.attempt, a.outcome, a.worker) for a in row.attempts_log[1:]]
    assert ends == [(2, "dead" if fails else "done", WORKER)]


async def test_deaths_are_counted_for_a_day(store: Store) -> None:
    """A kind's minutes older than a day are forgotten as it dies again: what `flow()` can
    show (1,440 minutes at most) stays counted, and the count stays small."""
    jobs = queue(store)
    now = (job.now_us() // MINUTE) * MINUTE
    day = 1_440 * MINUTE
    for at in (now - day - MINUTE, now - day + 2 * MINUTE, now):
        await jobs.push(Dies(at), at=at)
        assert await jobs.run_one_at(at) is True
    deaths = sorted((m, n) for kind, _state, m, n in await store.ended(0) if kind == "dies")
    assert deaths == [(now - day + 2 * MINUTE, 1), (now, 1)]
    (flow,) = [f for f in await jobs.flow(minutes=1_440) if f.kind == "dies"]
    counted = [flow.died[flow.minutes.index(m)] for m in (now - day + 2 * MINUTE, now)]
    assert (counted, sum(flow.died)) == ([1, 1], 2)
