"""nilo-job: work that runs later, again, or on a schedule, from a table in your own database.

    import nilo_job as job

A job is a dataclass with a name (`nilo_job`), a `retry` and a `run`; `job.Jobs(kinds=[...],
store=job.Table("sqlite:///app.db"))` is the queue; `await jobs.push(value)` queues a row and
`await jobs.serve()` runs them. It is at least once: a worker that dies leaves a lease that runs
out, and another worker takes the row, so write `run` to be safe to call twice.
"""

from __future__ import annotations

from ._base.clock import now_us
from ._base.errors import (
    BadPayload,
    JobError,
    LeaseLost,
    PayloadTooLarge,
    QueueFull,
    Refusal,
    StoreUnavailable,
    TimedOut,
)
from ._base.spaces import MemorySpace, RedisSpace, Space
from ._base.values import (
    Attempt,
    Dead,
    Exponential,
    Fixed,
    Flow,
    Found,
    Missed,
    Overlap,
    Retry,
    RetryIn,
    Row,
    Run,
    Snooze,
    State,
    Stats,
    Status,
    Tick,
    Where,
)
from ._kinds.schedule import Cron, Every, Schedule, cron, every
from ._queue.jobs import Jobs
from .store._table import Table
from .store.contract import Store
from .store.memory import Memory

__all__ = [
    "Attempt",
    "BadPayload",
    "Cron",
    "Dead",
    "Every",
    "Exponential",
    "Fixed",
    "Flow",
    "Found",
    "JobError",
    "Jobs",
    "LeaseLost",
    "Memory",
    "MemorySpace",
    "Missed",
    "Overlap",
    "PayloadTooLarge",
    "QueueFull",
    "RedisSpace",
    "Refusal",
    "Retry",
    "RetryIn",
    "Row",
    "Run",
    "Schedule",
    "Snooze",
    "Space",
    "State",
    "Stats",
    "Status",
    "Store",
    "StoreUnavailable",
    "Table",
    "Tick",
    "TimedOut",
    "Where",
    "cron",
    "every",
    "now_us",
]
