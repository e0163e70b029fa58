"""A run that says when it runs again: `job.Snooze` (not now, without spending an attempt,
bounded by the kind's `snoozes`) and `job.RetryIn` (a failed attempt whose next one is due after
the given wait instead of the backoff). Each on every store, on a test's clock (`drain_at`),
in `jobs.row`, and in the log; a snooze under serve in real time, woken for its due time.
"""

import asyncio
import dataclasses
import logging
import re
from dataclasses import dataclass

import pytest

import nilo_job as job
from nilo_job.store.contract import NewRow, Retrying, Snoozed, Store
from tests.helpers import ROOT
from tests.helpers.outcomes import MS, Boom, Rejected, read

MINUTE_MS = 60_000
TEN_YEARS_MS = 10 * 365 * 86_400_000


def snoozed(dead: list[job.Dead], ms: str) -> list[job.Dead]:
    """`dead`, rows that died of a snooze past their kind's most, with each traceback checked
    (the snooze's own, where the run raised it) and then set aside."""
    for row in dead:
        assert row.traceback.startswith("Traceback (most recent call last):\n"), row.traceback
        assert row.traceback.rstrip("\n").endswith(f"nilo_job.Snooze: snooze for {ms}")
    return [dataclasses.replace(row, traceback="") for row in dead]


def over(snoozes: int) -> str:
    """The message of a snooze past the kind's most, `snoozes`."""
    times = "time" if snoozes == 1 else "times"
    return (
        f"snoozed {snoozes} {times}, the kind's most (snoozes = {snoozes}): counted as a failed "
        "attempt"
    )


# --------------------------------------------------------------------------------- snooze


@dataclass
class Later:
    """Snoozes for a minute on its first run, then is done."""

    nilo_job = "later"
    retry = job.Retry(times=1)

    n: int

    def run(self, tick: job.Tick) -> None:
        later_seen.append((tick.attempts, tick.last))
        if len(later_seen) == 1:
            raise job.Snooze(ms=MINUTE_MS)


later_seen: list[tuple[int, bool]] = []


async def test_a_snooze_spends_no_attempt_and_is_due_exactly_its_ms_later(
    store: Store, t: int
) -> None:
    later_seen.clear()
    jobs = job.Jobs(kinds=[Later], store=store)
    row_id = await jobs.push(Later(n=1), at=t)
    assert row_id is not None
    assert await jobs.drain_at(t) == 1
    row = await jobs.row(row_id)
    assert row is not None
    due = t + MINUTE_MS * MS
    assert (row.state, row.attempts, row.run_at, row.snoozes) == ("queued", 0, due, 1)
    assert (row.error, row.message, row.traceback) == (None, None, None)
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.drain_at(due - 1) == 0  # not a µs before
    assert await jobs.drain_at(due) == 1
    assert later_seen == [(1, False), (1, False)]  # the same first attempt, run again
    done = await jobs.row(row_id)
    assert done is not None
    assert (done.state, done.attempts, done.snoozes) == ("done", 1, None)  # history keeps none
    assert await jobs.stats() == (0, 0, 0)


@dataclass
class Careful:
    """Fails once, then snoozes once, then is done."""

    nilo_job = "careful"
    retry = job.Retry(times=3, backoff=job.Fixed(ms=1_000))

    def run(self, tick: job.Tick) -> None:
        careful_seen.append(tick.attempts)
        if len(careful_seen) == 1:
            raise Boom("the partner is down")
        if len(careful_seen) == 2:
            raise job.Snooze(ms=5_000)


careful_seen: list[int] = []


async def test_a_snooze_keeps_the_unique_key_and_the_last_failure(store: Store, t: int) -> None:
    careful_seen.clear()
    jobs = job.Jobs(kinds=[Careful], store=store)
    row_id = await jobs.push(Careful(), at=t, unique="report:7")
    assert row_id is not None
    assert await jobs.drain_at(t) == 1  # attempt 1 fails: due a second later
    assert await jobs.drain_at(t + 1_000 * MS) == 1  # attempt 2 snoozes
    row = await jobs.row(row_id)
    assert row is not None
    assert (row.state, row.attempts, row.run_at, row.snoozes, row.unique_key) == (
        "queued", 1, t + 6_000 * MS, 1, "report:7"
    )  # fmt: skip
    assert (row.error, row.message) == ("Boom", "the partner is down")
    assert await jobs.push(Careful(), at=t, unique="report:7") is None  # the key is still held
    assert await jobs.drain_at(t + 6_000 * MS) == 1
    assert careful_seen == [1, 2, 2]
    assert await jobs.stats() == (0, 0, 0)
    assert await jobs.push(Careful(), at=t, unique="report:7") is not None  # released when done


@dataclass
class Always:
    """Snoozes every time, at once (due when it ran): the default most, 100."""

    nilo_job = "always"
    retry = job.Retry.NONE

    def run(self) -> None:
        raise job.Snooze(ms=0)


async def test_the_101st_snooze_counts_as_a_failed_attempt_and_retry_none_dies_of_it(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Always], store=store)
    row_id = await jobs.push(Always(), at=t)
    assert row_id is not None
    assert await jobs.drain_at(t) == 101  # a hundred snoozes, each due at once, then the end
    assert snoozed(await jobs.dead_ones(), "0 ms") == [
        job.Dead(
            id=row_id, kind="always", error="Snooze", attempts=1, payload={}, died_at=t,
            message="snoozed 100 times, the kind's most (snoozes = 100): counted as a failed "
            "attempt",
        )
    ]  # fmt: skip
    row = await jobs.row(row_id)
    assert row is not None
    assert (row.state, row.snoozes) == ("dead", 100)
    assert await jobs.retry_dead(row_id)
    row = await jobs.row(row_id)
    assert row is not None
    assert (row.state, row.attempts, row.snoozes, row.error) == ("queued", 0, 0, None)


@dataclass
class Patient:
    """Snoozes every time for 10 ms; at most twice per row, then the snooze is an attempt."""

    nilo_job = "patient"
    retry = job.Retry(times=1, backoff=job.Fixed(ms=1_000))
    snoozes = 2

    def run(self, tick: job.Tick) -> None:
        patient_seen.append(tick.attempts)
        raise job.Snooze(ms=10)


patient_seen: list[int] = []


async def test_a_snooze_past_the_kinds_most_is_a_failed_attempt_then_the_retries_end_it(
    store: Store, t: int
) -> None:
    patient_seen.clear()
    jobs = job.Jobs(kinds=[Patient], store=store)
    row_id = await jobs.push(Patient(), at=t)
    assert row_id is not None
    assert await jobs.drain_at(t) == 1
    assert await jobs.drain_at(t + 10 * MS) == 1
    assert await jobs.drain_at(t + 20 * MS) == 1  # the third snooze: a failed attempt
    row = await jobs.row(row_id)
    assert row is not None
    retry_at = t + 20 * MS + 1_000 * MS  # the kind's backoff, not the snooze's 10 ms
    assert (row.state, row.attempts, row.run_at, row.snoozes) == ("queued", 1, retry_at, 2)
    assert (row.error, row.message) == ("Snooze", over(2))
    assert await jobs.drain_at(retry_at - 1) == 0
    assert await jobs.drain_at(retry_at) == 1  # the last attempt snoozes: over the most again
    assert patient_seen == [1, 1, 1, 2]
    assert snoozed(await jobs.dead_ones(), "10 ms") == [
        job.Dead(
            id=row_id, kind="patient", error="Snooze", attempts=2, payload={}, died_at=retry_at,
            message=over(2),
        )
    ]  # fmt: skip
    assert await jobs.retry_many([row_id]) == 1  # from the first attempt, and no snoozes
    row = await jobs.row(row_id)
    assert row is not None
    assert (row.state, row.attempts, row.snoozes) == ("queued", 0, 0)


@dataclass
class Never:
    """A kind that allows no snooze: each is a failed attempt."""

    nilo_job = "never"
    retry = job.Retry.NONE
    snoozes = 0

    def run(self) -> None:
        raise job.Snooze(ms=MINUTE_MS)


async def test_snoozes_zero_makes_every_snooze_a_failed_attempt(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Never], store=store)
    row_id = await jobs.push(Never(), at=t)
    assert await jobs.drain_at(t) == 1
    (dead,) = snoozed(await jobs.dead_ones(), "60,000 ms")
    assert (dead.id, dead.error, dead.attempts, dead.message) == (row_id, "Snooze", 1, over(0))


async def test_a_drain_that_raises_goes_on_past_a_snooze_and_raises_the_one_past_the_most(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Patient], store=store)
    row_id = await jobs.push(Patient(), at=t)
    assert await jobs.drain_at(t, raises=True) == 1
    assert await jobs.drain_at(t + 10 * MS, raises=True) == 1
    with pytest.raises(job.Snooze) as raised:
        await jobs.drain_at(t + 20 * MS, raises=True)
    assert raised.value.__notes__[0].startswith(
        f"nilo-job: raised by the run of patient row {row_id}, attempt 1 of 2; the row is "
        "queued again for "
    )


async def test_a_snooze_is_logged_at_info_with_its_wait_and_count(
    store: Store, t: int, caplog: pytest.LogCaptureFixture
) -> None:
    later_seen.clear()
    jobs = job.Jobs(kinds=[Later, Patient], store=store)
    later = await jobs.push(Later(n=1), at=t)
    with caplog.at_level(logging.INFO, logger="nilo_job"):
        assert await jobs.drain_at(t) == 1
        patient = await jobs.push(Patient(), at=t)
        assert await jobs.drain_at(t) == 1
        assert await jobs.drain_at(t + 10 * MS) == 1
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "nilo_job"]
    assert said == [
        (logging.INFO, f"later row {later} snoozed for 60 s (snooze 1 of at most 100)"),
        (logging.INFO, f"patient row {patient} snoozed for 0.01 s (snooze 1 of at most 2)"),
        (logging.INFO, f"patient row {patient} snoozed for 0.01 s (snooze 2 of at most 2)"),
    ]
    first = next(r for r in caplog.records if r.name == "nilo_job")
    fields = ("kind", "row", "attempt", "wait_ms", "snoozes")
    assert [getattr(first, name) for name in fields] == ["later", later, 1, MINUTE_MS, 1]


# --------------------------------------------------------------------------------- retry in


@dataclass
class Throttled:
    """Always asks to be retried in five seconds; its backoff would be an hour."""

    nilo_job = "throttled"
    retry = job.Retry(times=2, backoff=job.Fixed(ms=3_600_000))

    def run(self, tick: job.Tick) -> None:
        throttled_seen.append(tick.attempts)
        raise job.RetryIn(ms=5_000)


throttled_seen: list[int] = []


async def test_retry_in_spends_an_attempt_and_waits_its_ms_not_the_backoff(
    store: Store, t: int
) -> None:
    throttled_seen.clear()
    jobs = job.Jobs(kinds=[Throttled], store=store)
    row_id = await jobs.push(Throttled(), at=t)
    assert row_id is not None
    assert await jobs.drain_at(t) == 1
    row = await jobs.row(row_id)
    assert row is not None
    assert (row.state, row.attempts, row.run_at, row.snoozes) == ("queued", 1, t + 5_000 * MS, 0)
    assert (row.error, row.message) == ("RetryIn", "retry in 5,000 ms")
    assert await jobs.drain_at(t + 5_000 * MS - 1) == 0
    assert await jobs.drain_at(t + 5_000 * MS) == 1
    assert await jobs.drain_at(t + 10_000 * MS) == 1  # the third and last attempt: dead
    assert throttled_seen == [1, 2, 3]
    assert read(await jobs.dead_ones()) == [
        job.Dead(
            id=row_id, kind="throttled", error="RetryIn", attempts=3, payload={},
            died_at=t + 10_000 * MS, message="retry in 5,000 ms",
        )
    ]  # fmt: skip


@dataclass
class LimitedSend:
    """Asks to be retried in two seconds, from the error that said so."""

    nilo_job = "rate-limited"
    retry = job.Retry(times=3, backoff=job.Fixed(ms=3_600_000))
    final = (Rejected,)

    reject: bool = False

    def run(self) -> None:
        try:
            if self.reject:
                raise Rejected("550 no such address")
            raise Boom("429 too many requests")
        except Exception as error:
            raise job.RetryIn(ms=2_000) from error


async def test_retry_in_from_an_error_records_that_error_and_a_final_one_is_dead(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[LimitedSend], store=store)
    limited = await jobs.push(LimitedSend(), at=t)
    rejected = await jobs.push(LimitedSend(reject=True), at=t)
    assert limited is not None
    assert rejected is not None
    assert await jobs.drain_at(t) == 2
    row = await jobs.row(limited)
    assert row is not None
    assert (row.state, row.attempts, row.run_at) == ("queued", 1, t + 2_000 * MS)
    assert (row.error, row.message) == ("Boom", "429 too many requests")
    assert row.traceback is not None
    assert row.traceback.rstrip("\n").endswith("Boom: 429 too many requests")  # the cause's own
    assert "RetryIn" not in row.traceback
    (dead,) = read(await jobs.dead_ones())
    assert (dead.id, dead.error, dead.attempts, dead.message, dead.died_at) == (
        rejected, "Rejected", 1, "550 no such address", t
    )  # fmt: skip


async def test_retry_in_is_logged_as_a_failure_with_its_own_wait(
    store: Store, t: int, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = job.Jobs(kinds=[Throttled, LimitedSend], store=store)
    throttled = await jobs.push(Throttled(), at=t)
    with caplog.at_level(logging.INFO, logger="nilo_job"):
        assert await jobs.drain_at(t) == 1
        limited = await jobs.push(LimitedSend(), at=t)
        assert await jobs.drain_at(t) == 1
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "nilo_job"]
    assert said == [
        (
            logging.WARNING,
            f"throttled row {throttled} failed with RetryIn on attempt 1: retry in 5,000 ms; "
            "retrying in 5.0 s",
        ),
        (
            logging.WARNING,
            f"rate-limited row {limited} failed with Boom on attempt 1: 429 too many requests; "
            "retrying in 2.0 s",
        ),
    ]
    waits = [getattr(r, "wait_ms") for r in caplog.records if r.name == "nilo_job"]  # noqa: B009
    assert waits == [5_000, 2_000]


# --------------------------------------------------------------------------------- serve


@dataclass
class Nap:
    """Snoozes for 50 ms on its first run, then is done (real time, under serve)."""

    nilo_job = "nap"
    retry = job.Retry.NONE

    def run(self, tick: job.Tick) -> None:
        nap_runs.append(job.now_us())
        if len(nap_runs) == 2:
            nap_done.set()
        else:
            raise job.Snooze(ms=50)


nap_runs: list[int] = []
nap_done: asyncio.Event


async def test_under_serve_a_snoozed_row_runs_again_when_due_not_at_the_next_poll(
    store: Store,
) -> None:
    global nap_done
    nap_runs.clear()
    nap_done = asyncio.Event()  # of this test's loop
    jobs = job.Jobs(kinds=[Nap], store=store, poll_ms=60_000)
    async with jobs.serving(grace_ms=1_000):
        row_id = await jobs.push(Nap())
        await asyncio.wait_for(nap_done.wait(), 20)
    first, second = nap_runs
    assert second - first >= 50_000  # not early either
    assert row_id is not None
    assert await jobs.stats() == (0, 0, 0)  # done


# --------------------------------------------------------------------------------- the store's end


async def test_the_snoozed_end_is_fenced_by_the_claim_and_counts_on_the_row(
    store: Store, t: int
) -> None:
    (row,) = await store.push([NewRow("a", b"{}", t, "k")])
    assert row is not None
    (claimed,) = await store.claim(["a"], t, t + 60_000 * MS, 1, "host:1")
    assert (claimed.attempts, claimed.snoozes) == (1, 0)
    assert await store.finish([Retrying(row, 1, t + 5, "Boom", "down", False, None, "tb")]) == [
        True
    ]
    await store.claim(["a"], t + 5, t + 60_000 * MS, 1, "host:1")
    assert await store.finish([Snoozed(row, 1, t + 10)]) == [False]  # not this claim's
    assert await store.finish([Snoozed(row, 2, t + 10)]) == [True]
    assert await store.finish([Snoozed(row, 2, t + 10)]) == [False]  # queued now: no claim
    view = await store.row(row)
    assert view is not None
    assert (view.state, view.attempts, view.run_at, view.snoozes, view.unique_key) == (
        "queued", 1, t + 10, 1, "k"
    )  # fmt: skip
    assert (view.error, view.detail, view.traceback, view.lease_until) == (
        "Boom",
        "down",
        "tb",
        None,
    )
    assert await store.push([NewRow("a", b"{}", t, "k")]) == [None]
    assert await store.claim(["a"], t + 9, t + 60_000 * MS, 1) == []  # not a µs before
    (again,) = await store.claim(["a"], t + 10, t + 60_000 * MS, 1)
    assert (again.attempts, again.snoozes) == (2, 1)
    assert await store.finish([Snoozed(row, 2, t + 20, True)]) == [True]  # its key handed on
    assert (await store.push([NewRow("a", b"{}", t, "k")]))[0] is not None
    view = await store.row(row)
    assert view is not None
    assert (view.attempts, view.snoozes, view.unique_key) == (1, 2, None)


# --------------------------------------------------------------------------------- the docs


class RateLimited(Exception):
    def __init__(self, retry_after_ms: int) -> None:
        super().__init__(f"429: retry after {retry_after_ms} ms")
        self.retry_after_ms = retry_after_ms


class Partner:
    """A partner that is busy once, then rate-limits once, then takes the report."""

    def __init__(self) -> None:
        self.asked = 0
        self.sent: list[int] = []

    def busy(self) -> bool:
        self.asked += 1
        return self.asked == 1

    async def send(self, report_id: int) -> None:
        if self.asked == 2:
            raise RateLimited(5_000)
        self.sent.append(report_id)


def test_the_references_example_runs_as_written(t: int) -> None:
    text = (ROOT / "docs" / "reference.md").read_text()
    (sample,) = (
        block
        for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
        if "raise job.Snooze(ms=60_000)" in block
    )
    scope: dict[str, object] = {
        "job": job, "dataclass": dataclass, "Partner": Partner, "RateLimited": RateLimited,
    }  # fmt: skip
    exec(sample, scope)

    @dataclass
    class Deps:
        partner: Partner

    send_report = scope["SendReport"]
    assert isinstance(send_report, type)
    partner = Partner()
    jobs = job.Jobs(kinds=[send_report], store=job.Memory(), deps=Deps(partner))
    minute = t + 60_000 * MS
    row_id = jobs.sync.push(send_report(report_id=7), at=t)
    assert row_id is not None
    assert jobs.sync.drain_at(t) == 1  # busy: snoozed for a minute
    assert jobs.sync.drain_at(minute) == 1  # rate-limited: retried in 5 s, an attempt spent
    row = jobs.sync.row(row_id)
    assert row is not None
    assert (row.attempts, row.snoozes, row.error, row.run_at) == (
        1, 1, "RateLimited", minute + 5_000 * MS
    )  # fmt: skip
    assert jobs.sync.drain_at(minute + 5_000 * MS) == 1
    assert partner.sent == [7]


# --------------------------------------------------------------------------------- refusals

RANGE = "ms must be whole milliseconds from 0 to 315,360,000,000 (ten years)"


@pytest.mark.parametrize("word", [job.Snooze, job.RetryIn], ids=["Snooze", "RetryIn"])
@pytest.mark.parametrize(
    ("ms", "said"),
    [
        (-1, "(ms=-1) is below 0"),
        (True, "(ms=True) is a bool, not a number"),
        (TEN_YEARS_MS + 1, "(ms=315360000001) is more than 315,360,000,000"),
        (1.5, "(ms=1.5) is not a whole number"),
    ],
)
def test_snooze_and_retry_in_refuse_an_ms_out_of_range(
    word: type[job.Snooze] | type[job.RetryIn], ms: object, said: str
) -> None:
    with pytest.raises(job.Refusal) as refused:
        word(ms=ms)  # type: ignore[arg-type]
    assert str(refused.value) == f"{word.__name__}{said}: {RANGE}"


def test_the_ends_of_the_range_are_taken() -> None:
    assert job.Snooze(ms=0).ms == 0
    assert job.RetryIn(ms=TEN_YEARS_MS).ms == TEN_YEARS_MS


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (-1, "Nap.snoozes = -1 is below 0"),
        (True, "Nap.snoozes = True is a bool, not a number"),
        (2**31 - 1, "Nap.snoozes = 2147483647 is more than 2,147,483,646"),
    ],
)
def test_a_kinds_snoozes_out_of_range_is_refused_by_name(value: object, said: str) -> None:
    @dataclass
    class Nap:
        nilo_job = "nap"
        retry = job.Retry.NONE
        snoozes = value

        def run(self) -> None:
            pass

    with pytest.raises(job.Refusal) as refused:
        job.Jobs(kinds=[Nap], store=job.Memory())
    assert str(refused.value) == (
        f"{said}: snoozes must be a count of snoozes from 0 to 2,147,483,646 (a row's snoozes "
        "are a 32-bit integer in PostgreSQL)"
    )
