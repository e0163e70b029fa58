"""The parts of one queue that every piece of it shares, built once.

`Jobs` builds its `Parts` from its store, its kinds, its status Space and its timeout; the
producer, the runner, serve, the drain and the operator each take the one value instead of a
dozen arguments. Every part keeps the same clock, so that a test's `drain_at` moment and serve's
store clock reach the claim, the lease, a retry's wait and a schedule's next tick alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._base.clock import Clock
from .._base.spaces import Space, Statuses
from .._kinds.kind import Kind, answers
from .._watch.observers import Observers
from ..store.contract import Store
from .ends import Ends
from .ticks import Ticks
from .wakeups import Wakeups

TIMEOUT_MS = 60_000
"""A run's timeout when neither its kind nor the queue names one, in milliseconds."""

LEASE_BEATS = 3
"""Under `heartbeat_ms`, a claim's lease is this many beats: a process that stops beating has
its rows taken again within that window."""


@dataclass(frozen=True, slots=True)
class Parts:
    """What the pieces of one queue share.

    Attributes:
        store: where the rows are.
        kinds: the queue's kinds by name.
        answers: the kind that runs a row, by every name a row may carry: each kind's name and
            its aliases (the names it had before a rename).
        aliases: each kind's aliases, by its name (only the kinds that have some).
        clock: the queue's clock (µs), kept in step with the store's by serve.
        observers: told of every push, claim, run and end.
        statuses: the status Space, or none.
        wakeups: how serve in this process hears of work before its poll.
        ends: the one way an end goes to the store.
        ticks: the schedules' tick rows.
        timeout_ms: the queue's timeout, for a kind that names none, in milliseconds.
        lease_ms: the lease a claim takes, in milliseconds: the longest timeout of the kinds
            and the queue, plus a second; under `heartbeat_ms`, `LEASE_BEATS` beats.
        limits: the kinds with a concurrency limit, each with its limit: what every claim of
            serve and of the test helpers hands the store (empty: no kind has one). A limited
            kind's aliases have the same limit, each counted apart.
    """

    store: Store
    kinds: dict[str, Kind]
    answers: dict[str, Kind]
    aliases: dict[str, tuple[str, ...]]
    clock: Clock
    observers: Observers
    statuses: Statuses
    wakeups: Wakeups
    ends: Ends
    ticks: Ticks
    timeout_ms: int
    lease_ms: int
    limits: dict[str, int]
    heartbeat_ms: int | None = None

    @classmethod
    def build(
        cls,
        store: Store,
        kinds: Sequence[Kind] = (),
        status: Space | None = None,
        timeout_ms: int = TIMEOUT_MS,
        heartbeat_ms: int | None = None,
    ) -> Parts:
        """The parts of a queue of `kinds` over `store`; with no kinds, those of its table
        alone (what the command line and the dashboard read and act on without the queue)."""
        if heartbeat_ms is None:
            lease_ms = max([timeout_ms, *(kind.timeout_ms or 0 for kind in kinds)]) + 1_000
        else:
            lease_ms = LEASE_BEATS * heartbeat_ms
        clock = Clock()
        observers = Observers()
        statuses = Statuses(status)
        wakeups = Wakeups(clock)
        return cls(
            store=store,
            kinds={kind.name: kind for kind in kinds},
            answers=answers(kinds),
            aliases={kind.name: kind.aliases for kind in kinds if kind.aliases},
            clock=clock,
            observers=observers,
            statuses=statuses,
            wakeups=wakeups,
            ends=Ends(store, lease_ms, observers, wakeups, statuses),
            ticks=Ticks(kinds, store, observers, wakeups),
            timeout_ms=timeout_ms,
            lease_ms=lease_ms,
            limits={
                name: kind.concurrency
                for kind in kinds
                if kind.concurrency is not None
                for name in (kind.name, *kind.aliases)
            },
            heartbeat_ms=heartbeat_ms,
        )
