"""The watch on what holds back the cleanup of the queue's tables.

A transaction left open on the database (a report, a stuck ORM session, a `psql` left idle in
transaction) holds a snapshot: while it lasts, PostgreSQL can remove none of the rows deleted or
updated since it began, so the queue's table and indexes grow (`rebuilds` gives the indexes'
room back once it has ended). On SQLite, an open read transaction keeps checkpoints from
completing, and the WAL grows with every write.

Every serving process looks every `EVERY_S` seconds (`Store.held_back`). Once a hold has lasted
`AFTER_S`, it says so as a WARNING naming what holds it (on PostgreSQL its pid, role,
application, state, how long, and the start of its last statement), again every `AGAIN_S` while
it lasts, and at INFO once it has ended. A look that fails is said once at INFO and tried again
at the next; the watch never stops serve. A look that finds nothing holding back the cleanup
for longer than `EVERY_S` has the indexes' sizes measured (`Rebuilds.measure`), and a hold said
that has ended arms the rebuilds (`Rebuilds.arm`). Serve's claim front is told after each look
whether something holds back the cleanup for longer than `EVERY_S` (`Front.holding`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from .._base.text import duration
from ..store.contract import HeldBack, Store

log = logging.getLogger("nilo_job")

EVERY_S = 15.0
"""How often a serving process looks, in seconds."""

AFTER_S = 60.0
"""A hold is said once it has lasted this many seconds."""

AGAIN_S = 300.0
"""While it lasts, it is said again every this many seconds."""


def described(hold: HeldBack, where: str) -> str:
    """The WARNING's sentence for `hold` on the store `where`."""
    if hold.pid is None:
        size = "" if hold.wal_bytes is None else f" (the WAL is {hold.wal_bytes / 1e6:.1f} MB)"
        return (
            f"a read transaction has kept checkpoints of {where} from completing for "
            f"{duration(hold.age_s * 1_000)}{size}: a connection of some process holds one open. "
            "The WAL grows with every write until it ends, and shrinks back after"
        )
    who = ", ".join(
        part
        for part in (
            f"session {hold.pid}",
            None if hold.user is None else f"user {hold.user}",
            f"application {hold.application}" if hold.application else None,
            hold.state,
        )
        if part
    )
    said = (
        f"a transaction has held back the cleanup of the queue's tables in {where} for "
        f"{duration(hold.age_s * 1_000)}: {who}"
    )
    if hold.query:
        said += f", its last statement: {statement(hold.query)}"
    end_it = "" if hold.end_it is None else f", or {hold.end_it}"
    return (
        f"{said}. Rows deleted or updated since it began cannot be removed, so the tables and "
        "their indexes grow and claims slow down; end it (COMMIT or ROLLBACK in that session"
        f"{end_it})"
    )


def statement(query: str) -> str:
    """The start of a statement on one line, without its closing semicolon."""
    return " ".join(query.split())[:120].rstrip(";").rstrip()


class HoldWatch:
    """Looks at what holds back the cleanup of `store`'s tables and says so (see the module).

    Args:
        store: the queue's store.
        where: the store as sentences name it (its target, without a password).
        after_s: a hold is said once it has lasted this many seconds.
        again_s: while it lasts, it is said again every this many seconds.
        ended: called when a hold it said has ended (serve's `Rebuilds.arm`).
        quiet: awaited after a look that finds nothing holding back the cleanup for longer
            than `EVERY_S` (serve's `Rebuilds.measure`).
        held: called after each look that answered, with whether something has held back the
            cleanup for longer than `EVERY_S` (serve's `Front.holding`).
    """

    def __init__(
        self,
        store: Store,
        where: str,
        *,
        after_s: float = AFTER_S,
        again_s: float = AGAIN_S,
        ended: Callable[[], None] = lambda: None,
        quiet: Callable[[], Awaitable[None]] | None = None,
        held: Callable[[bool], None] = lambda held: None,
    ) -> None:
        self.store = store
        self.where = where
        self.ended = ended  # told when a hold it said has ended
        self.quiet = quiet  # awaited after a look that finds no hold
        self.held = held  # told after each look whether a hold lasts
        self.after_s = after_s
        self.again_s = again_s
        self.said: HeldBack | None = None  # the hold last said, while it lasts
        self.said_at = 0.0  # when it was last said (monotonic s)
        self.failed = False  # whether the last look failed (said once)

    async def look(self) -> HeldBack | None:
        """One look: what holds back the cleanup now (None: nothing), said as the module
        says. A failure to look is said once at INFO and answers None."""
        try:
            hold = await self.store.held_back()
        except Exception as error:
            if not self.failed:
                log.info("cannot look at what holds back the cleanup of %s: %s", self.where, error)
            self.failed = True
            return None
        self.failed = False
        now = time.monotonic()
        if self.said is not None and (hold is None or hold.pid != self.said.pid):
            pid = self.said.pid
            what = "read transaction" if pid is None else f"transaction (session {pid})"
            log.info("the %s that held back the cleanup of %s has ended", what, self.where)
            self.said = None
            self.ended()
        holding = hold is not None and hold.age_s >= EVERY_S
        self.held(holding)
        if self.quiet is not None and not holding:
            await self.quiet()
        if hold is None or hold.age_s < self.after_s:
            return hold
        if self.said is None or now - self.said_at >= self.again_s:
            log.warning(described(hold, self.where))
            self.said, self.said_at = hold, now
        return hold

    async def run(self) -> None:
        """Look every `EVERY_S` for as long as serve runs (until cancelled), the first time
        `EVERY_S` after serve starts: a hold is said only once it has lasted `AFTER_S`, and a
        serve stopped at once never has a look of this in flight."""
        while True:
            await asyncio.sleep(EVERY_S)
            await self.look()
