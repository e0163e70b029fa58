"""The values users read and write: retry policy, tick, stats, status, dead rows, states.

All are frozen, slotted dataclasses; states are enums. Times are microseconds since the epoch
(`run_at`, `died_at`) and durations are milliseconds (`ms`, `from_ms`, `to_ms`), as the names say.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from ._errors import Refusal


def _check_ms(owner: str, name: str, value: object, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Refusal(f"{owner}({name}=...) takes whole milliseconds as an int, not {value!r}")
    if value < (1 if positive else 0):
        bound = "greater than 0" if positive else "0 or more"
        raise Refusal(f"{owner}({name}={value}) must be {bound} milliseconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class Fixed:
    """The same wait, `ms` milliseconds, before every retry."""

    ms: int

    def __post_init__(self) -> None:
        _check_ms("Fixed", "ms", self.ms, positive=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Exponential:
    """A wait of `from_ms` after the first failure, doubling after each, never past `to_ms`.

    `Exponential(from_ms=1_000, to_ms=3_600_000)` is 1 s, 2 s, 4 s, … and never past an hour.
    Both in milliseconds.
    """

    from_ms: int
    to_ms: int

    def __post_init__(self) -> None:
        _check_ms("Exponential", "from_ms", self.from_ms, positive=True)
        _check_ms("Exponential", "to_ms", self.to_ms, positive=True)
        if self.to_ms < self.from_ms:
            raise Refusal(
                f"Exponential(from_ms={self.from_ms}, to_ms={self.to_ms}): to_ms is the cap and "
                "must be at least from_ms"
            )


Backoff = Fixed | Exponential


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """What a failure means for a kind: how many retries, and how long to wait before each.

    `times` is the number of retries, so `Retry(times=3)` is four attempts in all, back to back;
    `Retry.NONE` is one attempt, and a failure is final. A kind's `retry` has no default: how
    many times a job is tried is a promise about that job, so every kind must say it.

    Raises:
        Refusal: `times` is negative or not an int, or `backoff` is not `Fixed`/`Exponential`.
    """

    NONE: ClassVar[Retry]

    times: int
    backoff: Fixed | Exponential | None = None

    def __post_init__(self) -> None:
        if isinstance(self.times, bool) or not isinstance(self.times, int) or self.times < 0:
            raise Refusal(f"Retry(times={self.times!r}): times is a count of retries, 0 or more")
        if self.backoff is not None and not isinstance(self.backoff, Fixed | Exponential):
            raise Refusal(
                f"Retry(backoff={self.backoff!r}): write backoff=job.Fixed(ms=30_000) or "
                "backoff=job.Exponential(from_ms=1_000, to_ms=3_600_000)"
            )

    @property
    def attempts(self) -> int:
        """Attempts in all: `times + 1`."""
        return self.times + 1

    def wait_ms(self, failed_attempt: int) -> int:
        """Milliseconds to wait after attempt number `failed_attempt` (1-based) failed."""
        backoff = self.backoff
        if backoff is None:
            return 0
        if isinstance(backoff, Fixed):
            return backoff.ms
        # Doubling from from_ms; the cap is compared before the power can grow without bound.
        exponent = max(failed_attempt - 1, 0)
        if exponent >= 63 or backoff.from_ms << exponent >= backoff.to_ms:
            return backoff.to_ms
        return backoff.from_ms << exponent


Retry.NONE = Retry(times=0)


class State(enum.StrEnum):
    """Where a row is: `queued` (due now or later, including a retry's wait), `running` (claimed
    under a lease), `done` (finished; only a status Space remembers it), `dead` (failed for the
    last time; it stays in the table)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"


class Overlap(enum.Enum):
    """What a scheduled kind does when its next tick is due while the previous run still runs."""

    SKIP = "skip"
    QUEUE = "queue"


class Missed(enum.Enum):
    """What a scheduled kind does with a tick whose time has passed."""

    DROP = "drop"
    CATCH_UP = "catch_up"


@dataclass(frozen=True, slots=True)
class Tick:
    """Which tick a run is: the row's `id`, the `attempts` this is (1 the first time), when the row
    was due (`run_at`, microseconds since the epoch), and whether this is the `last` attempt the
    kind's retry allows. A `final` error is dead on whichever attempt it happens."""

    id: int
    attempts: int
    run_at: int
    last: bool


@dataclass(frozen=True, slots=True)
class Stats:
    """How many rows are `queued`, `running` and `dead`, and how many `done` rows are kept as
    history (0 when the queue keeps none).

    Read by attribute; it also unpacks, indexes and compares equal like the tuple of the first
    three, the rows still in the queue (`done` is left out of the tuple).
    """

    queued: int
    running: int
    dead: int
    done: int = 0

    def _tuple(self) -> tuple[int, int, int]:
        return (self.queued, self.running, self.dead)

    def __iter__(self) -> Iterator[int]:
        return iter(self._tuple())

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: Any) -> Any:
        return self._tuple()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Stats):
            return self._tuple() == other._tuple()
        if isinstance(other, tuple):
            return self._tuple() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._tuple())


@dataclass(frozen=True, slots=True)
class Status:
    """What a status Space remembers of a row: its `state`, the `attempts` so far, and the last
    figure its run reported through `jobs.progress` (None before any)."""

    state: State
    attempts: int
    progress: int | None = None


@dataclass(frozen=True, slots=True)
class Dead:
    """A row that failed for the last time: `error` is the exception's class name, `payload` the
    row's JSON decoded to plain Python values, `died_at` microseconds since the epoch, `message`
    the exception's message and `traceback` its traceback as Python prints it (each "" when the
    row has none, as for a row that died before this version kept them)."""

    id: int
    kind: str
    error: str
    attempts: int
    payload: Any
    died_at: int
    message: str = ""
    traceback: str = ""


@dataclass(frozen=True, slots=True)
class Run:
    """The tick's scope, handed to a `run` that asks for it by annotating a parameter `job.Run`.

    `now_us` is the clock this tick reads (the number given to `drain_at` in a test, microseconds
    since the epoch); `log` is the `nilo_job` logger bound to the kind and the row; `tick` is the
    same `Tick` a `job.Tick` parameter gets.
    """

    now_us: int
    tick: Tick
    log: logging.LoggerAdapter[logging.Logger]
