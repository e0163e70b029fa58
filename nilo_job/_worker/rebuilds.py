"""Swollen indexes rebuilt: the room a long-held snapshot left in the queue table's indexes is
given back while serve runs, without an operator's hand.

A serving process asks the store (`Store.rebuild_swollen`; on PostgreSQL one process at a time
rebuilds, with `REINDEX INDEX CONCURRENTLY`, which blocks no push, claim or end) once
`EVERY_S` seconds after serve starts (what an earlier hold or a backlog left), and, once a hold
the watch said has ended (`HoldWatch`), every `EVERY_S` seconds for up to `LOOKS` looks, until
a look rebuilds something: time for autovacuum to count the live entries the indexes hold.
Between those it does not ask: an index under steady traffic grows to a working size, larger
than its live entries need, which a rebuild would only have it grow back to.

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
"""The time between two looks, in seconds (the first look too, after serve starts)."""

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
        self.looks = 1  # the looks left (one as serve starts)

    def arm(self) -> None:
        """A hold has ended: look again, `LOOKS` times at most."""
        self.looks = LOOKS

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
            rebuilt = await self.store.rebuild_swollen()
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
