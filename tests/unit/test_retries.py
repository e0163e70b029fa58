"""How a run fails, and what the queue does about it: retries and their waits (`Fixed`,
`Exponential` and its cap, measured from the failure), final errors, and timeouts of async and
sync runs.

Every clock is a `drain_at` number; the only real time spent is two small timeouts (50 ms).
"""

import asyncio
import json
import logging
import threading
from dataclasses import dataclass

import pytest

import nilo_job as job
from nilo_job._base.text import printable
from nilo_job.cli._log import JsonLines
from nilo_job.store.contract import Store
from tests.helpers.outcomes import MS, Boom, HardRejected, Rejected, read

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


HUGE = "no\n2026-01-01 00:00:00,000 INFO nilo_job: forged line\x1b]0;owned\x07 " + "x" * 5_000_000


@dataclass
class Loud:
    """Fails with a five-megabyte message holding a newline and terminal escapes."""

    nilo_job = "loud"
    retry = job.Retry(times=1)

    def run(self) -> None:
        raise ValueError(HUGE)


async def test_a_failure_is_logged_as_its_row_keeps_it_bounded_and_escaped(
    store: Store, t: int, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = job.Jobs(kinds=[Loud], store=store)
    row_id = await jobs.push(Loud(), at=t)
    assert row_id is not None
    with caplog.at_level(logging.WARNING, logger="nilo_job"):
        assert await jobs.drain_at(t) == 2  # failed, retried at once, failed and dead
    row = await jobs.row(row_id)
    assert row is not None
    assert row.traceback is not None
    retrying, died = [r for r in caplog.records if r.name == "nilo_job"]
    for record in (retrying, died):
        message = record.getMessage()
        assert len(message) < 2_200  # the row keeps 2,000 characters of the message
        for raw in ("\n", "\x1b", "\x07"):
            assert raw not in message
        assert "no\\x0a2026-01-01 00:00:00,000 INFO nilo_job: forged line\\x1b]0;owned\\x07 x" in (
            message
        )
        assert record.exc_info is not None  # the exception, for an error tracker
        assert record.exc_info[1] is not None
        assert str(record.exc_info[1]) == HUGE
        assert record.exc_text == printable(row.traceback.rstrip("\n"), lines=True)
        assert len(record.exc_text) < 10_200  # the row keeps 10,000 characters of traceback
        text = logging.Formatter("%(levelname)s %(message)s").format(record)
        assert text.count("\n") == record.exc_text.count("\n") + 1
        assert "forged line\n" not in text
        assert "\x1b" not in text
        line = JsonLines().format(record)
        assert "\n" not in line
        assert json.loads(line)["traceback"] == record.exc_text
    assert died.getMessage().startswith(
        f"loud row {row_id} failed with ValueError on attempt 2 and is dead"
    )
