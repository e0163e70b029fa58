"""serve, grouped pushes and ends, and a push handed straight to an idle worker, under the
failures a real user or a real outage brings: stops past the grace, cancelled pushes, a status
Space or a store that fails, timed-out threads, and whose context a grouped write runs in.

Each test says what it expects. Every wait is bounded and waits for an event (or for a bounded
number of turns of the loop); nothing sleeps to wait for time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

import nilo_job as job
from nilo_job._worker.feed import Feed
from nilo_job.store.contract import Claimed, Died, End, NewRow, Store
from tests.helpers.serving import FailingSpace, held_at, until_idle

_ran: list[int] = []


@dataclasses.dataclass
class Quick:
    nilo_job = "quick"
    retry = job.Retry.NONE

    n: int = 0

    async def run(self) -> None:
        _ran.append(self.n)


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel serve's `task` and wait for it to end: TimeoutError after 10 s (a hang)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        async with asyncio.timeout(10):
            await task


async def _stopping(serving: asyncio.Task[None], gate: asyncio.Event) -> asyncio.Task[None]:
    """Start stopping serve's `serving`, let the stop begin (a few turns of the loop), then
    open `gate`, which held a store call in flight: the stop, to await."""
    stopping = asyncio.create_task(_stop(serving))
    for _ in range(5):
        await asyncio.sleep(0)
    gate.set()
    return stopping


# ------------------------------------------------------------------------------------------
# 1. The end of a run that has returned is written even when serve stops past its grace while
#    that end waits for a group being written: no row is left `running` by a stop.


async def test_ends_waiting_for_a_group_are_written_when_serve_stops_past_its_grace(
    store: Store,
) -> None:
    _ran.clear()
    jobs = job.Jobs(kinds=[Quick], store=store, workers=2, poll_ms=60_000)
    real = store.finish
    gate = asyncio.Event()
    writes: list[asyncio.Future[list[bool]]] = []

    store.finish = held_at(gate, real, writes)  # type: ignore[method-assign]
    await jobs.push_many([Quick(1), Quick(2)])
    serving = asyncio.create_task(jobs.serve(grace_ms=0))
    async with asyncio.timeout(10):
        # Both runs have returned and their ends are being written.
        while not (writes and len(_ran) == 2):  # noqa: ASYNC110 (turns of the loop, bounded)
            await asyncio.sleep(0)
    assert sorted(_ran) == [1, 2]
    # grace 0: `nilo-job worker --grace-ms 0`, or a second SIGTERM
    stopping = await _stopping(serving, gate)
    async with asyncio.timeout(10):
        await stopping
        await asyncio.gather(*writes)
    # Both runs returned before the stop: both ends should be written, no row left running.
    assert await jobs.stats() == (0, 0, 0)


# ------------------------------------------------------------------------------------------
# 2. A push that claimed its row for an idle worker and whose caller is cancelled after the
#    INSERT reached the database still hands its row over (or gives it back): never `running`,
#    unrun, for a whole lease.


async def test_a_cancelled_push_whose_claimed_row_committed_leaves_no_row_running(
    store: Store,
) -> None:
    _ran.clear()
    jobs = job.Jobs(kinds=[Quick], store=store, workers=1, poll_ms=60_000)
    real = store.push
    gate = asyncio.Event()
    writes: list[asyncio.Future[list[int | None]]] = []

    store.push = held_at(gate, real, writes)  # type: ignore[method-assign]
    async with jobs.serving(grace_ms=5_000):
        await until_idle(jobs)
        pushing = asyncio.create_task(jobs.push(Quick(1)))  # a web request's push, say
        async with asyncio.timeout(10):
            while not writes:  # noqa: ASYNC110 (turns of the loop, bounded)
                await asyncio.sleep(0)
        pushing.cancel()  # the request is cancelled (client gone, a timeout around it)
        gate.set()
        async with asyncio.timeout(10):
            (row_id,) = await writes[0]  # the row is committed
            with pytest.raises(asyncio.CancelledError):
                await pushing
        assert row_id is not None
    # serve stopped cleanly: the row should have run or be queued, not held for its lease.
    stats = await jobs.stats()
    assert stats.running == 0, f"row {row_id} left running, unrun ({_ran=})"


async def test_sqlite_a_push_cancelled_mid_insert_leaves_its_row_running(
    table: Store, tmp_path: Path
) -> None:
    # The same on a plain SQLite table with no wrapper: the INSERT runs in the store's thread,
    # which a cancel of the caller does not stop. The cancel lands once the row is committed
    # and before the push has its answer, as a cancel during a slow commit does.
    _ran.clear()
    jobs = job.Jobs(kinds=[Quick], store=table, workers=1, poll_ms=60_000)
    async with jobs.serving(grace_ms=5_000):
        await until_idle(jobs)
        pushing = asyncio.create_task(jobs.push(Quick(1)))
        with contextlib.closing(sqlite3.connect(tmp_path / "q.db")) as look, look:
            async with asyncio.timeout(10):
                while not look.execute("SELECT count(*) FROM nilo_jobs").fetchone()[0]:  # noqa: ASYNC110 (turns of the loop, bounded)
                    await asyncio.sleep(0)
        pushing.cancel()
        async with asyncio.timeout(10):
            with pytest.raises(asyncio.CancelledError):
                await pushing
    stats = await jobs.stats()
    assert stats.running == 0, f"{stats}: the pushed row is left running, unrun ({_ran=})"


# ------------------------------------------------------------------------------------------
# 3. When the status Space fails as a push inserts its row claimed for an idle worker, the push
#    still succeeds, the row runs, and the claim loop goes on claiming (rows of other processes
#    are run at the next poll).


async def test_a_status_failure_after_a_claimed_push_does_not_stall_serve(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ran.clear()
    space = FailingSpace()
    jobs = job.Jobs(kinds=[Quick], store=store, workers=1, poll_ms=20, status=space)
    real = store.push
    gate = asyncio.Event()

    async def held(rows: Sequence[NewRow]) -> list[int | None]:
        await gate.wait()
        return await real(rows)

    store.push = held  # type: ignore[method-assign]
    turns = 0
    turned = asyncio.Event()
    wanted = Feed.wanted

    def counting(feed: Feed, pace_s: float | None, workers: int) -> int:  # once a pass
        nonlocal turns
        turns += 1
        turned.set()
        return wanted(feed, pace_s, workers)

    monkeypatch.setattr(Feed, "wanted", counting)
    async with jobs.serving(grace_ms=5_000):
        await until_idle(jobs)
        space.armed = True  # the push's own status write fails
        pushing = asyncio.create_task(jobs.push(Quick(1)))
        async with asyncio.timeout(10):
            while jobs._parts.wakeups.feed is None or jobs._parts.wakeups.feed.promised == 0:  # noqa: ASYNC110 (turns of the loop, bounded)
                await asyncio.sleep(0)
            # The claim loop's poll ends while the push is in flight: it sees no free worker
            # (the idle one is promised) and waits for a wake-up, with no timeout.
            seen = turns
            while turns == seen:
                turned.clear()
                await turned.wait()
        gate.set()
        async with asyncio.timeout(10):
            assert isinstance(await pushing, int)  # a status that fails fails no push
        store.push = real  # type: ignore[method-assign]
        # Another process (its own Jobs, not serving) queues a row. poll_ms is 20.
        other = job.Jobs(kinds=[Quick], store=store)
        await other.push(Quick(2))
        try:
            async with asyncio.timeout(5):
                while 2 not in _ran:
                    turned.clear()
                    await turned.wait()
        except TimeoutError:
            pytest.fail(f"serve claimed nothing for 5 s with poll_ms=20 ({_ran=})")
    assert (await jobs.stats()).running == 0  # and the first row is not held for its lease


# ------------------------------------------------------------------------------------------
# 4. A timed-out sync run keeps its worker until its thread returns, even when writing its end
#    fails: never more than `workers` things at once.

_stuck_alive = threading.Event()
_let_go = threading.Event()
_probe_saw: list[bool] = []


@dataclasses.dataclass
class Stuck:
    nilo_job = "stuck"
    retry = job.Retry.NONE
    timeout_ms = 50

    def run(self) -> None:
        _stuck_alive.set()
        try:
            _let_go.wait(10)
        finally:
            _stuck_alive.clear()


@dataclasses.dataclass
class Probe:
    nilo_job = "probe"
    retry = job.Retry.NONE

    async def run(self) -> None:
        _probe_saw.append(_stuck_alive.is_set())


class FailsOnDied:
    """Wraps a store's finish: an end that kills a row fails with an error of the store's own
    (not StoreUnavailable), once."""

    def __init__(self, store: Store) -> None:
        self.finish = store.finish
        self.failed = asyncio.Event()
        store.finish = self  # type: ignore[method-assign]

    async def __call__(self, ends: Sequence[End]) -> list[bool]:
        if not self.failed.is_set() and any(isinstance(end, Died) for end in ends):
            self.failed.set()
            raise RuntimeError("a bug in a store of your own")
        return await self.finish(ends)


async def test_a_timed_out_thread_keeps_its_worker_when_recording_its_end_fails(
    store: Store,
) -> None:
    _stuck_alive.clear()
    _let_go.clear()
    _probe_saw.clear()
    space = FailsOnDied(store)
    jobs = job.Jobs(kinds=[Stuck, Probe], store=store, workers=1, poll_ms=20)
    await jobs.push(Stuck())
    await jobs.push(Probe(), after_ms=0)
    try:
        async with jobs.serving(grace_ms=0):
            async with asyncio.timeout(10):
                await space.failed.wait()  # Stuck timed out; writing its end fails
            free = False
            for _ in range(200):  # a bounded number of turns of the loop
                feed = jobs._parts.wakeups.feed
                if _probe_saw or (feed is not None and feed.idle):
                    free = True
                    break
                await asyncio.sleep(0)
            assert _stuck_alive.is_set()
            # With workers=1 the one worker stays taken while Stuck's thread still runs, so
            # nothing else (Probe, waiting) may start.
            assert not free, f"the worker took the next row beside the thread ({_probe_saw=})"
    finally:
        _let_go.set()


# ------------------------------------------------------------------------------------------
# 5. A stop past the grace while a row's task writes its "running" status (a slow Redis) gives
#    the row back queued.


class SlowRunningPut(job.MemorySpace):
    def __init__(self) -> None:
        super().__init__(ttl_s=60)
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def put(self, key: str, value: bytes) -> None:
        if msgspec.json.decode(value)["state"] == "running":
            self.entered.set()
            await self.gate.wait()
        await super().put(key, value)


async def test_a_stop_while_a_row_writes_its_running_status_gives_the_row_back(
    store: Store,
) -> None:
    _ran.clear()
    space = SlowRunningPut()
    jobs = job.Jobs(kinds=[Quick], store=store, workers=1, poll_ms=60_000, status=space)
    await jobs.push(Quick(1))
    serving = asyncio.create_task(jobs.serve(grace_ms=0))
    async with asyncio.timeout(10):
        await space.entered.wait()
    await _stop(serving)
    assert _ran == []
    assert await jobs.stats() == (1, 0, 0)  # queued again, unrun


# ------------------------------------------------------------------------------------------
# 6. A group of pushes is written in a context of its own, never in the first push's: push B's
#    INSERT is not done under push A's span or A's request contextvars.

_request: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="no request")


class Spans:
    """An observer whose `pushing` makes a span current (here: a contextvar)."""

    @contextlib.contextmanager
    def pushing(self, kind: str) -> Iterator[None]:
        token = _request.set(f"span of {_request.get()}")
        try:
            yield
        finally:
            _request.reset(token)

    def pushed(self, kind: str, row_id: int | None) -> None:
        return None

    def claimed(self, rows: object, now_us: int, seconds: float) -> None:
        return None

    def running(self, kind: str, tick: object) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def ended(self, kind: str, outcome: str, error: str | None, seconds: float) -> None:
        return None


async def test_a_grouped_push_is_written_in_no_other_pushs_context(store: Store) -> None:
    jobs = job.Jobs(kinds=[Quick], store=store)
    jobs.observe(Spans())
    real = store.push
    seen: list[tuple[list[bytes], str]] = []

    async def recording(rows: Sequence[NewRow]) -> list[int | None]:
        seen.append(([row.payload for row in rows], _request.get()))
        await asyncio.sleep(0)
        return await real(rows)

    store.push = recording  # type: ignore[method-assign]

    async def request(name: str, n: int) -> None:
        _request.set(name)
        await jobs.push(Quick(n))

    async with asyncio.timeout(10):
        await asyncio.gather(request("request A", 1), request("request B", 2))
    # B's row went in the group after A's: whatever context it is written in, it is not A's.
    (b_write,) = [ctx for payloads, ctx in seen if b'{"n":2}' in payloads]
    assert "request A" not in b_write, f"push B's write ran in {b_write!r}"


class Ends:
    """An observer that records `ended`."""

    def __init__(self) -> None:
        self.ended_calls: list[tuple[str, str]] = []

    def pushing(self, kind: str) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def pushed(self, kind: str, row_id: int | None) -> None:
        return None

    def claimed(self, rows: object, now_us: int, seconds: float) -> None:
        return None

    def running(self, kind: str, tick: object) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def ended(self, kind: str, outcome: str, error: str | None, seconds: float) -> None:
        self.ended_calls.append((kind, outcome))


# ------------------------------------------------------------------------------------------
# 7. A push that hands its row straight to an idle worker writes the row's "queued" status
#    before the hand-over, so a slow status write never lands after the run's "done".


class QueuedIsSlow(job.MemorySpace):
    """The "queued" write takes a few turns of the loop (a Redis pool, one slow connection),
    in which a run handed over too early would write "running" and "done" first."""

    def __init__(self) -> None:
        super().__init__(ttl_s=60)
        self.done = asyncio.Event()

    async def put(self, key: str, value: bytes) -> None:
        state = msgspec.json.decode(value)["state"]
        if state == "queued":
            for _ in range(50):
                await asyncio.sleep(0)
        await super().put(key, value)
        if state == "done":
            self.done.set()


async def test_a_claimed_pushs_queued_status_never_lands_after_its_run_ended(
    store: Store,
) -> None:
    _ran.clear()
    space = QueuedIsSlow()
    jobs = job.Jobs(kinds=[Quick], store=store, workers=1, poll_ms=60_000, status=space)
    async with jobs.serving(grace_ms=5_000):
        await until_idle(jobs)
        async with asyncio.timeout(10):
            row_id = await jobs.push(Quick(1))  # claimed for the idle worker
            await space.done.wait()
    assert _ran == [1]
    status = await jobs.status(row_id)
    assert status is not None
    assert status.state == job.State.DONE, f"a finished row reads {status.state}"


# ------------------------------------------------------------------------------------------
# 8. An end written after its row's task was cancelled (a stop past the grace) still reaches
#    the observers and the status Space: serve's stop waits for that bookkeeping too.


async def test_an_end_written_past_the_grace_reaches_observers_and_status(
    store: Store,
) -> None:
    _ran.clear()
    space = job.MemorySpace(ttl_s=60)
    jobs = job.Jobs(kinds=[Quick], store=store, workers=2, poll_ms=60_000, status=space)
    seen = Ends()
    jobs.observe(seen)
    real = store.finish
    gate = asyncio.Event()
    writes: list[asyncio.Future[list[bool]]] = []
    held = held_at(gate, real, writes)

    async def finish(ends: Sequence[End]) -> list[bool]:
        # Only the ends are held (a claim cancelled by the stop gives back [] through finish).
        return await (held(ends) if ends else real(ends))

    store.finish = finish  # type: ignore[method-assign]
    ids = await jobs.push_many([Quick(1), Quick(2)])
    serving = asyncio.create_task(jobs.serve(grace_ms=0))
    async with asyncio.timeout(10):
        while not (writes and len(_ran) == 2):  # noqa: ASYNC110 (turns of the loop, bounded)
            await asyncio.sleep(0)
    feed = jobs._parts.wakeups.feed
    assert feed is not None
    stopping = asyncio.create_task(_stop(serving))
    async with asyncio.timeout(10):
        # Past the grace: the rows' tasks (waiting on the held write) are cancelled.
        while feed.tasks:  # noqa: ASYNC110 (turns of the loop, bounded)
            await asyncio.sleep(0)
    gate.set()
    async with asyncio.timeout(10):
        await stopping
        await asyncio.gather(*writes)
    assert await jobs.stats() == (0, 0, 0)  # both ends were written (fix 1 holds)
    states = [(await jobs.status(row_id)) for row_id in ids]
    assert [s.state if s else None for s in states] == [job.State.DONE] * 2, states
    assert sorted(seen.ended_calls) == [("quick", "done")] * 2


# ------------------------------------------------------------------------------------------
# 9. A push claimed for an idle worker and cancelled while its row still waits for a group
#    (nothing sent) writes nothing, like any push cancelled then.


async def test_a_claimed_push_cancelled_before_its_group_was_sent_writes_nothing(
    store: Store,
) -> None:
    _ran.clear()
    jobs = job.Jobs(kinds=[Quick], store=store, workers=1, poll_ms=60_000)
    real = store.push
    gate = asyncio.Event()
    writes: list[asyncio.Future[list[int | None]]] = []
    store.push = held_at(gate, real, writes)  # type: ignore[method-assign]
    async with jobs.serving(grace_ms=5_000):
        await until_idle(jobs)
        # A: due later, so not claimed; it is the write in flight.
        first = asyncio.create_task(jobs.push(Quick(1), after_ms=600_000))
        async with asyncio.timeout(10):
            while not writes:  # noqa: ASYNC110 (turns of the loop, bounded)
                await asyncio.sleep(0)
        # B: due now, a worker idle: claimed; it waits for A's write to go in the next group.
        second = asyncio.create_task(jobs.push(Quick(2)))
        for _ in range(5):
            await asyncio.sleep(0)
        assert jobs._producer.grouped.pending, "B should wait in the group"
        second.cancel()  # B's caller gives up before B's group is sent
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(10):
                await second
        gate.set()
        async with asyncio.timeout(10):
            await first
            await jobs._producer.grouped.idle()
            await asyncio.gather(*writes)
    assert len(writes) == 1, "B's row was written although B was cancelled before its group went"
    assert 2 not in _ran


# ------------------------------------------------------------------------------------------
# 10. More of the same kind: a prompt stop while every end fails, a claimed push cancelled as
#     serve stops, drain's ends written in the caller's task, pushes grouping again on a loop
#     after the sync face used another.


def _down_for_done_ends(store: Store, down: Callable[[], bool] = lambda: True) -> asyncio.Event:
    """Make `store` unreachable for every group of ends with a done row in it while `down()`
    (other ends are written); the event is set at the first such try."""
    real = store.finish
    tried = asyncio.Event()

    async def failing(ends: Sequence[End]) -> list[bool]:
        if down() and any(end.__class__.__name__ == "Done" for end in ends):
            tried.set()
            raise job.StoreUnavailable("down")
        return await real(ends)

    store.finish = failing  # type: ignore[method-assign]
    return tried


async def _serving_down_for_ends(
    store: Store, grace_ms: int
) -> tuple[job.Jobs, asyncio.Task[None]]:
    """One row pushed and served with `grace_ms` while `store` is down for its end: the queue
    and serve's task, once the end has been tried."""
    _ran.clear()
    jobs = job.Jobs(kinds=[Quick], store=store, workers=1, poll_ms=60_000)
    tried = _down_for_done_ends(store)
    await jobs.push(Quick(1))
    serving = asyncio.create_task(jobs.serve(grace_ms=grace_ms))
    async with asyncio.timeout(10):
        await tried.wait()
    return jobs, serving


async def test_stop_is_prompt_when_the_store_fails_every_end(store: Store) -> None:
    """idle() waits on the batcher's one try, not on _write_end's retries (those live in the
    cancelled row tasks): a down store does not hang a stop past its grace."""
    jobs, serving = await _serving_down_for_ends(store, grace_ms=0)
    await _stop(serving)  # bounded at 10 s inside
    assert (await jobs.stats()).running == 1  # left to its lease (at least once)


async def test_an_end_tried_again_through_an_outage_keeps_no_push_waiting(store: Store) -> None:
    """The group could not write an end (the store was down for ends): it is tried again in a
    task of its own, which a push does not wait for; once the store is back, the end is
    written, and serve's stop waits for it within its grace."""
    _ran.clear()
    jobs = job.Jobs(kinds=[Quick], store=store, workers=1, poll_ms=60_000)
    down = {"ends": True}
    tried = _down_for_done_ends(store, lambda: down["ends"])
    await jobs.push(Quick(1))
    async with jobs.serving(grace_ms=10_000):
        async with asyncio.timeout(10):
            await tried.wait()
            await until_idle(jobs)
        async with asyncio.timeout(5):  # the end's retries go on until the store is back
            assert await jobs.push(Quick(2)) is not None
            while len(_ran) < 2:  # noqa: ASYNC110 (turns of the loop, bounded)
                await asyncio.sleep(0)
        down["ends"] = False
    assert sorted(_ran) == [1, 2]
    assert await jobs.stats() == (0, 0, 0)


async def test_a_second_cancel_ends_the_wait_for_an_end_tried_again_and_leaves_no_task(
    store: Store,
) -> None:
    """serve stops with an end being tried again through an outage: it waits within its grace,
    a second cancel ends that wait at once, and nothing of serve's goes on after it returned
    (the row is left to its lease)."""
    jobs, serving = await _serving_down_for_ends(store, grace_ms=60_000)
    serving.cancel()
    for _ in range(20):  # serve is waiting within its grace now
        await asyncio.sleep(0)
    assert not serving.done()
    await _stop(serving)  # a second cancel: TimeoutError if it hangs
    ends = jobs._runner.ends
    assert [task for task in ends.background if not task.done()] == []
    assert (await jobs.stats()).running == 1


async def test_a_stop_while_a_claim_is_answered_gives_its_rows_back_unrun(store: Store) -> None:
    """The store has claimed the row, and its answer is on the way when serve is told to stop:
    the row goes back to the table as it arrives, unrun, with an idle worker right there."""
    _ran.clear()
    jobs = job.Jobs(kinds=[Quick], store=store, workers=1, poll_ms=60_000)
    await jobs.push(Quick(1))
    real = store.claim
    gate = asyncio.Event()
    answers: list[asyncio.Future[list[Claimed]]] = []

    async def claim(*args: Any, **kwargs: Any) -> list[Claimed]:
        async def answer() -> list[Claimed]:
            rows = await real(*args, **kwargs)  # claimed in the store…
            await gate.wait()  # …and the answer is on its way
            return rows

        inner = asyncio.ensure_future(answer())
        answers.append(inner)
        return await asyncio.shield(inner)

    store.claim = claim  # type: ignore[method-assign]
    serving = asyncio.create_task(jobs.serve(grace_ms=5_000))
    async with asyncio.timeout(10):
        while not answers or (await jobs.stats()).running != 1:  # noqa: ASYNC110 (bounded)
            await asyncio.sleep(0)
    stopping = await _stopping(serving, gate)
    async with asyncio.timeout(10):
        await stopping
    assert _ran == []
    assert await jobs.stats() == (1, 0, 0)


@dataclasses.dataclass
class Sleepy:
    nilo_job = "sleepy"
    retry = job.Retry.NONE

    n: int = 0

    async def run(self) -> None:
        _ran.append(self.n)
        try:
            await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            _cancelled.append(self.n)
            raise


_cancelled: list[int] = []


async def test_the_grace_counts_from_the_stop_while_a_claim_has_no_answer_yet(
    store: Store,
) -> None:
    """A row runs past the grace while a claim is still waiting for its answer (a database
    that does not answer): the row is cancelled when the grace ends, not once the claim is
    answered; when the answer comes, its row goes back unrun, and so does the cancelled one."""
    _ran.clear()
    _cancelled.clear()
    jobs = job.Jobs(kinds=[Quick, Sleepy], store=store, workers=2, poll_ms=60_000)
    pusher = job.Jobs(kinds=[Quick, Sleepy], store=store)
    await jobs.push(Sleepy(1))
    real = store.claim
    gate = asyncio.Event()
    held: list[asyncio.Future[list[Claimed]]] = []
    holding = False

    async def claim(*args: Any, **kwargs: Any) -> list[Claimed]:
        if not holding:  # the claims that find Sleepy(1), or nothing, are answered at once
            return await real(*args, **kwargs)

        async def answer() -> list[Claimed]:
            rows = await real(*args, **kwargs)
            await gate.wait()
            return rows

        inner = asyncio.ensure_future(answer())
        held.append(inner)
        return await asyncio.shield(inner)

    store.claim = claim  # type: ignore[method-assign]
    serving = asyncio.create_task(jobs.serve(grace_ms=200))
    async with asyncio.timeout(10):
        while _ran != [1]:  # noqa: ASYNC110 (bounded)
            await asyncio.sleep(0)
    holding = True
    await pusher.push(Quick(2))
    jobs.wake()
    async with asyncio.timeout(10):
        while not held or (await jobs.stats()).running != 2:  # noqa: ASYNC110 (bounded)
            await asyncio.sleep(0)
    serving.cancel()
    async with asyncio.timeout(5):
        while _cancelled != [1]:  # noqa: ASYNC110 (bounded)
            await asyncio.sleep(0.01)
    assert not gate.is_set()  # the claim still has no answer
    assert not serving.done()
    gate.set()
    with contextlib.suppress(asyncio.CancelledError):
        async with asyncio.timeout(10):
            await serving
    assert _ran == [1]
    assert await jobs.stats() == (2, 0, 0)  # both back in the queue, unrun


async def test_a_claimed_push_cancelled_as_serve_stops_is_given_back(store: Store) -> None:
    _ran.clear()
    jobs = job.Jobs(kinds=[Quick], store=store, workers=1, poll_ms=60_000)
    real = store.push
    gate = asyncio.Event()
    writes: list[asyncio.Future[list[int | None]]] = []
    store.push = held_at(gate, real, writes)  # type: ignore[method-assign]
    serving = asyncio.create_task(jobs.serve(grace_ms=5_000))
    await until_idle(jobs)
    pushing = asyncio.create_task(jobs.push(Quick(1)))
    async with asyncio.timeout(10):
        while not writes:  # noqa: ASYNC110 (turns of the loop, bounded)
            await asyncio.sleep(0)
    await _stop(serving)
    pushing.cancel()
    gate.set()
    async with asyncio.timeout(10):
        with pytest.raises(asyncio.CancelledError):
            await pushing
        await writes[0]
        # The hand-over runs as the write's done-callback, then a task gives the row back.
        while (await jobs.stats()).running:  # noqa: ASYNC110 (turns of the loop, bounded)
            await asyncio.sleep(0)
    assert _ran == []
    assert await jobs.stats() == (1, 0, 0)


async def test_drain_writes_ends_with_no_batcher_in_the_callers_task(store: Store) -> None:
    _ran.clear()
    jobs = job.Jobs(kinds=[Quick], store=store)
    seen = Ends()
    jobs.observe(seen)
    real = store.finish
    where: list[asyncio.Task[object] | None] = []

    async def finish(ends: Sequence[End]) -> list[bool]:
        where.append(asyncio.current_task())
        return await real(ends)

    store.finish = finish  # type: ignore[method-assign]
    await jobs.push_many([Quick(1), Quick(2)])
    async with asyncio.timeout(10):
        assert await jobs.drain() == 2
    assert where == [asyncio.current_task()] * 2
    assert seen.ended_calls == [("quick", "done")] * 2


async def test_pushes_group_again_on_a_loop_after_the_sync_face_used_another(
    tmp_path: object,
) -> None:
    # Memory only: a PostgreSQL Table's pool belongs to the loop it was opened on.
    store = job.Memory(bytes=1 << 20)
    jobs = job.Jobs(kinds=[Quick], store=store)
    # The bridge's loop, in its thread (this test's loop is not serving).
    first = await asyncio.to_thread(jobs.sync.push, Quick(0))
    assert isinstance(first, int)
    assert not jobs._producer.grouped.busy
    calls: list[int] = []
    real = store.push

    async def counting(rows: Sequence[NewRow]) -> list[int | None]:
        calls.append(len(rows))
        await asyncio.sleep(0)
        return await real(rows)

    store.push = counting  # type: ignore[method-assign]
    async with asyncio.timeout(10):
        ids = await asyncio.gather(*(jobs.push(Quick(n)) for n in range(10)))
    assert None not in ids
    assert len(calls) < 10


class SwallowsACancel(job.Memory):
    """A store whose read of the paused kinds, once armed, waits and then swallows the cancel it
    gets, returning as if the read had finished: what `asyncio.wait_for` does on Python 3.11
    (psycopg_pool waits for a connection with it) when a cancel arrives as the wait ends."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.reading = asyncio.Event()
        self.swallowed = 0

    async def paused(self) -> dict[str, int]:
        if not self.armed:
            return await super().paused()
        self.armed = False
        self.reading.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.swallowed += 1
        return await super().paused()


async def test_serve_stops_even_when_a_library_swallows_a_cancel() -> None:
    store = SwallowsACancel()
    jobs = job.Jobs(kinds=[Quick], store=store, poll_ms=10)
    async with asyncio.timeout(10):  # before the fix, leaving the block waited forever
        async with jobs.serving(grace_ms=100):
            store.armed = True
            await store.reading.wait()  # serve's reader of the paused kinds is in the read
    assert store.swallowed == 1
    # serve has wholly stopped: no task of it is left running.
    assert {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} == set()


class CancelsOnTheServer(job.Memory):
    """A store whose watch, when cancelled, first has the server cancel its statement in
    flight (a moment's round trip), as psycopg does; a second cancel meanwhile interrupts
    that, and psycopg then closes the connection with a WARNING."""

    def __init__(self) -> None:
        super().__init__()
        self.watching = asyncio.Event()
        self.cancelled_on_server = 0
        self.interrupted = 0

    async def watch(self, wake: Callable[[int | None], None]) -> None:
        self.watching.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            try:
                await asyncio.sleep(0.2)  # the server's answer to the cancel request
                self.cancelled_on_server += 1
            except asyncio.CancelledError:
                self.interrupted += 1
            raise


async def test_serve_cancels_a_helper_once_while_its_statement_is_cancelled() -> None:
    store = CancelsOnTheServer()
    jobs = job.Jobs(kinds=[Quick], store=store, poll_ms=10)
    async with asyncio.timeout(10):
        async with jobs.serving(grace_ms=100):
            await store.watching.wait()
    assert (store.cancelled_on_server, store.interrupted) == (1, 0)


async def test_an_outage_of_claims_is_told_in_three_lines(
    store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims that fail are logged once as they begin, once more when they have failed for
    longer than the lease (with what this process holds: nothing here), and once at INFO when
    a claim is answered again; each failure between is DEBUG, and serve goes on by itself."""
    failing = True
    claim = store.claim

    async def claim_or_fail(*args: Any, **kwargs: Any) -> list[Claimed]:
        if failing:
            raise job.StoreUnavailable("the database is away (a test's)")
        return await claim(*args, **kwargs)

    monkeypatch.setattr(store, "claim", claim_or_fail)
    jobs = job.Jobs(kinds=[Quick], store=store, poll_ms=20, timeout_ms=1)  # a lease of 1,001 ms
    caplog.set_level(logging.DEBUG, logger="nilo_job")

    def said(text: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "nilo_job" and text in r.getMessage()]

    async def until_said(text: str) -> None:
        async with asyncio.timeout(10):
            while not said(text):  # noqa: ASYNC110 (bounded)
                await asyncio.sleep(0.01)

    _ran.clear()
    async with jobs.serving(grace_ms=1_000):
        await until_said("longer than the lease")
        failing = False
        await jobs.push(Quick(7))
        await until_said("claiming again")
        async with asyncio.timeout(10):
            while _ran != [7]:  # noqa: ASYNC110 (bounded)
                await asyncio.sleep(0.01)
    lines = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "nilo_job" and r.levelno >= logging.INFO and "laim" in r.getMessage()
    ]
    assert lines[0] == (
        "WARNING",
        "claiming failed with StoreUnavailable: the database is away (a test's); asking again "
        "every 0.02 s until it is answered",
    )
    assert lines[1][0] == "WARNING"
    assert lines[1][1].startswith("no claim has been answered for ")
    assert lines[1][1].endswith(", longer than the lease (1001 ms): this process holds no row")
    assert lines[2][0] == "INFO"
    assert lines[2][1].startswith("claiming again: the store answered after ")
    assert len(lines) == 3, lines
    assert len(said("claiming failed again with StoreUnavailable")) >= 10
