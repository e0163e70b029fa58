"""serve's worker loop on every store: how many rows run at once, each run's own context, ends
written before serve returns, a prompt stop, a worker that outlives a failing store or status
space, and
a push handed straight to an idle worker of its own process.

Every wait is for an event with a bound; nothing sleeps to wait for time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import gc
import itertools
import os
from collections.abc import Sequence

import pytest

import nilo_job as job
from nilo_job.store.contract import Claimed, End, NewRow, Released, Store
from tests.helpers.serving import FailingSpace, until, until_idle

_running = 0
_most = 0
_ran: list[int] = []
_all_ran = asyncio.Event()
_expected = 0
_seen_in_run: list[str] = []
_tag: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="unset")


def _reset(expected: int) -> None:
    global _running, _most, _expected, _all_ran
    _running = _most = 0
    _ran.clear()
    _seen_in_run.clear()
    _expected = expected
    _all_ran = asyncio.Event()


@dataclasses.dataclass
class Counted:
    nilo_job = "counted"
    retry = job.Retry.NONE

    n: int = 0

    async def run(self) -> None:
        global _running, _most
        _running += 1
        _most = max(_most, _running)
        await asyncio.sleep(0)  # let the other workers in while this one runs
        _running -= 1
        _ran.append(self.n)
        if len(_ran) == _expected:
            _all_ran.set()


@dataclasses.dataclass
class Tagged:
    nilo_job = "tagged"
    retry = job.Retry.NONE

    n: int = 0

    async def run(self) -> None:
        _seen_in_run.append(_tag.get())
        _tag.set(f"set by row {self.n}")
        _ran.append(self.n)
        if len(_ran) == _expected:
            _all_ran.set()


async def test_every_row_runs_once_never_more_than_workers_at_once_and_ends_are_written(
    store: Store,
) -> None:
    _reset(300)
    jobs = job.Jobs(kinds=[Counted], store=store, workers=3, poll_ms=50)
    await jobs.push_many([Counted(n) for n in range(300)])
    async with jobs.serving(grace_ms=5_000):
        async with asyncio.timeout(30):
            await _all_ran.wait()
    # serve has returned: every run's end is written, though workers took their next rows
    # while earlier ends were still being written.
    assert sorted(_ran) == list(range(300))
    assert _most == 3
    assert await jobs.stats() == (0, 0, 0)


async def test_rows_claimed_ahead_wait_their_time_from_the_claims_answer_not_from_its_sending(
    store: Store,
) -> None:
    # A claim answered late (a slow database: here the queue's clock moves 0.5 s on while the
    # first claim of rows ahead of the one worker is answered, within the lease's second beyond
    # the run's timeout) hands over rows that have not waited here yet: they run, and none goes
    # back to the table unrun.
    _reset(200)
    jobs = job.Jobs(kinds=[Counted], store=store, workers=1)
    await jobs.push_many([Counted(n) for n in range(200)])
    clock = jobs._parts.clock
    real_claim, real_finish = store.claim, store.finish
    late, released = 0, 0

    async def late_claim(*args: object, **kwargs: object) -> list[Claimed]:
        nonlocal late
        rows = await real_claim(*args, **kwargs)  # type: ignore[arg-type]
        if len(rows) > 1 and not late:
            late = len(rows)
            clock.offset_us += 500_000  # the answer came 0.5 s after the claim was sent
        return rows

    async def counted_finish(ends: Sequence[End]) -> list[bool]:
        nonlocal released
        released += sum(isinstance(end, Released) for end in ends)
        return await real_finish(ends)

    store.claim = late_claim  # type: ignore[method-assign]
    store.finish = counted_finish  # type: ignore[method-assign]
    try:
        async with jobs.serving(grace_ms=5_000):
            async with asyncio.timeout(30):
                await _all_ran.wait()
            given_back = released
    finally:
        store.claim, store.finish = real_claim, real_finish  # type: ignore[method-assign]
    assert late > 1  # a claim took rows ahead of the worker, and was answered late
    assert given_back == 0
    assert sorted(_ran) == list(range(200))


def _ours(found: object) -> bool:
    """Whether `found` (an object the cyclic garbage collector freed) is of nilo-job's making:
    an instance of one of its classes, or a function, coroutine or frame of its code."""
    code = getattr(found, "__code__", None) or getattr(found, "cr_code", None)
    code = code or getattr(found, "f_code", None)
    if code is not None:
        return f"{os.sep}nilo_job{os.sep}" in code.co_filename
    return type(found).__module__.startswith("nilo_job")


async def test_runs_leave_no_reference_cycles_for_the_garbage_collector(store: Store) -> None:
    """A run's bookkeeping is freed when the run ends, not by the cyclic collector: one cycle
    per run made serve's process collect garbage over and over, and hold every run's row until
    it did."""
    _reset(20)
    jobs = job.Jobs(kinds=[Counted], store=store, workers=4, poll_ms=50)
    await jobs.push_many([Counted(n) for n in range(20)])
    async with jobs.serving(grace_ms=5_000):
        async with asyncio.timeout(30):
            await _all_ran.wait()  # connections and statements are ready now
        await until_idle(jobs)
        gc.collect()
        gc.disable()
        try:
            _reset(200)
            await jobs.push_many([Counted(n) for n in range(200)])
            async with asyncio.timeout(30):
                await _all_ran.wait()
            feed = jobs._parts.wakeups.feed
            assert feed is not None
            await until("every run's end written", lambda: not feed.tasks)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            freed = [type(found).__qualname__ for found in gc.garbage if _ours(found)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert freed == []
    assert await jobs.stats() == (0, 0, 0)


async def test_each_run_has_a_context_of_its_own(store: Store) -> None:
    _reset(3)
    jobs = job.Jobs(kinds=[Tagged], store=store, workers=1, poll_ms=50)
    await jobs.push_many([Tagged(n) for n in range(3)])
    async with jobs.serving():
        async with asyncio.timeout(30):
            await _all_ran.wait()
    # One worker ran all three, one after the other: what a run set is not seen by the next.
    assert _ran == [0, 1, 2]
    assert _seen_in_run == ["unset", "unset", "unset"]


async def test_a_push_handed_to_an_idle_worker_runs_in_serves_context_not_the_pushers(
    store: Store,
) -> None:
    # The pushing task (a request, say) hands its row to the worker itself: the run must see
    # what serve's context holds, not what the pusher had set, nor what an earlier run set.
    _reset(2)
    jobs = job.Jobs(kinds=[Tagged], store=store, workers=1, poll_ms=60_000)
    _tag.set("serve's")
    async with jobs.serving():
        await until_idle(jobs)

        async def request(n: int) -> None:
            _tag.set(f"request {n}")
            await jobs.push(Tagged(n))

        await asyncio.create_task(request(0))
        await until("the first run", lambda: len(_ran) == 1)
        await until_idle(jobs)
        await asyncio.create_task(request(1))
        async with asyncio.timeout(30):
            await _all_ran.wait()
    assert _ran == [0, 1]
    assert _seen_in_run == ["serve's", "serve's"]
    assert _tag.get() == "serve's"


async def test_serve_stops_at_once_when_asked_just_as_a_run_ends(store: Store) -> None:
    # A stop that lands as a worker goes idle must not be lost (asyncio.wait_for on 3.11
    # swallowed such a cancel, and serve went on forever).
    jobs = job.Jobs(kinds=[Counted], store=store, workers=2, poll_ms=20)
    for n in range(24):
        _reset(1)
        await jobs.push(Counted(n))
        async with asyncio.timeout(10):
            async with jobs.serving(grace_ms=1_000):
                await _all_ran.wait()
                jobs.wake()  # the claim loop's wait ends as the stop arrives, give or take
                for _ in range(n % 4):  # a step or three of the loop
                    await asyncio.sleep(0)
    assert await jobs.stats() == (0, 0, 0)


async def test_a_status_space_that_fails_fails_neither_a_push_nor_a_run(store: Store) -> None:
    _reset(3)
    space = FailingSpace()
    jobs = job.Jobs(kinds=[Counted], store=store, workers=1, poll_ms=20, status=space)
    space.down = True
    ids = [await jobs.push(Counted(n)) for n in (1, 2, 3)]
    assert None not in ids
    async with jobs.serving():
        async with asyncio.timeout(30):
            await _all_ran.wait()
    assert _ran == [1, 2, 3]
    assert await jobs.stats() == (0, 0, 0)


async def test_a_worker_goes_on_after_an_end_that_could_not_be_written(store: Store) -> None:
    _reset(3)
    jobs = job.Jobs(kinds=[Counted], store=store, workers=1, poll_ms=20)
    real = store.finish
    failed: list[int] = []

    async def finish_failing_once(ends: Sequence[End]) -> list[bool]:
        if not failed:
            failed.append(ends[0].id)
            raise RuntimeError("a bug in a store of your own")
        return await real(ends)

    store.finish = finish_failing_once  # type: ignore[method-assign]
    for n in (1, 2, 3):
        await jobs.push(Counted(n))
    async with jobs.serving():
        async with asyncio.timeout(30):
            await _all_ran.wait()
    assert _ran == [1, 2, 3]
    # The row whose end was lost stays running under its lease (it runs again after it).
    assert [row.id for row in await store.rows("running", 10)] == failed
    assert await jobs.stats() == (0, 1, 0)


@dataclasses.dataclass
class Attempted:
    nilo_job = "attempted"
    retry = job.Retry.NONE

    n: int = 0

    async def run(self, tick: job.Tick) -> None:
        _ran.append(tick.attempts)
        if len(_ran) == _expected:
            _all_ran.set()


class ClaimCounter:
    """Counts the rows `store.claim` hands out."""

    def __init__(self, store: Store) -> None:
        self.claim = store.claim
        self.rows = 0
        store.claim = self  # type: ignore[method-assign]

    async def __call__(self, *args: object, **kwargs: object) -> list[Claimed]:
        rows = await self.claim(*args, **kwargs)  # type: ignore[arg-type]
        self.rows += len(rows)
        return rows


async def test_a_push_with_an_idle_worker_here_is_run_without_a_claim(store: Store) -> None:
    jobs = job.Jobs(kinds=[Attempted], store=store, workers=2, poll_ms=60_000)
    counter = ClaimCounter(store)
    async with jobs.serving():
        await until_idle(jobs)
        feed = jobs._parts.wakeups.feed
        assert feed is not None
        for n in range(5):
            _reset(1)
            await jobs.push(Attempted(n))
            async with asyncio.timeout(30):
                await _all_ran.wait()
            assert _ran == [1]
            # (Its end written: before serve's first writes of ends, its bound is two rows a
            # worker whose ends are not written, and a push past it is claimed.)
            await until("its end written", lambda: not feed.tasks)
    assert counter.rows == 0  # each row was claimed by its own push, for an idle worker
    assert await jobs.stats() == (0, 0, 0)


async def test_a_push_due_later_is_queued_and_claimed_when_due(store: Store) -> None:
    jobs = job.Jobs(kinds=[Attempted], store=store, workers=2, poll_ms=20)
    counter = ClaimCounter(store)
    _reset(1)
    async with jobs.serving():
        await until_idle(jobs)
        await jobs.push(Attempted(1), after_ms=50)
        assert (await jobs.stats()).queued == 1
        async with asyncio.timeout(30):
            await _all_ran.wait()
    assert _ran == [1]
    assert counter.rows == 1


async def test_a_row_claimed_by_a_push_as_serve_stops_is_queued_again_unrun(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Attempted], store=store, workers=1, poll_ms=60_000)
    real = store.push
    gate = asyncio.Event()

    async def held(rows: Sequence[NewRow]) -> list[int | None]:
        await gate.wait()
        return await real(rows)

    store.push = held  # type: ignore[method-assign]
    _reset(1)
    async with jobs.serving():
        await until_idle(jobs)
        pushing = asyncio.create_task(jobs.push(Attempted(1)))
        await asyncio.sleep(0)
    # serve has stopped while the push, which claimed its row for the idle worker, was in flight
    gate.set()
    row_id = await pushing
    assert row_id is not None
    assert _ran == []
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.drain_at(t) == 1
    assert _ran == [1]  # queued again unrun: its first run is still attempt one


# ---------------------------------------------------------- rows that fall due later


_started_at: dict[str, list[int]] = {}
_due_at: dict[str, list[int]] = {}  # the tick's run_at, for a run that knows it
_begun_at: dict[str, list[int]] = {}  # the same run's start, on the queue's own clock
_arrived: dict[str, asyncio.Event] = {}


def _mark(name: str, run: job.Run | None = None) -> None:
    _started_at.setdefault(name, []).append(job.now_us())
    if run is not None:
        _due_at.setdefault(name, []).append(run.tick.run_at)
        _begun_at.setdefault(name, []).append(run.now_us)
    _arrived.setdefault(name, asyncio.Event()).set()


async def _wait_mark(name: str, count: int = 1) -> None:
    async with asyncio.timeout(20):  # the poll below is a minute: a wake-up, not the poll
        while len(_started_at.get(name, [])) < count:
            event = _arrived.setdefault(name, asyncio.Event())
            event.clear()
            await event.wait()


@dataclasses.dataclass
class Later:
    nilo_job = "later"
    retry = job.Retry.NONE

    async def run(self) -> None:
        _mark("later")


@dataclasses.dataclass
class Flaky:
    nilo_job = "flaky"
    retry = job.Retry(times=1, backoff=job.Exponential(from_ms=300, to_ms=300))

    async def run(self) -> None:
        _mark("flaky")
        if len(_started_at["flaky"]) == 1:
            raise RuntimeError("the first attempt fails")


@dataclasses.dataclass
class Ticking:
    nilo_job = "ticking"
    schedule = job.every(400)
    retry = job.Retry.NONE
    overlap = job.Overlap.SKIP  # the next tick is handed on with the end of this one
    missed = job.Missed.CATCH_UP

    async def run(self, run: job.Run) -> None:
        _mark("ticking", run)


@dataclasses.dataclass
class TickingQueued:
    nilo_job = "ticking_queued"
    schedule = job.every(400)
    retry = job.Retry.NONE
    overlap = job.Overlap.QUEUE  # the next tick is handed on as this one starts
    missed = job.Missed.CATCH_UP

    async def run(self, run: job.Run) -> None:
        _mark("ticking", run)


@pytest.mark.parametrize("settled", [True, False], ids=["idle", "as_serving_begins"])
async def test_a_row_pushed_with_a_delay_starts_when_due_not_at_the_next_poll(
    store: Store, settled: bool
) -> None:
    _started_at.clear()
    _arrived.clear()
    jobs = job.Jobs(kinds=[Later], store=store, poll_ms=60_000)
    async with jobs.serving(grace_ms=1_000):
        if settled:
            await until_idle(jobs)  # else pushed before serve's first claim, perhaps
        pushed = job.now_us()
        await jobs.push(Later(), after_ms=300)
        await _wait_mark("later")
    assert _started_at["later"][0] - pushed >= 300_000  # not early either


async def test_a_retry_runs_after_its_wait_not_at_the_next_poll(store: Store) -> None:
    _started_at.clear()
    _arrived.clear()
    jobs = job.Jobs(kinds=[Flaky], store=store, poll_ms=60_000)
    async with jobs.serving(grace_ms=1_000):
        await jobs.push(Flaky())
        await _wait_mark("flaky", 2)
    first, second = _started_at["flaky"]
    assert second - first >= 300_000


@pytest.mark.parametrize("kind", [Ticking, TickingQueued])
async def test_a_schedule_ticks_on_time_with_a_long_poll(store: Store, kind: type) -> None:
    _started_at.clear()
    _due_at.clear()
    _begun_at.clear()
    _arrived.clear()
    jobs = job.Jobs(kinds=[kind], store=store, poll_ms=60_000)
    async with jobs.serving(grace_ms=1_000):
        await _wait_mark("ticking", 3)  # within 20 s: woken for each tick, not by the poll
    dues = _due_at["ticking"][:3]
    # Ticks on every(400)'s grid, each started no sooner than it was due.
    assert [(later - earlier) % 400_000 for earlier, later in itertools.pairwise(dues)] == [0, 0]
    assert dues == sorted(set(dues))
    assert all(started >= due for started, due in zip(_started_at["ticking"], dues, strict=False))


@dataclasses.dataclass
class Busy:
    nilo_job = "busy"
    retry = job.Retry.NONE

    async def run(self) -> None:
        _mark("busy")
        await _release_busy.wait()


_release_busy = asyncio.Event()


async def test_due_times_already_past_do_not_crowd_out_a_later_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While every worker is busy the claim loop does not sleep, so due times pile up; once
    passed they must not fill the cap and push out a row due later."""
    global _release_busy
    _started_at.clear()
    _arrived.clear()
    _release_busy = asyncio.Event()
    monkeypatch.setattr("nilo_job._worker.wakeups._DUE_KNOWN_MOST", 16)
    jobs = job.Jobs(
        kinds=[Busy, Later, Counted], store=job.Memory(bytes=1 << 20), workers=1, poll_ms=60_000
    )
    clock = jobs._parts.clock  # the queue's clock; it runs offset_us ahead of the host's
    async with jobs.serving(grace_ms=1_000):
        await jobs.push(Busy())
        await _wait_mark("busy")
        for n in range(40):  # due in 50 ms, while the one worker is busy
            await jobs.push(Counted(n), after_ms=50)
        clock.offset_us = 100_000  # ...and now past due, the worker still busy
        pushed = job.now_us()
        await jobs.push(Later(), after_ms=300)
        _reset(40)
        _release_busy.set()
        await _wait_mark("later")
    assert _started_at["later"][0] - pushed >= 300_000


# ------------------------------------------------------------------------------------------
# A drain while the same queue serves (other kinds): its ends are written before it returns,
# though serve's workers hand theirs to serve's group and go on.


@dataclasses.dataclass
class Retried:
    nilo_job = "retried"
    retry = job.Retry(times=3)

    async def run(self, tick: job.Tick) -> None:
        _ran.append(tick.attempts)
        if tick.attempts < 3:
            raise RuntimeError("not yet")


class EndsSeen:
    """An observer that keeps every end it is told."""

    def __init__(self) -> None:
        self.ends: list[tuple[str, str]] = []

    def pushing(self, kind: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def pushed(self, kind: str, row_id: int | None) -> None:
        return None

    def claimed(self, rows: Sequence[Claimed], now_us: int, seconds: float) -> None:
        return None

    def running(self, kind: str, tick: job.Tick) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def ended(self, kind: str, outcome: str, error: str | None, seconds: float) -> None:
        self.ends.append((kind, outcome))


async def test_a_drain_while_serving_writes_its_ends_before_it_returns(store: Store) -> None:
    _reset(1)
    jobs = job.Jobs(kinds=[Counted, Tagged], store=store, workers=1, poll_ms=60_000)
    seen = EndsSeen()
    jobs.observe(seen)
    async with jobs.serving(grace_ms=5_000, kinds=["tagged"]):
        await until_idle(jobs)
        await jobs.push(Counted(1))
        async with asyncio.timeout(10):
            assert await jobs.drain() == 1
        # Read while serve still runs: drain itself wrote the end, and told it.
        assert await jobs.stats() == (0, 0, 0)
        assert seen.ends == [("counted", "done")]
    assert _ran == [1]


_odd_ran: list[str] = []


def _named(name: str) -> type:
    """A kind called `name` whose run records that name."""

    @dataclasses.dataclass
    class Named:
        nilo_job = name
        retry = job.Retry.NONE

        async def run(self) -> None:
            _odd_ran.append(self.nilo_job)

    return Named


Quoted, Slashed, Plain = _named('mail "v2", {eu}'), _named("C:\\reports\\"), _named("mail")


async def test_serve_claims_the_kinds_it_was_given_whatever_their_names_hold(
    store: Store,
) -> None:
    # Quotes, a comma, braces and backslashes: what an array of kind names must quote.
    _odd_ran.clear()
    jobs = job.Jobs(kinds=[Quoted, Slashed, Plain], store=store, workers=2, poll_ms=60_000)
    for value in (Quoted(), Slashed(), Plain(), Quoted()):
        await jobs.push(value)  # before serve: each is found by a claim
    async with jobs.serving(grace_ms=5_000, kinds=['mail "v2", {eu}', "C:\\reports\\"]):
        await until("the three rows of the kinds served", lambda: len(_odd_ran) == 3)
    assert sorted(_odd_ran) == sorted(['mail "v2", {eu}', 'mail "v2", {eu}', "C:\\reports\\"])
    assert await store.counts() == {
        ("mail", "queued"): 1,  # not served: never claimed
        ('mail "v2", {eu}', "done"): 2,
        ("C:\\reports\\", "done"): 1,
    }


async def test_a_drain_at_while_serving_runs_every_attempt(store: Store, t: int) -> None:
    _reset(0)
    jobs = job.Jobs(kinds=[Retried, Tagged], store=store, workers=1, poll_ms=60_000)
    await jobs.push(Retried(), at=t)
    async with jobs.serving(grace_ms=5_000, kinds=["tagged"]):
        await until_idle(jobs)
        async with asyncio.timeout(10):
            assert await jobs.drain_at(t + 3_600_000_000) == 3
    assert _ran == [1, 2, 3]
    assert await jobs.stats() == (0, 0, 0)


@pytest.mark.parametrize(("workers", "said"), [(1, "1 worker"), (2, "2 workers")])
async def test_serve_says_how_many_workers_it_runs_in_english(
    workers: int, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = job.Jobs(kinds=[Counted], store=job.Memory(), workers=workers)
    with caplog.at_level("INFO", logger="nilo_job"):
        async with jobs.serving():
            pass
    assert f"serving counted with {said}" in caplog.messages
