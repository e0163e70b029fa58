"""Run deadlines: the timeouts of every async run of an event loop, behind one timer of that loop.

An async run is awaited within its kind's timeout. `start(timeout_s)`, called in the run's own
task, sets its deadline; `Deadline.end()`, called once the run returned or raised, takes it back.
A run still going at its deadline has its task cancelled, as `asyncio.timeout` would, and its
`end()` then answers True: the cancellation was the deadline's own (not serve's stop, nor the
run's own raise), and the caller reports the run as timed out.

The deadlines of a loop wait in a heap ordered by time, and the loop holds one timer, armed for
the earliest of them, instead of a timer and a cancel scope for every run: a run that ends
before the timer fires costs the timer nothing (left armed, it fires once and finds nothing). A
timer is cancelled only when one for an earlier deadline replaces it, so a loop holds one timer
of this module at a time. A deadline that ended stays in the heap until it comes first, or until
ended ones are more than half of the heap (then the heap is rebuilt from the live ones), so the
heap holds at most about twice the runs in flight, and it is emptied when none is. A deadline
holds its task weakly, so that neither an ended run nor one on a loop that closed is kept. The
deadlines of a closed loop, and its timer, are let go when the next loop sets its first one.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref

_SLACK = 64
"""Ended deadlines the heap may hold beyond as many as are live before it is rebuilt."""


class Deadline:
    """One run's deadline (`start`): its task is cancelled at `when` (the loop's clock, s) unless
    `end()` was called first."""

    __slots__ = ("cancelling", "ended", "expired", "line", "task", "when")

    def __init__(self, line: _Line, task: asyncio.Task[object], when: float) -> None:
        self.line, self.when = line, when
        self.task = weakref.ref(task)
        self.cancelling = task.cancelling()  # cancel requests made before the run began
        self.expired = False
        self.ended = False

    def end(self) -> bool:
        """Take the deadline back, once the run returned or raised (in the run's task); True
        when the deadline expired and cancelled the run, and no other cancellation of its task
        is pending (the run timed out). Call it exactly once."""
        self.ended = True
        self.line.ended()
        task = self.task()
        if not self.expired or task is None:
            return False
        return task.uncancel() <= self.cancelling


class _Line:
    """The deadlines of one event loop: a heap by time, and the loop's timer for the earliest."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self.heap: list[tuple[float, int, Deadline]] = []
        self.order = itertools.count()  # ties in time keep their order
        self.live = 0
        self.timer: asyncio.TimerHandle | None = None  # armed for `timer_at`, or None
        self.timer_at = 0.0

    def closed(self) -> bool:
        loop = self.loop()
        return loop is None or loop.is_closed()

    def start(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> Deadline:
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a run's deadline is set from within its task")
        deadline = Deadline(self, task, loop.time() + timeout_s)
        heapq.heappush(self.heap, (deadline.when, next(self.order), deadline))
        self.live += 1
        if self.timer is None or deadline.when < self.timer_at:
            self._arm(loop, deadline.when)
        return deadline

    def ended(self) -> None:
        self.live -= 1
        if self.live == 0:
            self.heap.clear()
        elif len(self.heap) > 2 * self.live + _SLACK:
            self.heap = [entry for entry in self.heap if not entry[2].ended]
            heapq.heapify(self.heap)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = loop.call_at(when, self._fire, loop, when)
        self.timer_at = when

    def _fire(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self.timer = None
        # (a loop may run a timer a hair early, rounding its delay: it counts as on time)
        now = max(loop.time(), when)
        heap = self.heap
        while heap and (heap[0][2].ended or heap[0][0] <= now):
            _, _, deadline = heapq.heappop(heap)
            if not deadline.ended and not deadline.expired:
                deadline.expired = True
                task = deadline.task()
                if task is not None:
                    task.cancel()
        if heap:
            self._arm(loop, heap[0][0])


_lines: dict[int, _Line] = {}
"""Each event loop's deadlines, by the loop's id (a loop that closed is dropped from here when
another sets its first deadline: its timer holds it)."""


def start(timeout_s: float) -> Deadline:
    """Set the deadline of the run awaited in the current task: `timeout_s` seconds from now on
    the running loop's clock. Call `end()` on the answer once the run returned or raised.

    Raises:
        RuntimeError: no event loop is running, or no task is current.
    """
    loop = asyncio.get_running_loop()
    line = _lines.get(id(loop))
    if line is None or line.loop() is not loop:
        for key, other in list(_lines.items()):
            if other.closed():
                other.timer, other.heap = None, []
                _lines.pop(key, None)
        line = _lines[id(loop)] = _Line(loop)
    return line.start(loop, timeout_s)
