"""Run deadlines (one timer of the event loop for every async run's timeout): each run is cut at
its own deadline whatever the others' are, a cut that serve's stop also asked for stays a stop,
and nothing of an ended run or a closed loop is kept. The timeouts here are tens of milliseconds
of the loop's real clock, the thing under test; the queue's own timeout tests run on every
store (test_retries)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import weakref

from nilo_job._base import deadlines


async def _run(timeout_s: float, waits_s: float) -> tuple[bool, bool, float]:
    """A run of `waits_s` under a deadline of `timeout_s`: whether it was cut, whether `end()`
    said it timed out, and when it ended (the loop's clock)."""
    deadline = deadlines.start(timeout_s)
    try:
        await asyncio.sleep(waits_s)
    except asyncio.CancelledError:
        return True, deadline.end(), asyncio.get_running_loop().time()
    return False, deadline.end(), asyncio.get_running_loop().time()


async def test_each_run_is_cut_at_its_own_deadline_whatever_the_others_are() -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    # The long deadline is set first: the short one, set after, must still fire on time.
    long = asyncio.create_task(_run(30.0, 0.2))
    await asyncio.sleep(0)
    short = asyncio.create_task(_run(0.02, 30.0))
    shorter = asyncio.create_task(_run(0.01, 30.0))
    assert (await shorter)[:2] == (True, True)
    cut, timed_out, ended = await short
    assert (cut, timed_out) == (True, True)
    assert 0.02 <= ended - began < 0.2  # at its deadline, not at the long run's end
    assert (await long)[:2] == (False, False)  # ran its 0.2 s to the end, never cut


async def test_a_run_that_ended_in_time_leaves_no_cut_for_the_next_run() -> None:
    # The first run's deadline ends at once; its timer stays armed and fires at 10 ms, while
    # the second run (a deadline of 30 s) is waiting: that run must not be cut.
    assert (await _run(0.01, 0))[:2] == (False, False)
    cut, timed_out, _ = await _run(30.0, 0.05)
    assert (cut, timed_out) == (False, False)


async def test_a_deadline_that_passes_as_the_task_is_stopped_is_a_stop_not_a_timeout() -> None:
    loop = asyncio.get_running_loop()
    seen: list[tuple[bool, bool]] = []

    async def run() -> None:
        deadline = deadlines.start(0.01)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append((deadline.expired, deadline.end()))
            raise

    task = asyncio.create_task(run())
    await asyncio.sleep(0)
    # serve's stop lands in the same turn of the loop as the deadline, right after it.
    loop.call_at(loop.time() + 0.01, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert seen == [(True, False)]  # cut by both: end() says not a timeout, the stop goes on
    assert task.cancelled()


async def test_a_run_that_swallows_its_cut_and_returns_leaves_its_task_as_it_was() -> None:
    async def run() -> tuple[bool, int]:
        deadline = deadlines.start(0.01)
        # A run that catches the cancellation and returns all the same.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)
        task = asyncio.current_task()
        assert task is not None
        return deadline.end(), task.cancelling()

    assert await asyncio.create_task(run()) == (True, 0)  # no cancel request left pending


async def test_the_heap_of_one_loop_holds_about_twice_the_runs_in_flight() -> None:
    # One long run stays in flight while 10,000 short ones start and end behind it.
    long = deadlines.start(30.0)
    line = deadlines._lines[id(asyncio.get_running_loop())]
    for _ in range(10_000):
        deadlines.start(30.0).end()
        assert len(line.heap) <= 2 * line.live + deadlines._SLACK + 1
    assert long.end() is False
    assert line.heap == []  # none live: nothing of the runs is kept


def test_each_event_loop_cuts_its_own_runs() -> None:
    outcomes: dict[str, tuple[bool, bool]] = {}

    def in_thread(name: str, timeout_s: float, waits_s: float) -> None:
        outcomes[name] = asyncio.run(_run(timeout_s, waits_s))[:2]

    threads = [
        threading.Thread(target=in_thread, args=("cut", 0.02, 30.0)),
        threading.Thread(target=in_thread, args=("done", 30.0, 0.05)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert outcomes == {"cut": (True, True), "done": (False, False)}


async def test_a_loop_holds_one_timer_of_the_deadlines_whatever_the_timeouts() -> None:
    # Ten-year deadlines and 5-ms ones in turn, each run returning at once: every short one
    # takes the timer's place, and the long one's timer goes (a timer left for each long one
    # would stay in the loop for ten years).
    loop = asyncio.get_running_loop()
    for _ in range(200):
        assert (await _run(315_360_000.0, 0))[:2] == (False, False)
        assert (await _run(0.005, 0))[:2] == (False, False)
    line = deadlines._lines[id(loop)]
    scheduled = loop._scheduled  # type: ignore[attr-defined]
    ours = [h for h in scheduled if not h.cancelled() and h._callback == line._fire]
    assert len(ours) == 1


async def test_an_ended_run_s_task_is_not_kept() -> None:
    long = deadlines.start(30.0)  # in flight all along: the ended ones stay in the heap
    ended: list[weakref.ref[asyncio.Task[object]]] = []
    for _ in range(10):
        task = asyncio.create_task(_run(30.0, 0))
        await task
        ended.append(weakref.ref(task))
        del task
    await asyncio.sleep(0)  # (the loop lets go of the last one's callbacks)
    gc.collect()
    assert [ref() for ref in ended] == [None] * 10
    assert long.end() is False


def test_a_closed_loop_is_let_go_once_another_loop_sets_a_deadline() -> None:
    gone = []
    for in_flight in (False, True):
        loop = asyncio.new_event_loop()
        loop.run_until_complete(_run(30.0, 0))  # its timer, left armed
        if in_flight:  # and a run still waiting when the loop closes
            loop.run_until_complete(asyncio.sleep(0))
            hung = loop.create_task(_run(30.0, 3600.0))
            loop.run_until_complete(asyncio.sleep(0.001))
            del hung
        loop.close()
        gone.append(weakref.ref(loop))
        del loop
    asyncio.run(_run(30.0, 0))  # another loop's first deadline
    gc.collect()
    assert [ref() for ref in gone] == [None, None]
