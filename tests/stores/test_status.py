"""`status` and `progress`: what a status Space remembers of a row, for a route to poll."""

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.store.contract import Store

Q = job.State.QUEUED
R = job.State.RUNNING
DONE = job.State.DONE
DEAD = job.State.DEAD


class Boom(Exception):
    pass


def test_states_are_the_four_words() -> None:
    assert [state.value for state in job.State] == ["queued", "running", "done", "dead"]
    assert job.State.QUEUED == "queued"
    assert job.State("dead") is job.State.DEAD


async def test_a_row_is_queued_then_running_then_done_with_its_progress(
    store: Store, t: int
) -> None:
    seen: list[job.Status | None] = []

    @dataclass
    class Import:
        nilo_job = "import"
        retry = job.Retry.NONE

        async def run(self, tick: job.Tick, jobs: job.Jobs) -> None:
            seen.append(await jobs.status(tick.id))
            await jobs.progress(tick.id, 1_000)
            seen.append(await jobs.status(tick.id))
            await jobs.progress(tick.id, 4_000)

    jobs = job.Jobs(kinds=[Import], store=store, status=job.MemorySpace(ttl_s=600))
    row = await jobs.push(Import())
    assert await jobs.status(row) == job.Status(Q, 0, None)
    assert await jobs.drain_at(t) == 1
    assert seen == [job.Status(R, 1, 0), job.Status(R, 1, 1_000)]
    status = await jobs.status(row)
    assert status == job.Status(DONE, 1, 4_000)
    assert status is not None
    assert isinstance(status.state, job.State)
    assert status.state == "done"


async def test_progress_starts_over_with_every_attempt(store: Store, t: int) -> None:
    seen: list[job.Status | None] = []

    @dataclass
    class Import:
        nilo_job = "import"
        retry = job.Retry(times=1, backoff=job.Fixed(ms=1_000))

        async def run(self, tick: job.Tick, jobs: job.Jobs) -> None:
            seen.append(await jobs.status(tick.id))
            if tick.attempts == 1:
                await jobs.progress(tick.id, 5)
                raise Boom

    jobs = job.Jobs(kinds=[Import], store=store, status=job.MemorySpace(ttl_s=600))
    row = await jobs.push(Import())
    assert await jobs.drain_at(t) == 1
    waiting = await jobs.status(row)
    assert waiting is not None
    assert (waiting.state, waiting.attempts) == (Q, 1)
    assert await jobs.drain_at(t + 1_000_000) == 1
    assert seen == [job.Status(R, 1, 0), job.Status(R, 2, 0)]  # 0 until the run says more
    assert await jobs.status(row) == job.Status(DONE, 2, 0)


async def test_a_dead_row_is_dead_with_its_attempts(store: Store, t: int) -> None:
    @dataclass
    class Doomed:
        nilo_job = "doomed"
        retry = job.Retry(times=2)

        def run(self) -> None:
            raise Boom

    jobs = job.Jobs(kinds=[Doomed], store=store, status=job.MemorySpace(ttl_s=600))
    row = await jobs.push(Doomed())
    assert await jobs.drain_at(t) == 3
    assert await jobs.status(row) == job.Status(DEAD, 3, 0)
    assert await jobs.retry_dead(row) is True
    assert await jobs.status(row) == job.Status(Q, 0, None)


async def test_a_cancelled_row_has_no_status(store: Store) -> None:
    @dataclass
    class Nudge:
        nilo_job = "nudge"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    jobs = job.Jobs(kinds=[Nudge], store=store, status=job.MemorySpace(ttl_s=600))
    row = await jobs.push(Nudge(), after_ms=60_000)
    assert await jobs.cancel(row) is True
    assert await jobs.status(row) is None


async def test_a_row_the_space_never_saw_or_forgot_has_no_status(store: Store) -> None:
    @dataclass
    class Nudge:
        nilo_job = "nudge"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    now = [0.0]
    space = job.MemorySpace(ttl_s=600, clock=lambda: now[0])
    jobs = job.Jobs(kinds=[Nudge], store=store, status=space)
    assert await jobs.status(10_000) is None
    row = await jobs.push(Nudge())
    now[0] = 599.0
    assert await jobs.status(row) == job.Status(Q, 0, None)
    now[0] = 600.0
    assert await jobs.status(row) is None


async def test_without_a_space_status_is_none_and_progress_does_nothing(
    store: Store, t: int
) -> None:
    seen: list[job.Status | None] = []

    @dataclass
    class Import:
        nilo_job = "import"
        retry = job.Retry.NONE

        async def run(self, tick: job.Tick, jobs: job.Jobs) -> None:
            await jobs.progress(tick.id, 3)
            seen.append(await jobs.status(tick.id))

    jobs = job.Jobs(kinds=[Import], store=store)
    row = await jobs.push(Import())
    assert await jobs.status(row) is None
    assert await jobs.drain_at(t) == 1
    assert seen == [None]
    assert await jobs.status(row) is None


async def test_a_second_push_of_a_taken_key_leaves_the_first_status(store: Store) -> None:
    @dataclass
    class Nudge:
        nilo_job = "nudge"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    jobs = job.Jobs(kinds=[Nudge], store=store, status=job.MemorySpace(ttl_s=600))
    row = await jobs.push(Nudge(), unique="k")
    assert await jobs.push(Nudge(), unique="k") is None
    assert await jobs.status(row) == job.Status(Q, 0, None)


@pytest.mark.parametrize("space", [object(), {"ttl_s": 600}])
def test_a_status_that_is_not_a_space_is_refused(space: object) -> None:
    @dataclass
    class Nudge:
        nilo_job = "nudge"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    with pytest.raises(job.Refusal, match="MemorySpace"):
        job.Jobs(kinds=[Nudge], store=job.Memory(), status=space)  # type: ignore[arg-type]


async def test_ready_when_the_store_answers(store: Store) -> None:
    @dataclass
    class Nudge:
        nilo_job = "nudge"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    assert await job.Jobs(kinds=[Nudge], store=store).ready() is True


async def test_not_ready_when_the_store_cannot_be_reached(tmp_path: Path) -> None:
    @dataclass
    class Nudge:
        nilo_job = "nudge"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    table = job.Table(f"sqlite:///{tmp_path}/no/such/dir/q.db")
    try:
        assert await job.Jobs(kinds=[Nudge], store=table).ready() is False
    finally:
        await table.close()


async def test_a_sync_run_reports_progress_through_the_sync_face(store: Store) -> None:
    """A synchronous run (a thread of its own) has no event loop to await on: it reports with
    `jobs.sync.progress`, which hands the write to the loop serve runs on."""
    space = job.MemorySpace(ttl_s=600)
    done = threading.Event()

    @dataclass
    class Report:
        nilo_job = "report"
        retry = job.Retry.NONE

        def run(self, tick: job.Tick, jobs: job.Jobs) -> None:
            jobs.sync.progress(tick.id, 10)
            jobs.sync.progress(tick.id, 20)
            done.set()

    jobs = job.Jobs(kinds=[Report], store=store, status=space)
    async with jobs.serving(grace_ms=5_000):
        row = await jobs.push(Report())
        assert await asyncio.to_thread(done.wait, 20)
    # Leaving the block waited for the run's end to be written.
    assert await jobs.status(row) == job.Status(DONE, 1, 20)
