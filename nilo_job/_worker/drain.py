"""The test helpers: `drain`, `drain_at`, `run_one` and `run_one_at` run due rows here and now.

A test moves the clock by handing a moment to `drain_at(now_us)`: the claim, the lease, a retry's
wait and a schedule's next tick all read that one number, so tomorrow, a backoff or a lease is a
call rather than a sleep. Rows run one at a time, in the caller's task, through the same
`Runner` that serve uses. A kind with a concurrency limit keeps it here too: its rows running
elsewhere under a live lease (serve, another process) leave that much less room.

With `raises=True` a run that raised (or a row that died of `BadPayload` without running)
stops the drain once its end is written, and its exception is raised to the test, with its own
traceback and a note naming the kind, the row, the attempt and what became of the row. A
`job.Snooze` within the kind's `snoozes` is no failure: the drain goes on.
"""

from __future__ import annotations

import time

from .._base.bounds import moment
from .._base.process import worker
from .._base.text import utc_exact
from .._kinds.kind import Kind
from ..store.contract import Died, End, Retrying, Snoozed
from .parts import Parts
from .pauses import unpaused, with_aliases
from .runner import Ran, Runner


class Drain:
    """Runs one queue's due rows at a given moment, through the queue's `parts` and `runner`."""

    def __init__(self, parts: Parts, runner: Runner) -> None:
        self.store = parts.store
        self.names = tuple(parts.kinds)
        self.aliases = parts.aliases  # each renamed kind's old names, claimed with it
        self.lease_ms = parts.lease_ms  # the lease a claim takes, on the drain's clock
        self.limits = parts.limits  # the kinds with a concurrency limit
        self.runner = runner
        self.observers = parts.observers

    async def run_one_at(self, now_us: int, raises: bool = False) -> bool:
        """`Jobs.run_one_at`: True if a run was called.

        Raises:
            Refusal: `now_us` is not a moment a store can hold (`_base.bounds.moment`).
            BaseException: with `raises`, what the run raised (see the module's docstring).
        """
        moment(now_us, "run_one_at({})", "now_us")
        return await self._run_one_at(now_us, await self.claimable(), raises)

    async def _run_one_at(self, now_us: int, names: tuple[str, ...], raises: bool) -> bool:
        """One due row of the kinds `names` claimed and run at `now_us`; True if run was called."""
        if not names:
            return False
        while True:
            began = time.monotonic()
            lease_until = now_us + self.lease_ms * 1_000
            if self.limits:  # a kind's rows running elsewhere under a live lease count too
                rows = await self.store.claim(
                    names, now_us, lease_until, 1, worker(), limits=self.limits
                )
            else:
                rows = await self.store.claim(names, now_us, lease_until, 1, worker())
            if self.observers.all:
                self.observers.claimed(rows, now_us, began)
            if not rows:
                return False
            ran = await self.runner.execute(rows[0], lambda: now_us)
            if raises and ran.error is not None and not isinstance(ran.end, Snoozed):
                raise _noted(ran, self.runner.kinds[rows[0].kind], rows[0].id)
            if ran.called:
                return True

    async def drain_at(self, now_us: int, raises: bool = False) -> int:
        """`Jobs.drain_at`: how many runs were called.

        Raises:
            Refusal: `now_us` is not a moment a store can hold (`_base.bounds.moment`).
            BaseException: with `raises`, what a run raised (see the module's docstring).
        """
        moment(now_us, "drain_at({})", "now_us")
        count = 0
        names = await self.claimable()
        while await self._run_one_at(now_us, names, raises):
            count += 1
        return count

    async def claimable(self) -> tuple[str, ...]:
        """The names to claim: every kind of the queue that is not paused, then their aliases
        (see `pauses`)."""
        paused = await self.store.paused()
        return with_aliases(unpaused(self.names, paused, self.aliases), self.aliases)


def _noted(ran: Ran, kind: Kind, row_id: int) -> BaseException:
    """`ran.error` with a note that says which row it came from and what became of the row."""
    error = ran.error
    assert error is not None
    end = ran.end
    attempt = "" if end is None else f", attempt {end.attempts} of {kind.retry.attempts}"
    source = "raised by the run of" if ran.called else "not run:"
    error.add_note(f"nilo-job: {source} {kind.name} row {row_id}{attempt}; {_fate(end)}")
    return error


def _fate(end: End | None) -> str:
    """What became of a row after its run raised, for a test's reader."""
    if isinstance(end, Retrying):
        return f"the row is queued again for {utc_exact(end.run_at)}"
    if isinstance(end, Died):
        return f"the row is dead ({end.error})"
    return "the row was not ended here"
