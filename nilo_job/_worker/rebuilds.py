"""Swollen indexes rebuilt: the room a long-held snapshot or a run-down backlog left in the
queue table's indexes is given back while serve runs, without an operator's hand.

Every serving process asks the store every `EVERY_S` seconds (`Store.rebuild_swollen`; on
PostgreSQL one process at a time rebuilds, with `REINDEX INDEX CONCURRENTLY`, which blocks no
push, claim or end). Each index rebuilt is said at INFO with its size before and after. A
failure (a role that does not own the table may not rebuild its indexes) is said once as a
WARNING, again only when it changes, and tried again at the next look; it never stops serve.
"""

from __future__ import annotations

import asyncio
import logging

from .._base.text import printable
from ..store.contract import Store

log = logging.getLogger("nilo_job")

EVERY_S = 60.0
"""How often a serving process asks, in seconds (its first look too, after serve starts)."""


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

    async def run(self) -> None:
        """Look every `EVERY_S` seconds until cancelled."""
        while True:
            await asyncio.sleep(EVERY_S)
            await self.look()

    async def look(self) -> None:
        """Ask once; say what was rebuilt, or why it failed."""
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
            return
        self.failed = None
        for index in rebuilt:
            log.info(
                "rebuilt the index %s of %s, which had swollen: %.1f MB → %.1f MB",
                index.index, self.where, index.before_bytes / 1e6, index.after_bytes / 1e6,
            )  # fmt: skip
