"""Loud drains: `drain_at(..., raises=True)` and its kin hand a run's exception to the test, with
its own traceback and a note saying which row raised it and what became of the row; the end is
written first, exactly as a quiet drain writes it.
"""

import traceback
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

import nilo_job as job
from nilo_job.store.contract import Store
from tests.helpers.outcomes import MS, Boom


@dataclass
class Charge:
    nilo_job = "charge-card"
    retry = job.Retry(times=2, backoff=job.Fixed(ms=250))

    cents: int

    def run(self) -> None:
        if self.cents < 0:
            raise Boom(f"cannot charge {self.cents} cents")


def utc(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def raised_in(error: BaseException) -> str:
    """The function the traceback of `error` ends in."""
    return traceback.extract_tb(error.__traceback__)[-1].name


async def test_a_run_that_raises_reaches_the_test_with_its_traceback_and_the_row_named(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Charge], store=store)
    ok = await jobs.push(Charge(100), at=t)
    bad = await jobs.push(Charge(-5), at=t + 1)
    later = await jobs.push(Charge(7), at=t + 2)
    with pytest.raises(Boom, match=r"^cannot charge -5 cents") as raised:
        await jobs.drain_at(t + 2, raises=True)
    assert raised_in(raised.value) == "run"  # the run's own frame, not the library's
    assert raised.value.__notes__ == [
        f"nilo-job: raised by the run of charge-card row {bad}, attempt 1 of 3; the row is "
        f"queued again for {utc(t + 2 + 250 * MS)}"
    ]
    # The end was written before the exception left, and the drain stopped there.
    assert (await jobs.row(ok)).state == "done"  # type: ignore[union-attr]
    row = await jobs.row(bad)
    assert row is not None
    assert (row.state, row.attempts, row.run_at, row.error) == (
        "queued",
        1,
        t + 2 + 250 * MS,
        "Boom",
    )
    assert (await jobs.row(later)).state == "queued"  # type: ignore[union-attr]
    # Quiet again, the drain goes on past the failure and counts the runs it called.
    assert await jobs.drain_at(t + 2) == 1
    assert (await jobs.row(later)).state == "done"  # type: ignore[union-attr]


async def test_the_last_attempt_says_the_row_is_dead(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Charge], store=store)
    bad = await jobs.push(Charge(-1), at=t)
    assert await jobs.drain_at(t) == 1
    assert await jobs.drain_at(t + 250 * MS) == 1
    with pytest.raises(Boom) as raised:
        await jobs.run_one_at(t + 500 * MS, raises=True)
    assert raised.value.__notes__ == [
        f"nilo-job: raised by the run of charge-card row {bad}, attempt 3 of 3; the row is dead "
        "(Boom)"
    ]
    assert [dead.id for dead in await jobs.dead_ones()] == [bad]


async def test_a_row_that_cannot_be_read_raises_bad_payload_without_running(
    store: Store, t: int
) -> None:
    @dataclass
    class Renamed:  # the class Charge became: its field is now `amount`
        nilo_job = "charge-card"
        retry = job.Retry.NONE

        amount: int

        def run(self) -> None:
            raise AssertionError("a row that does not fit must not run")

    bad = await job.Jobs(kinds=[Charge], store=store).push(Charge(3), at=t)
    jobs = job.Jobs(kinds=[Renamed], store=store)
    with pytest.raises(job.BadPayload) as raised:
        await jobs.drain_at(t, raises=True)
    assert str(raised.value) == (
        "its payload no longer fits Renamed (ValidationError: Object missing required field "
        "`amount`) (the row did not run)"
    )
    assert raised.value.__notes__ == [
        f"nilo-job: not run: charge-card row {bad}, attempt 1 of 1; the row is dead (BadPayload)"
    ]


async def test_a_drain_that_does_not_ask_stays_quiet_and_counts(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Charge], store=store)
    await jobs.push(Charge(-5), at=t)
    await jobs.push(Charge(5), at=t)
    assert await jobs.drain_at(t) == 2
    assert await jobs.stats() == job.Stats(1, 0, 0)


def test_the_sync_drain_raises_too(tmp_path: object, t: int) -> None:
    jobs = job.Jobs(kinds=[Charge], store=job.Memory())
    jobs.sync.push(Charge(-9))
    with pytest.raises(Boom, match=r"^cannot charge -9 cents") as raised:
        jobs.sync.drain(raises=True)
    assert raised.value.__notes__[0].startswith("nilo-job: raised by the run of charge-card row 1,")
    jobs.sync.close()
