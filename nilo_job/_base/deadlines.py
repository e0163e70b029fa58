"""Deadlines: the timeouts of an event loop's bounded waits, behind one timer of that loop.

A bounded wait (an async run within its kind's timeout, a MariaDB store's call within its
`answer_ms`) sets its deadline with `start(timeout_s)`, in the waiting task, and takes it back
with `Deadline.end()` once the wait returned or raised. A wait still going at its deadline has
its task cancelled, as `asyncio.timeout` would, and its `end()` then answers True: the
cancellation was the deadline's own (not a stop, nor the wait's own raise), and the caller
reports a timeout.

The deadlines of a loop wait in a heap ordered by time, and the loop holds one timer, armed for
the earliest of them, instead of a timer and a cancel scope for every wait: a wait that ends
before the timer fires costs the timer nothing (left armed, it fires once and finds nothing). A
timer is cancelled only when one for an earlier deadline replaces it, so a loop holds one timer
of this module at a time. A deadline that ended stays in the heap until it comes first, or until
ended ones are more than half of the heap (then the heap is rebuilt from the live ones), so the
heap holds at most about twice the waits in flight, and it is emptied when none is. A deadline
holds its task weakly, so that neither an ended wait nor one on a loop that closed is kept. The
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
    """One wait's deadline (`start`): its task is cancelled at `when` (the loop's clock, s) unless
    `end()` was called first."""

    __slots__ = ("cancelling", "ended", "expired", "line", "task", "when")

    def __init__(self, line: _Line, task: asyncio.Task[object], when: float) -> None:
        self.line, self.when = line, when
        self.task = weakref.ref(task)
        self.cancelling = task.cancelling()  # cancel requests made before the wait began
        self.expired = False
        self.ended = False

    def end(self) -> bool:
        """Take the deadline back, once the wait returned or raised (in its task); True when
        the deadline expired and cancelled the task, and no other cancellation of it is pending
        (the wait timed out). Call it exactly once."""
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
            raise RuntimeError("a deadline is set from within the task it cancels")
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
    """Set the deadline of the wait in the current task: `timeout_s` seconds from now on the
    running loop's clock. Call `end()` on the answer once the wait returned or raised.

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
