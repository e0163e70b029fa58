"""What becomes of rows that will not run: dead rows newest first and retry_dead, cancel, payloads
that no longer fit, kinds this program does not know, and the lease that gives a dead worker's row
to another.

Every clock is a `drain_at` number.
"""

from dataclasses import dataclass

import nilo_job as job
from nilo_job.store.contract import Claimed, Store
from tests.helpers.outcomes import MS, Boom, read

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
