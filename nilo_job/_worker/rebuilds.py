"""Swollen indexes rebuilt: the room a long-held snapshot left in the queue table's indexes is
given back while serve runs, without an operator's hand.

A serving process asks the store (`Store.rebuild_swollen`; on PostgreSQL one process at a time
rebuilds, with `REINDEX INDEX CONCURRENTLY`, which blocks no push, claim or end) once a hold the
watch said has ended (`HoldWatch`), every `EVERY_S` seconds for up to `LOOKS` looks, until a
look rebuilds something: time for autovacuum to count the live entries the indexes hold. It
does not ask otherwise, nor as serve starts: an index under steady traffic grows to a working
size, larger than its live entries need, which a rebuild only has it grow back to, and under
heavy traffic a queue whose indexes were rebuilt small stalled (a soak at 10,000 jobs/s: claims
took 2 s each for 45 s, from the first autovacuum after the rebuild).

For the same reason an index is rebuilt only once it is past twice its size before the hold:
the watch has the sizes measured (`measure`) at each of its looks that finds nothing holding
back the cleanup, and they are kept from the hold's start until the looks after it are over.
Every serving process has them, so an index one process has rebuilt is not rebuilt again by
another once it has grown back to its working size.

Each index rebuilt is said at INFO with its size before and after. A failure (a role that does
not own the table may not rebuild its indexes) is said once as a WARNING, again only when it
changes; it never stops serve.
"""

from __future__ import annotations

import asyncio
import logging

from .._base.text import printable
from ..store.contract import Store

log = logging.getLogger("nilo_job")

EVERY_S = 60.0
"""The time between two looks, in seconds (the first look too, after a hold ends)."""

LOOKS = 10
"""The looks after a hold has ended, until one rebuilds something."""


class Rebuilds:
    """Asks `store` to rebuild its swollen indexes every `EVERY_S` seconds while serve runs.

    Args:
        store: the queue's store.
        where: the store as the log names it.
    """

    def __init__(self, store: Store, where: str) -> None:
        self.store = store
        self.where = where
        self.failed: str | None = None  # the last failure said
        self.looks = 0  # the looks left (`arm`)
        self.before: dict[str, int] = {}  # the indexes' sizes before the last hold (bytes)

    def arm(self) -> None:
        """A hold has ended: look again, `LOOKS` times at most."""
        self.looks = LOOKS

    async def measure(self) -> None:
        """Nothing holds back the cleanup: measure the indexes' sizes, which the looks after
        the next hold compare with (kept as they are while looks are left). A failure keeps
        the sizes measured last."""
        if self.looks > 0:
            return
        try:
            self.before = await self.store.index_sizes()
        except Exception:
            return  # (the watch says why the database cannot be looked at)

    async def run(self) -> None:
        """Every `EVERY_S` seconds until cancelled, look if looks are left."""
        while True:
            await asyncio.sleep(EVERY_S)
            if self.looks > 0:
                self.looks -= 1
                if await self.look():
                    self.looks = 0

    async def look(self) -> bool:
        """Ask once; say what was rebuilt, or why it failed. Whether anything was rebuilt."""
        try:
            rebuilt = await self.store.rebuild_swollen(self.before)
        except Exception as error:
            said = printable(f"{type(error).__name__}: {error}".splitlines()[0])
            if said != self.failed:
                log.warning(
                    "rebuilding the swollen indexes of %s failed (%s); trying again in %g s",
                    self.where, said, EVERY_S,
                )  # fmt: skip
            self.failed = said
            return False
        self.failed = None
        for index in rebuilt:
            log.info(
                "rebuilt the index %s of %s, which had swollen: %.1f MB → %.1f MB",
                index.index, self.where, index.before_bytes / 1e6, index.after_bytes / 1e6,
            )  # fmt: skip
        return bool(rebuilt)
