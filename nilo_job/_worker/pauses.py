"""Which kinds `serve` runs (`served`), and which of those are paused, in this process.

A pause is a row in the table (`nilo_jobs_paused`), so every process on the table sees it: serve
reads the paused kinds as it starts and then every `poll_ms`, and a pause or resume made in
this process is told here at once. The claim loop claims only `claimable`, and the feed's
`kinds` (what a push may hand to an idle worker) follows it.

A renamed kind's rows of its old names (its `aliases`) are claimed with it, and wait with it
while it is paused. A pause recorded under one of its old names (before the rename) pauses it
too, until that name is resumed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence

from .._base.errors import Refusal
from ..store.contract import Store
from .wakeups import Wakeups

log = logging.getLogger("nilo_job")


def served(kinds: Sequence[str] | None, known: Collection[str]) -> tuple[str, ...]:
    """The kinds serve runs: `kinds` (names among the queue's kinds, `known`), or all of them when
    None.

    Raises:
        Refusal: a name that is not a kind of this queue, or an empty list.
    """
    if kinds is None:
        return tuple(known)
    if isinstance(kinds, str) or not isinstance(kinds, Sequence) or not kinds:
        raise Refusal("serve(kinds=[...]) takes a non-empty list of kind names")
    unknown = [name for name in kinds if name not in known]
    if unknown:
        raise Refusal(
            f"serve(kinds=...): {', '.join(map(repr, unknown))} is not a kind of this queue "
            f"(it has {', '.join(known)})"
        )
    return tuple(dict.fromkeys(kinds))


def unpaused(
    names: Sequence[str], paused: Collection[str], aliases: Mapping[str, tuple[str, ...]]
) -> tuple[str, ...]:
    """The kinds of `names` that are not paused: neither their name nor one of their `aliases`
    (by kind name) is among `paused`."""
    return tuple(
        name
        for name in names
        if name not in paused and not any(alias in paused for alias in aliases.get(name, ()))
    )


def with_aliases(names: Sequence[str], aliases: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """`names`, then the aliases of each (what a claim for those kinds asks the store for)."""
    if not aliases:
        return tuple(names)
    more = [alias for name in names for alias in aliases.get(name, ())]
    return tuple(dict.fromkeys([*names, *more]))


class Pauses:
    """The kinds serve claims now: those it runs (`names`) that are not paused.

    Args:
        store: the queue's store, which keeps the paused kinds.
        wakeups: serve's wake-ups, whose feed is told what it may be handed, and which wake
            the claim loop when a kind is resumed.
        poll_ms: how often the paused kinds are read again, in milliseconds.
        aliases: each renamed kind's old names, by its name: their rows are claimed with it.

    `claimable` holds the names a claim asks for: the kinds not paused, then their aliases.
    """

    def __init__(
        self,
        store: Store,
        wakeups: Wakeups,
        poll_ms: int,
        aliases: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.store = store
        self.wakeups = wakeups
        self.poll_ms = poll_ms
        self.aliases = dict(aliases or {})
        self.names: tuple[str, ...] = ()
        self.running: tuple[str, ...] = ()  # the kinds of `names` not paused
        self.claimable: tuple[str, ...] = ()

    def serve(self, names: tuple[str, ...]) -> None:
        """Serve starts with the kinds `names`, none paused yet."""
        self.names = self.running = names
        self.claimable = with_aliases(names, self.aliases)

    def set(self, paused: Collection[str]) -> None:
        """Claim no row of the `paused` kinds from now on, and again rows of the others."""
        running = unpaused(self.names, paused, self.aliases)
        before = set(self.running)
        self.running = running
        self.claimable = with_aliases(running, self.aliases)
        feed = self.wakeups.feed
        if feed is not None:
            feed.kinds = frozenset(self.claimable)
        for name in sorted(before - set(running)):
            log.info("%s is paused: its rows wait until it is resumed", name, extra={"kind": name})
        resumed = set(running) - before
        for name in sorted(resumed):
            log.info("%s is resumed: claiming its rows again", name, extra={"kind": name})
        if resumed:
            self.wakeups.wake_at(None)

    async def follow(self) -> None:
        """Read the paused kinds every `poll_ms`, until cancelled (a pause or resume from any
        process takes effect here within it); a read that fails is tried at the next."""
        while True:
            await asyncio.sleep(self.poll_ms / 1_000)
            try:
                paused = await self.store.paused()
            except Exception as error:
                log.debug("reading the paused kinds failed (%s)", error)
                continue
            self.set(paused)
