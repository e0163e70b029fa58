"""The front of the due rows: where serve's next claim starts reading.

A claim reads the queue's due rows in `run_at` order from the earliest. On PostgreSQL (and
MySQL), the versions of the rows claimed and finished stay in the index until cleanup removes
them, and cleanup can remove nothing older than the oldest snapshot a transaction holds: while
a report, a stuck ORM session or a `psql` left open holds one, every claim reads past every row
claimed since it began, and the claims slow down as the hold lasts.

So serve reads from a front: the `run_at` of the latest row it claimed, less `BEHIND_US` (rows
whose pushes committed out of their `run_at` order, or were stamped by another host's clock a
little behind). Such a claim takes queued rows only. A full claim, from the earliest row and
with the running rows whose lease ran out, comes as serve starts, when the kinds it claims
change, when a wake-up names a row due before the front (a push with `at` in the past, a retry
by hand, from any process that wakes this one), when the store's watch (re)starts listening or
a claim failed (rows may have come meanwhile), and at least every `FULL_S` seconds (a row that
came another way; a lease that ran out). A full claim that took a row a claim from the front
would not have (due before the front, or retaken from a lease that ran out) is followed by
another, until one takes none: a claim takes only as many rows as there are free workers, and
the rest of those rows would otherwise wait for the next full claim, `FULL_S` later.

While a transaction holds back the cleanup (the hold watch says so, `holding`), a full claim
reads past every entry the hold keeps, and takes longer the longer the hold lasts (at 10,000
jobs a second, 100 ms a minute of it), while the rows pushed meanwhile wait for it: the timed
full claims then come every `FULL_HELD_S` seconds instead (the others come as before).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..store.contract import Claimed

BEHIND_US = 250_000  # how far behind its latest claimed row a claim starts reading (µs)
FULL_S = 5.0  # the longest time between two full claims (s)
FULL_HELD_S = 60.0  # the same while a transaction holds back the cleanup (s)


class Front:
    """Where serve's next claim starts (`from_us`): None for a full claim."""

    def __init__(self) -> None:
        self.latest_us: int | None = None  # the `run_at` of the latest queued row claimed
        self.full_at = 0.0  # when the last full claim was sent (monotonic, s)
        self.full_next = True  # the next claim is to be a full one (`full`)
        self.reading_full = False  # the claim under way is a full one
        self.kinds: tuple[str, ...] = ()
        self.every_s = FULL_S  # the longest time between two full claims now (`holding`)

    def from_us(self, kinds: Sequence[str]) -> int | None:
        """The `run_at` (µs) from which the next claim of `kinds` reads queued rows only, or
        None when it is to be a full claim (which this call then counts as sent)."""
        now = time.monotonic()
        if (
            self.full_next
            or self.latest_us is None
            or tuple(kinds) != self.kinds
            or now - self.full_at > self.every_s
        ):
            self.kinds, self.full_at, self.full_next = tuple(kinds), now, False
            self.reading_full = True
            return None
        self.reading_full = False
        return self.latest_us - BEHIND_US

    def claimed(self, rows: Sequence[Claimed]) -> None:
        """`rows` were claimed: the front moves to the latest queued one among them. A full
        claim that took a row a claim from the front would not have makes the next one full
        too: more such rows may be left."""
        if self.reading_full and self.latest_us is not None:
            behind = self.latest_us - BEHIND_US
            if any(row.retaken_from is not None or row.run_at < behind for row in rows):
                self.full_next = True
        for row in rows:
            if row.retaken_from is None and (self.latest_us is None or row.run_at > self.latest_us):
                self.latest_us = row.run_at

    def full(self) -> None:
        """The next claim is a full one: rows may have come due before the front (a claim
        failed, the store's watch restarted), or a lease this process held, whose end could
        not be written, may have run out."""
        self.full_next = True

    def holding(self, held: bool) -> None:
        """Whether a transaction holds back the cleanup now: the timed full claims come every
        `FULL_HELD_S` seconds while one does, every `FULL_S` otherwise."""
        self.every_s = FULL_HELD_S if held else FULL_S

    def woken(self, due_us: int) -> None:
        """A wake-up for a row due at `due_us`: a row due before the front makes the next
        claim a full one."""
        if self.latest_us is not None and due_us < self.latest_us - BEHIND_US:
            self.full()
