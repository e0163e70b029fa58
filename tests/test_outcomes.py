"""How a run ends, and what the queue does about it: retries and their waits, final errors,
timeouts, dead rows and retry_dead, cancel, payloads that no longer fit, kinds this program does
not know, the lease, and what a run is handed.

Every clock is a `drain_at` number; the only real time spent is two small timeouts (50 ms).
"""

import asyncio
import dataclasses
import logging
import threading
from dataclasses import dataclass
from typing import Any

import pytest

import nilo_job as job
from nilo_job.store.contract import Claimed, Store

MS = 1_000  # microseconds in a millisecond


class Boom(Exception):
    pass


def read(dead: list[job.Dead]) -> list[job.Dead]:
    """`dead` with each traceback checked (a Python traceback ending in the error's name and
    message; none for a row that did not run) and then set aside, so the rest compares exactly."""
    for row in dead:
        if row.error == "BadPayload":
            assert row.traceback == ""
            continue
        assert row.traceback.startswith("Traceback (most recent call last):\n"), row.traceback
        last = row.traceback.rstrip("\n").rsplit("\n", 1)[-1]
        assert last.endswith(f"{row.error}: {row.message}" if row.message else row.error), last
    return [dataclasses.replace(row, traceback="") for row in dead]


class Rejected(Exception):
    pass


class HardRejected(Rejected):
    pass


# --------------------------------------------------------------------------------- retry


async def test_retry_three_times_is_four_attempts_back_to_back_then_dead(
    store: Store, t: int
) -> None:
    seen: list[tuple[int, bool]] = []

    @dataclass
    class Flaky:
        nilo_job = "flaky"
        retry = job.Retry(times=3)

        n: int

        def run(self, tick: job.Tick) -> None:
            seen.append((tick.attempts, tick.last))
            raise Boom("the mail provider is down")

    jobs = job.Jobs(kinds=[Flaky], store=store)
    row = await jobs.push(Flaky(n=1))
    assert await jobs.drain_at(t) == 4
    assert seen == [(1, False), (2, False), (3, False), (4, True)]
    assert read(await jobs.dead_ones()) == [
        job.Dead(
            id=row, kind="flaky", error="Boom", attempts=4, payload={"n": 1}, died_at=t,
            message="the mail provider is down",
        )
    ]  # fmt: skip
    assert await jobs.stats() == (0, 0, 1)
    assert await jobs.stats() == job.Stats(0, 0, 1)
    assert await jobs.drain_at(t + 3_600_000_000) == 0


async def test_retry_none_is_one_attempt_and_dead(store: Store, t: int) -> None:
    seen: list[tuple[int, bool]] = []

    @dataclass
    class Once:
        nilo_job = "once"
        retry = job.Retry.NONE

        def run(self, tick: job.Tick) -> None:
            seen.append((tick.attempts, tick.last))
            raise Boom

    jobs = job.Jobs(kinds=[Once], store=store)
    await jobs.push(Once())
    assert await jobs.drain_at(t) == 1
    assert seen == [(1, True)]
    (dead,) = await jobs.dead_ones()
    assert (dead.error, dead.attempts, dead.died_at) == ("Boom", 1, t)
    assert await jobs.stats() == (0, 0, 1)


async def test_a_run_that_succeeds_on_a_retry_is_done(store: Store, t: int) -> None:
    seen: list[int] = []

    @dataclass
    class Flaky:
        nilo_job = "flaky"
        retry = job.Retry(times=3)

        def run(self, tick: job.Tick) -> None:
            seen.append(tick.attempts)
            if tick.attempts < 3:
                raise Boom

    jobs = job.Jobs(kinds=[Flaky], store=store)
    await jobs.push(Flaky())
    assert await jobs.drain_at(t) == 3
    assert seen == [1, 2, 3]
    assert await jobs.stats() == (0, 0, 0)
    assert await jobs.dead_ones() == []


async def test_fixed_backoff_waits_exactly_its_milliseconds_from_the_failure(
    store: Store, t: int
) -> None:
    seen: list[tuple[int, int, bool]] = []

    @dataclass
    class Fixed:
        nilo_job = "fixed"
        retry = job.Retry(times=2, backoff=job.Fixed(ms=30_000))

        def run(self, tick: job.Tick) -> None:
            seen.append((tick.attempts, tick.run_at, tick.last))
            raise Boom

    jobs = job.Jobs(kinds=[Fixed], store=store)
    await jobs.push(Fixed(), at=t - 5)
    assert await jobs.drain_at(t) == 1  # fails at t, not at its run_at
    assert await jobs.drain_at(t + 30_000 * MS - 1) == 0
    assert await jobs.drain_at(t + 30_000 * MS) == 1
    assert await jobs.drain_at(t + 60_000 * MS - 1) == 0
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.drain_at(t + 60_000 * MS) == 1
    assert seen == [
        (1, t - 5, False),
        (2, t + 30_000 * MS, False),
        (3, t + 60_000 * MS, True),
    ]
    assert await jobs.stats() == (0, 0, 1)
    assert (await jobs.dead_ones())[0].died_at == t + 60_000 * MS


async def test_exponential_backoff_doubles_from_the_failure_and_never_passes_its_cap(
    store: Store, t: int
) -> None:
    seen: list[tuple[int, int]] = []

    @dataclass
    class Exp:
        nilo_job = "exp"
        retry = job.Retry(times=4, backoff=job.Exponential(from_ms=100, to_ms=250))

        def run(self, tick: job.Tick) -> None:
            seen.append((tick.attempts, tick.run_at))
            raise Boom

    jobs = job.Jobs(kinds=[Exp], store=store)
    await jobs.push(Exp(), at=t)
    # Waits: 100, 200, then 400 capped at 250, and 250 again.
    due = [t, t + 100 * MS, t + 300 * MS, t + 550 * MS, t + 800 * MS]
    for attempt, when in enumerate(due, start=1):
        assert await jobs.drain_at(when - 1) == 0, f"attempt {attempt} ran early"
        assert await jobs.drain_at(when) == 1, f"attempt {attempt} did not run at {when - t} us"
    assert seen == list(enumerate(due, start=1))
    assert await jobs.stats() == (0, 0, 1)


async def test_exponential_from_100_ms_runs_again_at_100_ms_not_99(store: Store, t: int) -> None:
    @dataclass
    class Exp:
        nilo_job = "exp"
        retry = job.Retry(times=5, backoff=job.Exponential(from_ms=100, to_ms=3_600_000))

        def run(self) -> None:
            raise Boom

    jobs = job.Jobs(kinds=[Exp], store=store)
    await jobs.push(Exp())
    assert await jobs.drain_at(t) == 1
    assert await jobs.drain_at(t + 99 * MS) == 0
    assert await jobs.drain_at(t + 100 * MS) == 1
    assert await jobs.drain_at(t + 299 * MS) == 0
    assert await jobs.drain_at(t + 300 * MS) == 1
    assert await jobs.drain_at(t + 700 * MS - 1) == 0
    assert await jobs.drain_at(t + 700 * MS) == 1


async def test_an_exponential_wait_of_an_hour_is_reached_and_kept(store: Store, t: int) -> None:
    # from 1 s: 1, 2, 4, … 2048 s, then 4096 s would pass the hour and is capped at 3600 s.
    @dataclass
    class Exp:
        nilo_job = "exp"
        retry = job.Retry(times=14, backoff=job.Exponential(from_ms=1_000, to_ms=3_600_000))

        def run(self) -> None:
            raise Boom

    jobs = job.Jobs(kinds=[Exp], store=store)
    await jobs.push(Exp())
    now = t
    waits = [*(1_000 * 2**n for n in range(12)), 3_600_000, 3_600_000]
    assert await jobs.drain_at(now) == 1
    for wait_ms in waits:
        now += wait_ms * MS
        assert await jobs.drain_at(now - 1) == 0
        assert await jobs.drain_at(now) == 1
    assert await jobs.stats() == (0, 0, 1)


# --------------------------------------------------------------------------------- final


@dataclass
class Send:
    nilo_job = "send"
    retry = job.Retry(times=5)
    final = (Rejected,)

    error: str

    def run(self, tick: job.Tick) -> None:
        attempts.append(tick.attempts)
        raise {"rejected": Rejected, "hard": HardRejected, "boom": Boom}[self.error]("no")


attempts: list[int] = []


@pytest.mark.parametrize(("error", "name"), [("rejected", "Rejected"), ("hard", "HardRejected")])
async def test_a_final_error_is_dead_on_the_first_attempt_with_its_own_name(
    store: Store, t: int, error: str, name: str
) -> None:
    attempts.clear()
    jobs = job.Jobs(kinds=[Send], store=store)
    row = await jobs.push(Send(error=error))
    assert await jobs.drain_at(t) == 1
    assert attempts == [1]
    assert read(await jobs.dead_ones()) == [
        job.Dead(
            id=row, kind="send", error=name, attempts=1, payload={"error": error}, died_at=t,
            message="no",
        )
    ]  # fmt: skip


async def test_an_error_not_in_final_is_retried(store: Store, t: int) -> None:
    attempts.clear()
    jobs = job.Jobs(kinds=[Send], store=store)
    await jobs.push(Send(error="boom"))
    assert await jobs.drain_at(t) == 6
    assert attempts == [1, 2, 3, 4, 5, 6]
    (dead,) = await jobs.dead_ones()
    assert (dead.error, dead.attempts) == ("Boom", 6)


async def test_a_final_error_on_a_later_attempt_is_dead_then(store: Store, t: int) -> None:
    seen: list[int] = []

    @dataclass
    class Later:
        nilo_job = "later"
        retry = job.Retry(times=5)
        final = (Rejected,)

        def run(self, tick: job.Tick) -> None:
            seen.append(tick.attempts)
            raise Rejected if tick.attempts == 2 else Boom

    jobs = job.Jobs(kinds=[Later], store=store)
    await jobs.push(Later())
    assert await jobs.drain_at(t) == 2
    assert seen == [1, 2]
    (dead,) = await jobs.dead_ones()
    assert (dead.error, dead.attempts) == ("Rejected", 2)


# ------------------------------------------------------------------------------- timeout


async def test_an_async_run_past_its_timeout_is_timed_out_and_retried(store: Store, t: int) -> None:
    seen: list[int] = []

    @dataclass
    class Slow:
        nilo_job = "slow"
        retry = job.Retry(times=1)
        timeout_ms = 50

        async def run(self, tick: job.Tick) -> None:
            seen.append(tick.attempts)
            await asyncio.sleep(10)

    jobs = job.Jobs(kinds=[Slow], store=store)
    await jobs.push(Slow())
    assert await jobs.drain_at(t) == 2
    assert seen == [1, 2]
    (dead,) = await jobs.dead_ones()
    assert (dead.error, dead.attempts) == ("TimedOut", 2)


async def test_a_timeout_is_never_final(store: Store, t: int) -> None:
    # TimedOut is a JobError; listing its parent in final still does not make a timeout final.
    seen: list[int] = []

    @dataclass
    class Slow:
        nilo_job = "slow"
        retry = job.Retry(times=1)
        final = (job.JobError,)
        timeout_ms = 50

        async def run(self, tick: job.Tick) -> None:
            seen.append(tick.attempts)
            await asyncio.sleep(10)

    jobs = job.Jobs(kinds=[Slow], store=store)
    await jobs.push(Slow())
    assert await jobs.drain_at(t) == 2
    assert seen == [1, 2]
    (dead,) = await jobs.dead_ones()
    assert (dead.error, dead.attempts) == ("TimedOut", 2)


async def test_the_queue_timeout_applies_to_a_kind_without_its_own(store: Store, t: int) -> None:
    @dataclass
    class Slow:
        nilo_job = "slow"
        retry = job.Retry.NONE

        async def run(self) -> None:
            await asyncio.sleep(10)

    jobs = job.Jobs(kinds=[Slow], store=store, timeout_ms=50)
    await jobs.push(Slow())
    assert await jobs.drain_at(t) == 1
    assert [d.error for d in await jobs.dead_ones()] == ["TimedOut"]


async def test_a_timeout_error_raised_by_the_run_itself_keeps_its_name(
    store: Store, t: int
) -> None:
    @dataclass
    class Own:
        nilo_job = "own"
        retry = job.Retry.NONE

        async def run(self) -> None:
            raise TimeoutError("the provider timed out")

    jobs = job.Jobs(kinds=[Own], store=store)
    await jobs.push(Own())
    assert await jobs.drain_at(t) == 1
    assert [d.error for d in await jobs.dead_ones()] == ["TimeoutError"]


async def test_a_sync_run_past_its_timeout_is_timed_out(
    store: Store, t: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    ended = asyncio.Event()
    finish = store.finish

    async def noting_finish(ends):  # type: ignore[no-untyped-def]
        answers = await finish(ends)
        ended.set()
        return answers

    monkeypatch.setattr(store, "finish", noting_finish)

    @dataclass
    class Stuck:
        nilo_job = "stuck"
        retry = job.Retry.NONE
        timeout_ms = 50

        def run(self) -> None:
            release.wait(10)

    jobs = job.Jobs(kinds=[Stuck], store=store)
    row = await jobs.push(Stuck())
    drain = asyncio.create_task(jobs.drain_at(t))
    try:
        async with asyncio.timeout(5):
            await ended.wait()
        # The attempt is dead as TimedOut while its thread is still inside run.
        assert read(await jobs.dead_ones()) == [
            job.Dead(
                id=row, kind="stuck", error="TimedOut", attempts=1, payload={}, died_at=t,
                message=(await jobs.dead_ones())[0].message,
            )
        ]  # fmt: skip
        message = (await jobs.dead_ones())[0].message
        assert message.startswith("stuck ran longer than 0.05 s; its thread cannot be stopped")
        assert await jobs.stats() == (0, 0, 1)
    finally:
        release.set()
    assert await drain == 1
    assert await jobs.stats() == (0, 0, 1)


# ------------------------------------------------------------------ dead ones, retry_dead


async def test_dead_ones_are_newest_first(store: Store, t: int) -> None:
    @dataclass
    class Doomed:
        nilo_job = "doomed"
        retry = job.Retry.NONE

        n: int

        def run(self) -> None:
            raise Boom

    jobs = job.Jobs(kinds=[Doomed], store=store)
    older = await jobs.push(Doomed(n=1), at=t + 2)  # lower id, dies later
    newer = await jobs.push(Doomed(n=2), at=t + 1)
    assert await jobs.drain_at(t + 1) == 1
    assert await jobs.drain_at(t + 2) == 1
    assert read(await jobs.dead_ones()) == [
        job.Dead(
            id=older, kind="doomed", error="Boom", attempts=1, payload={"n": 1}, died_at=t + 2
        ),
        job.Dead(
            id=newer, kind="doomed", error="Boom", attempts=1, payload={"n": 2}, died_at=t + 1
        ),
    ]
    assert [d.id for d in await jobs.dead_ones(limit=1)] == [older]


async def test_retry_dead_runs_the_row_again_from_its_first_attempt(store: Store, t: int) -> None:
    seen: list[tuple[int, bool]] = []

    @dataclass
    class Flaky:
        nilo_job = "flaky"
        retry = job.Retry(times=1)

        def run(self, tick: job.Tick) -> None:
            seen.append((tick.attempts, tick.last))
            raise Boom

    jobs = job.Jobs(kinds=[Flaky], store=store)
    row = await jobs.push(Flaky())
    assert await jobs.drain_at(t) == 2
    assert await jobs.stats() == (0, 0, 1)
    assert await jobs.retry_dead(row) is True
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.dead_ones() == []
    assert await jobs.retry_dead(row) is False  # queued, not dead
    assert await jobs.drain_at(job.now_us()) == 2
    assert seen == [(1, False), (2, True), (1, False), (2, True)]
    (dead,) = await jobs.dead_ones()
    assert (dead.id, dead.attempts, dead.error) == (row, 2, "Boom")


async def test_retry_dead_of_a_row_that_is_not_dead_is_false(store: Store, t: int) -> None:
    @dataclass
    class Fine:
        nilo_job = "fine"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    jobs = job.Jobs(kinds=[Fine], store=store)
    queued = await jobs.push(Fine(), at=t + 1)
    done = await jobs.push(Fine())
    assert await jobs.drain_at(t) == 1
    assert await jobs.retry_dead(queued) is False
    assert await jobs.retry_dead(done) is False
    assert await jobs.retry_dead(10_000) is False
    assert await jobs.stats() == (1, 0, 0)


# -------------------------------------------------------------------------------- cancel


async def test_cancel_takes_a_queued_row_back_before_it_runs(store: Store, t: int) -> None:
    ran: list[int] = []

    @dataclass
    class Nudge:
        nilo_job = "nudge"
        retry = job.Retry.NONE

        def run(self, tick: job.Tick) -> None:
            ran.append(tick.id)

    jobs = job.Jobs(kinds=[Nudge], store=store)
    row = await jobs.push(Nudge(), after_ms=86_400_000)
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.cancel(row) is True
    assert await jobs.stats() == (0, 0, 0)
    assert await jobs.cancel(row) is False
    assert await jobs.drain_at(t + 2 * 86_400_000 * MS) == 0
    assert ran == []


async def test_cancel_takes_back_a_row_waiting_for_a_retry(store: Store, t: int) -> None:
    ran: list[int] = []

    @dataclass
    class Flaky:
        nilo_job = "flaky"
        retry = job.Retry(times=3, backoff=job.Fixed(ms=60_000))

        def run(self, tick: job.Tick) -> None:
            ran.append(tick.attempts)
            raise Boom

    jobs = job.Jobs(kinds=[Flaky], store=store)
    row = await jobs.push(Flaky())
    assert await jobs.drain_at(t) == 1
    assert await jobs.cancel(row) is True
    assert await jobs.stats() == (0, 0, 0)
    assert await jobs.drain_at(t + 3_600_000 * MS) == 0
    assert ran == [1]


async def test_cancel_of_the_running_row_is_false_and_the_run_completes(
    store: Store, t: int
) -> None:
    answers: list[bool] = []
    finished: list[int] = []

    @dataclass
    class Export:
        nilo_job = "export"
        retry = job.Retry.NONE

        async def run(self, tick: job.Tick, jobs: job.Jobs) -> None:
            answers.append(await jobs.cancel(tick.id))
            finished.append(tick.id)

    jobs = job.Jobs(kinds=[Export], store=store)
    row = await jobs.push(Export())
    assert await jobs.drain_at(t) == 1
    assert answers == [False]
    assert finished == [row]
    assert await jobs.stats() == (0, 0, 0)


async def test_cancel_of_a_dead_or_unknown_row_is_false(store: Store, t: int) -> None:
    @dataclass
    class Doomed:
        nilo_job = "doomed"
        retry = job.Retry.NONE

        def run(self) -> None:
            raise Boom

    jobs = job.Jobs(kinds=[Doomed], store=store)
    row = await jobs.push(Doomed())
    assert await jobs.drain_at(t) == 1
    assert await jobs.cancel(row) is False
    assert await jobs.cancel(10_000) is False
    assert await jobs.stats() == (0, 0, 1)


# ---------------------------------------------------------- payloads that no longer fit


@dataclass
class ShapeV1:
    nilo_job = "shape"
    retry = job.Retry(times=3)

    n: int

    def run(self) -> None:
        raise AssertionError("the old class never runs in this test")


shapes: list[str] = []


@dataclass
class ShapeV2:
    nilo_job = "shape"
    retry = job.Retry(times=3)

    n: str

    def run(self) -> None:
        shapes.append(self.n)


async def test_a_row_whose_json_no_longer_fits_dies_as_bad_payload_and_the_next_runs(
    store: Store, t: int
) -> None:
    shapes.clear()
    old = job.Jobs(kinds=[ShapeV1], store=store)
    new = job.Jobs(kinds=[ShapeV2], store=store)
    bad = await old.push(ShapeV1(n=5), at=t)
    await new.push(ShapeV2(n="five"), at=t + 1)
    assert await new.drain_at(t + 1) == 1  # the bad row is not a run
    assert shapes == ["five"]
    assert read(await new.dead_ones()) == [
        job.Dead(
            id=bad, kind="shape", error="BadPayload", attempts=1, payload={"n": 5}, died_at=t + 1,
            message="its payload no longer fits ShapeV2 (ValidationError: Expected `str`, got "
            "`int` - at `$.n`) (the row did not run)",
        )
    ]  # fmt: skip
    assert await new.stats() == (0, 0, 1)


async def test_run_one_past_only_a_bad_payload_is_false(store: Store, t: int) -> None:
    old = job.Jobs(kinds=[ShapeV1], store=store)
    new = job.Jobs(kinds=[ShapeV2], store=store)
    await old.push(ShapeV1(n=5))
    assert await new.run_one_at(t) is False
    assert await new.stats() == (0, 0, 1)


# ------------------------------------------------------------------------ unknown kinds


@dataclass
class Mine:
    nilo_job = "mine"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


@dataclass
class Theirs:
    nilo_job = "theirs"
    retry = job.Retry.NONE

    def run(self) -> None:
        raise AssertionError("this program does not run theirs")


async def test_rows_of_a_kind_this_program_does_not_know_are_never_taken_or_changed(
    store: Store, t: int
) -> None:
    mine = job.Jobs(kinds=[Mine], store=store)
    theirs = job.Jobs(kinds=[Theirs], store=store)
    row = await theirs.push(Theirs(), at=t)
    await mine.push(Mine(), at=t + 1)
    assert await mine.drain_at(t + 10) == 1
    assert await mine.run_one_at(t + 20) is False
    assert await mine.stats() == (1, 0, 0)
    # Still queued, attempts 0, due when it was: its first claim is attempt one.
    lease = t + 20 + 60_000 * MS
    assert await store.claim(["theirs"], t + 20, lease, 10) == [
        Claimed(row, "theirs", b"{}", 1, t, None)
    ]


# --------------------------------------------------------------------------------- lease


def test_the_lease_is_the_longest_timeout_plus_a_second() -> None:
    @dataclass
    class Quick:
        nilo_job = "quick"
        retry = job.Retry.NONE
        timeout_ms = 5_000

        def run(self) -> None:
            pass

    @dataclass
    class Plain:
        nilo_job = "plain"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    assert job.Jobs(kinds=[Plain], store=job.Memory()).lease_ms == 61_000
    assert job.Jobs(kinds=[Plain, Quick], store=job.Memory(), timeout_ms=2_000).lease_ms == 6_000
    assert job.Jobs(kinds=[Quick], store=job.Memory(), timeout_ms=9_000).lease_ms == 10_000
    assert job.Jobs(kinds=[Quick, Plain], store=job.Memory()).lease_ms == 61_000


async def test_a_row_whose_worker_died_runs_again_once_its_lease_passes(
    store: Store, t: int
) -> None:
    seen: list[tuple[int, int, bool]] = []

    @dataclass
    class Welcome:
        nilo_job = "welcome"
        retry = job.Retry(times=1)
        timeout_ms = 5_000

        def run(self, tick: job.Tick) -> None:
            seen.append((tick.id, tick.attempts, tick.last))

    jobs = job.Jobs(kinds=[Welcome], store=store, timeout_ms=2_000)
    assert jobs.lease_ms == 6_000
    lease = jobs.lease_ms * MS
    row = await jobs.push(Welcome(), at=t)
    # A worker claims the row and dies without finishing it.
    (claimed,) = await store.claim(["welcome"], t, t + lease, 1)
    assert (claimed.id, claimed.attempts) == (row, 1)
    assert await jobs.stats() == (0, 1, 0)
    assert await jobs.cancel(row) is False
    assert await jobs.drain_at(t + lease - 1) == 0
    assert await jobs.drain_at(t + lease) == 1
    assert seen == [(row, 2, True)]
    assert await jobs.stats() == (0, 0, 0)


async def test_a_drain_claims_under_the_lease(store: Store, t: int) -> None:
    # A row the drain claimed is not taken by another worker while the lease holds.
    taken: list[list[Claimed]] = []

    @dataclass
    class Watch:
        nilo_job = "watch"
        retry = job.Retry.NONE

        async def run(self) -> None:
            taken.append(await store.claim(["watch"], t + lease - 1, t + 2 * lease, 1))
            taken.append(await store.claim(["watch"], t + lease, t + 2 * lease, 1))

    jobs = job.Jobs(kinds=[Watch], store=store)
    lease = jobs.lease_ms * MS
    row = await jobs.push(Watch())
    assert await jobs.drain_at(t) == 1
    assert taken[0] == []
    assert [(c.id, c.attempts) for c in taken[1]] == [(row, 2)]


# ------------------------------------------------------------------------ what run gets


class Mailer:
    def __init__(self, name: str) -> None:
        self.name = name


class SmtpMailer(Mailer):
    pass


class Db:
    pass


@dataclass
class Deps:
    db: Db
    mail: Mailer


async def test_run_parameters_are_answered_by_their_annotations(store: Store, t: int) -> None:
    got: dict[str, Any] = {}

    @dataclass
    class Everything:
        nilo_job = "everything"
        retry = job.Retry(times=2)

        async def run(
            self, scope: job.Run, outbox: Mailer, which: job.Tick, queue: job.Jobs, conn: Db
        ) -> None:
            got.update(scope=scope, outbox=outbox, which=which, queue=queue, conn=conn)

    deps = Deps(db=Db(), mail=Mailer("primary"))
    jobs = job.Jobs(kinds=[Everything], store=store, deps=deps)
    row = await jobs.push(Everything(), at=t - 7)
    assert await jobs.drain_at(t) == 1
    assert got["which"] == job.Tick(id=row, attempts=1, run_at=t - 7, last=False)
    assert got["scope"].now_us == t
    assert got["scope"].tick == got["which"]
    assert isinstance(got["scope"].log, logging.LoggerAdapter)
    assert got["queue"] is jobs
    assert got["outbox"] is deps.mail
    assert got["conn"] is deps.db


async def test_a_dep_of_a_subclass_answers_a_parameter_of_its_base(store: Store, t: int) -> None:
    got: list[Mailer] = []

    @dataclass
    class SmtpDeps:
        mail: SmtpMailer

    @dataclass
    class Send:
        nilo_job = "send"
        retry = job.Retry.NONE

        def run(self, mail: Mailer) -> None:
            got.append(mail)

    deps = SmtpDeps(mail=SmtpMailer("smtp"))
    jobs = job.Jobs(kinds=[Send], store=store, deps=deps)
    await jobs.push(Send())
    assert await jobs.drain_at(t) == 1
    assert got == [deps.mail]


async def test_two_deps_of_one_type_are_told_apart_by_the_parameter_name(
    store: Store, t: int
) -> None:
    got: list[str] = []

    @dataclass
    class TwoMailers:
        primary: Mailer
        fallback: Mailer

    @dataclass
    class Send:
        nilo_job = "send"
        retry = job.Retry.NONE

        def run(self, fallback: Mailer, primary: Mailer) -> None:
            got.extend([fallback.name, primary.name])

    jobs = job.Jobs(
        kinds=[Send], store=store, deps=TwoMailers(primary=Mailer("p"), fallback=Mailer("f"))
    )
    await jobs.push(Send())
    assert await jobs.drain_at(t) == 1
    assert got == ["f", "p"]


async def test_a_run_can_push_a_follow_up_that_runs_in_the_same_drain(store: Store, t: int) -> None:
    order: list[str] = []

    @dataclass
    class Process:
        nilo_job = "process"
        retry = job.Retry.NONE

        file: int

        def run(self) -> None:
            order.append(f"process {self.file}")

    @dataclass
    class Download:
        nilo_job = "download"
        retry = job.Retry(times=3, backoff=job.Fixed(ms=30_000))

        file: int

        async def run(self, jobs: job.Jobs) -> None:
            order.append(f"download {self.file}")
            await jobs.push(Process(file=self.file))

    jobs = job.Jobs(kinds=[Download, Process], store=store)
    await jobs.push(Download(file=9))
    assert await jobs.drain_at(t) == 2
    assert order == ["download 9", "process 9"]
    assert await jobs.stats() == (0, 0, 0)


async def test_a_sync_run_executes_off_the_event_loop_thread(store: Store, t: int) -> None:
    threads: list[int] = []
    ticks: list[tuple[int, int]] = []

    @dataclass
    class Blocking:
        nilo_job = "blocking"
        retry = job.Retry.NONE

        def run(self, tick: job.Tick, scope: job.Run) -> None:
            ticks.append((scope.now_us, tick.attempts))
            threads.append(threading.get_ident())

    @dataclass
    class Cooperative:
        nilo_job = "cooperative"
        retry = job.Retry.NONE

        async def run(self) -> None:
            threads.append(threading.get_ident())

    jobs = job.Jobs(kinds=[Blocking, Cooperative], store=store)
    await jobs.push(Blocking(), at=t - 2)
    await jobs.push(Cooperative(), at=t - 1)
    assert await jobs.drain_at(t) == 2
    assert ticks == [(t, 1)]
    loop_thread = threading.get_ident()
    assert threads[0] != loop_thread
    assert threads[1] == loop_thread


async def test_an_exception_in_a_sync_run_is_recorded_by_name(store: Store, t: int) -> None:
    @dataclass
    class Sync:
        nilo_job = "sync"
        retry = job.Retry.NONE

        def run(self) -> None:
            raise HardRejected("550 no such user")

    jobs = job.Jobs(kinds=[Sync], store=store)
    await jobs.push(Sync())
    assert await jobs.drain_at(t) == 1
    assert [d.error for d in await jobs.dead_ones()] == ["HardRejected"]


# ------------------------------------------------------------------------ drain, run_one


async def test_drain_counts_runs_and_only_what_is_due(store: Store, t: int) -> None:
    @dataclass
    class Task:
        nilo_job = "task"
        retry = job.Retry.NONE

        fail: bool = False

        def run(self) -> None:
            if self.fail:
                raise Boom

    jobs = job.Jobs(kinds=[Task], store=store)
    await jobs.push(Task(), at=t)
    await jobs.push(Task(fail=True), at=t)
    await jobs.push(Task(), at=t + 1)
    assert await jobs.drain_at(t) == 2  # a failed run is a run
    assert await jobs.stats() == (1, 0, 1)
    assert await jobs.drain_at(t) == 0
    assert await jobs.drain_at(t + 1) == 1
    assert await jobs.drain() == 0


async def test_run_one_runs_one_row_or_answers_false(store: Store, t: int) -> None:
    ran: list[int] = []

    @dataclass
    class Task:
        nilo_job = "task"
        retry = job.Retry.NONE

        n: int

        def run(self) -> None:
            ran.append(self.n)

    jobs = job.Jobs(kinds=[Task], store=store)
    assert await jobs.run_one_at(t) is False
    assert await jobs.run_one() is False
    await jobs.push(Task(n=1), at=t)
    await jobs.push(Task(n=2), at=t + 5)
    assert await jobs.run_one_at(t + 4) is True
    assert await jobs.run_one_at(t + 4) is False
    assert ran == [1]
    assert await jobs.run_one_at(t + 5) is True
    assert ran == [1, 2]
    await jobs.push(Task(n=3))
    assert await jobs.run_one() is True
    assert ran == [1, 2, 3]


async def test_drain_runs_in_run_at_order(store: Store, t: int) -> None:
    ran: list[int] = []

    @dataclass
    class Task:
        nilo_job = "task"
        retry = job.Retry.NONE

        n: int

        def run(self) -> None:
            ran.append(self.n)

    jobs = job.Jobs(kinds=[Task], store=store)
    for n, offset in [(3, 30), (1, 10), (2, 20)]:
        await jobs.push(Task(n=n), at=t + offset)
    assert await jobs.drain_at(t + 30) == 3
    assert ran == [1, 2, 3]


async def test_drain_reads_the_clock_once(store: Store) -> None:
    # A follow-up due a microsecond after the drain's reading is not due in that drain, however
    # long the run took.
    readings: list[int] = []

    @dataclass
    class Next:
        nilo_job = "next"
        retry = job.Retry.NONE

        def run(self) -> None:
            readings.append(-1)

    @dataclass
    class First:
        nilo_job = "first"
        retry = job.Retry.NONE

        async def run(self, scope: job.Run, jobs: job.Jobs) -> None:
            readings.append(scope.now_us)
            while job.now_us() <= scope.now_us + 1:  # the wall clock passes the follow-up's time
                pass
            await jobs.push(Next(), at=scope.now_us + 1)

    jobs = job.Jobs(kinds=[First, Next], store=store)
    await jobs.push(First())
    assert await jobs.drain() == 1
    assert len(readings) == 1
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.drain_at(readings[0] + 1) == 1
    assert readings[1] == -1


async def test_a_dead_row_keeps_the_name_of_the_error_that_killed_it(store: Store, t: int) -> None:
    @dataclass
    class Changing:
        nilo_job = "changing"
        retry = job.Retry(times=1)

        def run(self, tick: job.Tick) -> None:
            raise ConnectionResetError if tick.attempts == 1 else Rejected("550")

    jobs = job.Jobs(kinds=[Changing], store=store)
    await jobs.push(Changing())
    assert await jobs.drain_at(t) == 2
    assert [(d.error, d.attempts) for d in await jobs.dead_ones()] == [("Rejected", 2)]
