"""Run deadlines: the timeouts of every async run of an event loop, behind one timer of that loop.

An async run is awaited within its kind's timeout. `start(timeout_s)`, called in the run's own
task, sets its deadline; `Deadline.end()`, called once the run returned or raised, takes it back.
A run still going at its deadline has its task cancelled, as `asyncio.timeout` would, and its
`end()` then answers True: the cancellation was the deadline's own (not serve's stop, nor the
run's own raise), and the caller reports the run as timed out.

The deadlines of a loop wait in a heap ordered by time, and the loop holds one timer, armed for
the earliest of them, instead of a timer and a cancel scope for every run: a run that ends
before the timer fires costs the timer nothing. A deadline that ended stays in the heap until it
comes first, or until ended ones are more than half of the heap (then the heap is rebuilt from
the live ones), so the heap holds at most about twice the runs in flight; when none is live it is
emptied, so that nothing holds a task of a loop that has closed. A timer no longer needed is left
to fire, and does nothing.
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
        self.line, self.task, self.when = line, task, when
        self.cancelling = task.cancelling()  # cancel requests made before the run began
        self.expired = False
        self.ended = False

    def end(self) -> bool:
        """Take the deadline back, once the run returned or raised; True when the deadline
        expired and cancelled the run, and no other cancellation of its task is pending (the
        run timed out). Call it exactly once."""
        self.ended = True
        self.line.ended()
        if not self.expired:
            return False
        return self.task.uncancel() <= self.cancelling


class _Line:
    """The deadlines of one event loop: a heap by time, and the time of the loop's timer."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Deadline]] = []
        self.order = itertools.count()  # ties in time keep their order
        self.live = 0
        self.timer_at: float | None = None  # when the armed timer fires; None: none is armed

    def start(self, loop: asyncio.AbstractEventLoop, timeout_s: float) -> Deadline:
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a run's deadline is set from within its task")
        deadline = Deadline(self, task, loop.time() + timeout_s)
        heapq.heappush(self.heap, (deadline.when, next(self.order), deadline))
        self.live += 1
        if self.timer_at is None or deadline.when < self.timer_at:
            self._arm(loop, deadline.when)
        return deadline

    def ended(self) -> None:
        self.live -= 1
        if self.live == 0:
            self.heap.clear()  # (the timer, left armed, fires once and finds nothing)
        elif len(self.heap) > 2 * self.live + _SLACK:
            self.heap = [entry for entry in self.heap if not entry[2].ended]
            heapq.heapify(self.heap)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self.timer_at = when
        loop.call_at(when, self._fire, loop, when)

    def _fire(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if when != self.timer_at:
            return  # an earlier timer was armed since, and took this one's place
        self.timer_at = None
        now = loop.time()
        heap = self.heap
        while heap and (heap[0][2].ended or heap[0][0] <= now):
            _, _, deadline = heapq.heappop(heap)
            if not deadline.ended and not deadline.expired:
                deadline.expired = True
                deadline.task.cancel()
        if heap:
            self._arm(loop, heap[0][0])


_lines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Line] = weakref.WeakKeyDictionary()


def start(timeout_s: float) -> Deadline:
    """Set the deadline of the run awaited in the current task: `timeout_s` seconds from now on
    the running loop's clock. Call `end()` on the answer once the run returned or raised.

    Raises:
        RuntimeError: no event loop is running, or no task is current.
    """
    loop = asyncio.get_running_loop()
    line = _lines.get(loop)
    if line is None:
        line = _lines[loop] = _Line()
    return line.start(loop, timeout_s)
