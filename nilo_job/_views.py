"""What an operator reads: a row's whole story (`Row`), a filter (`Where`), a page of rows
(`Found`) and a kind's flow over the last hour (`Flow`).

All are frozen, slotted dataclasses. Times are microseconds since the epoch, durations
milliseconds, as the names say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._errors import Refusal

_STATES = ("queued", "running", "dead", "done")


@dataclass(frozen=True, slots=True, kw_only=True)
class Where:
    """Which rows: in `state` ("queued", "running", "dead" or "done"), of `kind`, whose last
    error's class name is `error`, holding the unique key `key`, or among `ids`. Each left as
    None matches every row.

        job.Where(state="dead", kind="send-welcome", error="SMTPServerDisconnected")

    Raises:
        Refusal: a state that is not one of the four, or a field of the wrong type.
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
            if isinstance(self.ids, str | bytes) or not isinstance(self.ids, Sequence):
                raise Refusal(f"Where(ids={self.ids!r}) takes a list of row ids")
            ids = tuple(self.ids)
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise Refusal(f"Where(ids={self.ids!r}) takes whole-number row ids")
            object.__setattr__(self, "ids", ids)

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


@dataclass(frozen=True, slots=True)
class Found:
    """One page of `jobs.find`: its `rows`, and `next`, the cursor to pass as `after=` for the
    page after it (None on the last page)."""

    rows: list[Row]
    next: str | None = None


@dataclass(frozen=True, slots=True)
class Flow:
    """One kind's flow, as `jobs.flow()` reads it.

    `done` and `died` count the rows that finished and that died in each minute of the window,
    oldest minute first (`minutes[i]` is the start of minute `i`, µs since the epoch); done rows
    count only while history is kept. `p50_ms` and `p95_ms` are the run durations of its last
    1,000 done rows in the window (None without any); `oldest_due_ms` is how long its oldest
    due row has waited (queue latency; 0 with none waiting); `queued`, `running` and `dead`
    count its rows now; `paused` says whether the kind is paused.
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
