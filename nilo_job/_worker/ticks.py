"""Schedules as rows: a schedule's next tick is a row carrying the unique key "schedule".

Nobody pushes a scheduled kind: seeding pushes each schedule's next tick, with the key, so that
any number of processes seeding at once leave one row per scheduled kind (the unique index
decides), and whichever worker claims the row runs the tick. A tick's row hands the key on to
the next tick when it ends (or, for `Overlap.QUEUE`, when it starts), in the same transaction as
its own end. There is no leader, and a restart loses no tick. When the next tick falls is
`outcome`'s decision; this module builds the rows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from .._base.clock import utc_text
from .._base.values import Missed, Overlap
from .._kinds.kind import Kind
from .._watch.observers import Observers
from ..store.contract import Claimed, NewRow, Store
from . import outcome
from .wakeups import Wakeups

SCHEDULE_KEY = "schedule"
"""The unique key of a schedule's next tick: one row of a scheduled kind holds it."""

log = logging.getLogger("nilo_job")


@dataclass(frozen=True, slots=True)
class Start:
    """How a tick starts (`Ticks.start`): `dropped`, the next tick's row when this one is
    dropped unrun; `next_at_end`, whether the next tick is computed when this one ends."""

    dropped: NewRow | None = None
    next_at_end: bool = False


class Ticks:
    """The tick rows of a queue's scheduled kinds.

    Args:
        kinds: the queue's kinds (those without a schedule are passed over).
        store: where seeding writes.
        observers: told of seeding's pushes.
        wakeups: told when each seeded tick falls due.
    """

    def __init__(
        self, kinds: Sequence[Kind], store: Store, observers: Observers, wakeups: Wakeups
    ) -> None:
        self.scheduled = tuple(kind for kind in kinds if kind.schedule is not None)
        # A scheduled kind's payload: every field at its default (nobody pushes it).
        self.payloads = {kind.name: kind.codec.encode(kind.cls()) for kind in self.scheduled}
        self.store = store
        self.observers = observers
        self.wakeups = wakeups

    @staticmethod
    def holds_schedule(kind: Kind, row: Claimed) -> bool:
        """Whether `row` is its schedule's tick (it holds the key), rather than a failed tick
        retried as a row of its own, or a row somebody pushed."""
        return kind.schedule is not None and row.unique_key == SCHEDULE_KEY

    async def start(self, kind: Kind, row: Claimed, now_us: int) -> Start:
        """What the tick `row` (its schedule's, `holds_schedule`) does as it starts at `now_us`.

        A tick later than its own successor is missed: `Missed.DROP` drops it unrun, handing
        the key on to the next tick. Under `Overlap.QUEUE` the key goes on to the next tick now,
        so that it may start while this one runs; under `Overlap.SKIP` the next tick is
        computed when this one ends.
        """
        if outcome.tick_is_missed(kind, row.run_at, now_us) and kind.missed is Missed.DROP:
            log.info(
                "%s row %d: its tick, due at %s, was missed (the next tick is due already); "
                "dropped", kind.name, row.id, utc_text(row.run_at),
                extra={"kind": kind.name, "row": row.id},
            )  # fmt: skip
            return Start(dropped=self.next_row(kind, row.run_at, now_us))
        if kind.overlap is Overlap.QUEUE:
            next_tick = self.next_row(kind, row.run_at, now_us)
            if await self.store.hand_on(row.id, row.attempts, next_tick):
                self.wakeups.wake_at(next_tick.run_at)
            return Start()
        return Start(next_at_end=True)

    def next_row(self, kind: Kind, due_us: int, now_us: int) -> NewRow:
        """The row of the tick after the one due at `due_us` (µs), seen from `now_us`, carrying
        the key."""
        run_at = outcome.next_tick_at(kind, due_us, now_us)
        return NewRow(kind.name, self.payloads[kind.name], run_at, SCHEDULE_KEY, pushed_at=now_us)

    async def holding(self, row_id: int) -> tuple[Kind, int] | None:
        """The scheduled kind whose next tick row `row_id` is, and when it is due (µs); None
        when it is no schedule's (one read of the store, and none without scheduled kinds)."""
        if not self.scheduled:
            return None
        for row in await self.store.holding(SCHEDULE_KEY, [k.name for k in self.scheduled]):
            if row.id == row_id:
                kind = next(k for k in self.scheduled if k.name == row.kind)
                return kind, row.run_at
        return None

    async def skip(self, kind: Kind, due_us: int, now_us: int) -> None:
        """After the tick due at `due_us` was cancelled: queue the one after it (the first on
        the schedule after `due_us`, or after `now_us` when that one is past too)."""
        run_at = outcome.tick_after_skipped(kind, due_us, now_us)
        await self._push(
            [NewRow(kind.name, self.payloads[kind.name], run_at, SCHEDULE_KEY, pushed_at=now_us)]
        )

    async def seed_at(self, now_us: int) -> None:
        """Push every schedule's first tick after `now_us` (µs); a kind already seeded keeps its
        row (the key is taken, so the push writes nothing for it)."""
        rows = [
            NewRow(
                kind.name,
                self.payloads[kind.name],
                kind.schedule.next(now_us),
                SCHEDULE_KEY,
                pushed_at=now_us,
            )
            for kind in self.scheduled
            if kind.schedule is not None
        ]
        if rows:
            await self._push(rows)

    async def _push(self, rows: list[NewRow]) -> None:
        """Push tick rows (a key already held writes nothing), told to the observers, and wake
        serve for when each falls due."""
        with self.observers.pushing(rows[0].kind):
            ids = await self.store.push(rows)
            self.observers.pushed(rows, ids)
        for row in rows:
            self.wakeups.wake_at(row.run_at)
