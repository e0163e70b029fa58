"""The values users read and write: retry policy, tick, stats, status, dead rows, states.

All are frozen, slotted dataclasses; states are enums. Times are microseconds since the epoch
(`run_at`, `died_at`) and durations are milliseconds (`ms`, `from_ms`, `to_ms`), as the names say.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .bounds import MS, POSITIVE_MS, RETRIES, whole
from .bounds import row_ids as check_row_ids
from .errors import Refusal


@dataclass(frozen=True, slots=True, kw_only=True)
class Fixed:
    """The same wait, `ms` milliseconds, before every retry."""

    ms: int

    def __post_init__(self) -> None:
        whole(self.ms, MS, "Fixed(ms={})", "ms")


@dataclass(frozen=True, slots=True, kw_only=True)
class Exponential:
    """A wait of `from_ms` after the first failure, doubling after each, never past `to_ms`.

    `Exponential(from_ms=1_000, to_ms=3_600_000)` is 1 s, 2 s, 4 s, … and never past an hour.
    Both in milliseconds.
    """

    from_ms: int
    to_ms: int

    def __post_init__(self) -> None:
        whole(self.from_ms, POSITIVE_MS, "Exponential(from_ms={})", "from_ms")
        whole(self.to_ms, POSITIVE_MS, "Exponential(to_ms={})", "to_ms")
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
        Refusal: `times` is not an int from 0 to 2,147,483,646 (a row's attempts, `times + 1`,
            are a 32-bit integer in PostgreSQL), or `backoff` is not `Fixed`/`Exponential`.
    """

    NONE: ClassVar[Retry]

    times: int
    backoff: Fixed | Exponential | None = None

    def __post_init__(self) -> None:
        whole(self.times, RETRIES, "Retry(times={})", "times")
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


class Snooze(Exception):
    """Raised by a run: "not now, run me again in `ms` milliseconds", without spending an
    attempt.

    The row goes back to `queued`, due `ms` after the moment of the attempt (on the tick's
    clock: under `drain_at(t)` it is due at `t + ms`), with its attempts as they were before
    this one and its unique key kept. Each snooze of a row is counted (`Row.snoozes`); once a
    row has snoozed as many times as its kind's `snoozes` allows (100 unless the class says),
    its next snooze counts as a failed attempt named `Snooze`, so that the kind's `retry`
    ends a row that snoozes forever.

        raise job.Snooze(ms=60_000)   # the partner's API is rate-limited: back in a minute

    Raises:
        Refusal: `ms` is not whole milliseconds from 0 to ten years.
    """

    def __init__(self, ms: int) -> None:
        self.ms: int = whole(ms, MS, "Snooze(ms={})", "ms")
        super().__init__(self.ms)

    def __str__(self) -> str:
        return f"snooze for {self.ms:,} ms"


class RetryIn(Exception):
    """Raised by a run: this attempt failed, and the next one is due in `ms` milliseconds
    rather than after the kind's backoff.

    It is a failed attempt like any other: it spends an attempt, and the row is dead when it
    was the last (or when its cause is in the kind's `final`). Raised `from` an error, the row
    records that error's class name and message; raised alone, `RetryIn` and "retry in 5,000
    ms".

        except RateLimited as error:
            raise job.RetryIn(ms=error.retry_after_ms) from error

    Raises:
        Refusal: `ms` is not whole milliseconds from 0 to ten years.
    """

    def __init__(self, ms: int) -> None:
        self.ms: int = whole(ms, MS, "RetryIn(ms={})", "ms")
        super().__init__(self.ms)

    def __str__(self) -> str:
        return f"retry in {self.ms:,} ms"


# Named where users import them, as the errors are (`_errors`).
Snooze.__module__ = RetryIn.__module__ = "nilo_job"


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
    row has none, as for a row that died before this version kept them).

    `dead_ones` is a list, and a list reads only the start of each payload: a payload whose JSON
    is longer than 4,096 characters is its first 4,096 characters, as a `str` (JSON cut short,
    not parsed), and `payload_cut` is True. `jobs.row(id)` reads it whole.
    """

    id: int
    kind: str
    error: str
    attempts: int
    payload: Any
    died_at: int
    message: str = ""
    traceback: str = ""
    payload_cut: bool = False


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


_STATES = ("queued", "running", "dead", "done")


@dataclass(frozen=True, slots=True, kw_only=True)
class Where:
    """Which rows: in `state` ("queued", "running", "dead" or "done"), of `kind`, whose last
    error's class name is `error`, holding the unique key `key`, or among `ids`. Each left as
    None matches every row.

        job.Where(state="dead", kind="send-welcome", error="SMTPServerDisconnected")

    Raises:
        Refusal: a state that is not one of the four, a field of the wrong type, or an id that
            is not a row id (an int from 1 to 2**63 - 1).
    """

    state: str | None = None
    kind: str | None = None
    error: str | None = None
    key: str | None = None
    ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in _STATES:
            raise Refusal(
                f"Where(state={self.state!r}): a row is 'queued', 'running', 'dead' or 'done'"
            )
        for name in ("kind", "error", "key"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise Refusal(f"Where({name}={value!r}) takes a str")
            if value is not None and ("\x00" in value or not is_unicode(value)):
                raise Refusal(
                    f"Where({name}={value[:80]!a}): no row holds a NUL or a lone surrogate, "
                    "which no store can keep"
                )
        if self.ids is not None:
            object.__setattr__(self, "ids", check_row_ids(self.ids, "Where(ids={})"))

    def matches(self, state: str, kind: str, error: str | None, key: str | None, id: int) -> bool:
        """Whether a row with these columns is one of these rows."""
        return (
            (self.state is None or state == self.state)
            and (self.kind is None or kind == self.kind)
            and (self.error is None or error == self.error)
            and (self.key is None or key == self.key)
            and (self.ids is None or id in self.ids)
        )

    def words(self) -> str:
        """This filter as an operator reads it: "dead rows of send-welcome with Timeout"."""
        text = f"{self.state or 'all'} rows"
        if self.kind is not None:
            text += f" of {self.kind}"
        if self.error is not None:
            text += f" that failed with {self.error}"
        if self.key is not None:
            text += f" holding the key {self.key!r}"
        if self.ids is not None:
            text += f" among {len(self.ids)} ids"
        return text


def is_unicode(text: str) -> bool:
    """Whether `text` is Unicode a store can be sent (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


ATTEMPTS_KEPT = 20
"""How many attempts a row keeps (`Row.attempts_log`): the newest 20; older ones are forgotten."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a row, as `Row.attempts_log` keeps it (the newest `ATTEMPTS_KEPT`, 20).

    `attempt` is the attempt's number as the row counted it then (1 for the first; a row
    retried by an operator counts from 1 again; a snooze or a row given back does not count).
    `outcome` is how it ended: "done", "retrying" (failed, tried again later), "dead" (failed
    for the last time), "snoozed" (`job.Snooze`), "released" (given back unrun by a worker
    stopping past its grace), "lost" (its worker stopped being heard from, and another took the
    row back after the lease ran out). Times are µs since the epoch: `started_at` (its claim;
    for "done" when its run began; None for "lost", or when the row does not say), `ended_at`
    (for "lost", when the row was taken back). `worker` is "host:pid" of the process that held
    it; `error`, `message` and `traceback` are its failure's class name, message and traceback
    (None when it did not fail).

    A done attempt is read from the done row itself; the others are recorded with the end that
    closes them (a lost one by the worker that took the row back, as its own attempt ends) and
    deleted with their row.
    """

    attempt: int
    outcome: str
    started_at: int | None
    ended_at: int
    worker: str | None = None
    error: str | None = None
    message: str | None = None
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class Row:
    """A row's whole story, as `jobs.row(id)` and `jobs.find(...)` read it.

    `state` is "queued", "running", "dead" or "done" (a done row is kept for the queue's
    `retention_ms`). `payload` is the stored JSON as plain values (None when it cannot be read,
    `unreadable` then says why); `result` is what a done row's run returned, as plain values
    (None when it returned None or nothing JSON can carry). Times are µs since the epoch:
    `pushed_at` (None for a row pushed by a version that did not record it), `run_at` (due),
    `started_at` (its last attempt), `finished_at` (done), `died_at` (dead), `lease_until`
    (running). `worker` is "host:pid" of the process that ran the last attempt. `error`,
    `message` and `traceback` are the last failure's class name, message and traceback.
    `snoozes` is how many times its runs snoozed (`job.Snooze`); None for a done row, whose
    history does not keep it. `attempts_log` is its attempts, oldest first, a done row's last
    one the attempt that ended done (the newest 20 of them: `job.Attempt`), read by
    `jobs.row(id)` only (empty in a list).

    `jobs.row(id)` reads the whole payload. A list (`jobs.find`) reads only the start of each:
    a payload whose JSON is longer than 4,096 characters is its first 4,096 characters, as a
    `str` (JSON cut short, not parsed), and `payload_cut` is True.
    """

    id: int
    kind: str
    state: str
    payload: Any
    attempts: int
    run_at: int
    unique_key: str | None = None
    pushed_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    died_at: int | None = None
    lease_until: int | None = None
    worker: str | None = None
    error: str | None = None
    message: str | None = None
    traceback: str | None = None
    result: Any = None
    unreadable: str | None = None
    payload_cut: bool = False
    snoozes: int | None = None
    attempts_log: tuple[Attempt, ...] = ()


@dataclass(frozen=True, slots=True)
class Found:
    """One page of `jobs.find`: its `rows`, and `next`, the cursor to pass as `after=` for the
    page after it (None on the last page)."""

    rows: list[Row]
    next: str | None = None


@dataclass(frozen=True, slots=True)
class Flow:
    """One kind's flow, as `jobs.flow()` reads it.

    `done` and `died` count the rows that finished and the deaths in each minute of the window,
    oldest minute first (`minutes[i]` is the start of minute `i`, µs since the epoch); done rows
    count only while history is kept. A death is an event: an attempt that failed for the last
    time counts in its minute for a day, also after its row was retried or deleted.
    `p50_ms` and `p95_ms` are the run durations of its last 1,000 done rows in the window (None
    without any); `oldest_due_ms` is how long its oldest due row has waited (queue latency; 0
    with none waiting); `queued`, `running` and `dead` count its rows now; `paused` says whether
    the kind is paused.
    """

    kind: str
    minutes: list[int] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    died: list[int] = field(default_factory=list)
    p50_ms: float | None = None
    p95_ms: float | None = None
    oldest_due_ms: int = 0
    queued: int = 0
    running: int = 0
    dead: int = 0
    paused: bool = False
