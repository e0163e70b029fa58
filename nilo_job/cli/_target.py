"""What an operator command works on: a queue (`module:attr`) or only its table (a database URL),
opened, run on an event loop of its own, and closed.

With a queue every call goes through the queue's own operator, so a status Space hears of a
retry and a pause is checked against the queue's kinds. With a URL there are no kinds: the calls
go to an operator over the store alone (batches of 500 rows per transaction), and a pause is
accepted for any kind name, since it is only a row in `nilo_jobs_paused`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import click

from .._base.clock import now_us
from .._base.errors import JobError, Refusal
from .._base.values import Dead, Found, Row, Stats, Where
from .._kinds.kind import name_problem
from .._queue.jobs import Jobs
from .._queue.operator import Operator
from ..store._table import Table
from ..store.contract import Store
from ._load import load

T = TypeVar("T")


@dataclass(slots=True)
class Target:
    """A queue (`jobs`) or its table alone (`jobs` None), and the calls the commands make on it."""

    store: Store
    jobs: Jobs | None
    _operator: Operator | None = field(default=None, repr=False)

    @property
    def kind_names(self) -> tuple[str, ...] | None:
        """The queue's kind names, or None for a table alone (its kinds are unknown)."""
        return None if self.jobs is None else tuple(kind.name for kind in self.jobs.kinds)

    async def _ops(self) -> Operator:
        """The operator calls: the queue's own, or, for a table alone, an operator over its
        store on the database's clock where it has one."""
        if self._operator is None:
            if self.jobs is not None:
                self._operator = self.jobs._operator
            else:
                self._operator = Operator(self.store)
                await self._operator.clock.follow(self.store.now_us)
        return self._operator

    async def stats(self) -> Stats:
        """The counts by state."""
        return await self.store.stats()

    async def paused(self) -> dict[str, int]:
        """The paused kinds, each with when it was paused (µs)."""
        return await self.store.paused()

    async def dead_ones(self, limit: int) -> list[Dead]:
        """The dead rows, newest first."""
        return await (await self._ops()).dead_ones(limit)

    async def row(self, row_id: int) -> Row | None:
        """Row `row_id`'s whole story, or None."""
        return await (await self._ops()).row(row_id)

    async def find(self, where: Where, after: str | None, limit: int) -> Found:
        """A page of the rows that match `where`."""
        return await (await self._ops()).find(where, after, limit)

    async def count(self, where: Where) -> int:
        """How many rows match `where`."""
        return await (await self._ops()).count(where)

    async def act(self, verb: str, rows: Sequence[int] | Where) -> int:
        """`retry_many`, `cancel_many` or `delete_many` (by `verb`); how many rows changed."""
        ops = await self._ops()
        acts = {"retry": ops.retry_many, "cancel": ops.cancel_many, "delete": ops.delete_many}
        return await acts[verb](rows, None)

    async def pause(self, kind: str) -> bool:
        """Pause `kind`; False when it was paused already."""
        if self.jobs is not None:
            return await self.jobs.pause(kind)
        _check_name(kind)
        theirs = await self.store.now_us()
        return await self.store.pause(kind, now_us() if theirs is None else theirs)

    async def resume(self, kind: str) -> bool:
        """Resume `kind`; False when it was not paused."""
        if self.jobs is not None:
            return await self.jobs.resume(kind)
        _check_name(kind)
        return await self.store.resume(kind)

    async def kinds_in_table(self) -> set[str]:
        """The kinds that have rows in the table, of any state."""
        return {kind for kind, _state in await self.store.counts()}


def _check_name(kind: str) -> None:
    problem = name_problem(kind)
    if problem is not None or not kind:
        raise Refusal(f"{kind!r} cannot be a kind's name: {problem or 'it is empty'}")


def open_target(target: str) -> Target:
    """The queue or table that TARGET names: a database URL (with `://`) or `module:attr`.

    Nothing is opened yet: a SQLite file that does not exist is said by the first call (only
    `migrate` creates it), however the queue was named.

    Args:
        target: `sqlite:///app.db`, `postgresql://user@host/db`, `mariadb://user@host:3306/db`
            (`mysql://…`), or `module:attr`.

    Raises:
        click.ClickException: the URL is not a database nilo-job can use, or `module:attr` does
            not name a queue (see `load`).
    """
    if "://" not in target:
        jobs = load(target)
        return Target(jobs.store, jobs)
    try:
        return Target(Table(target), None)
    except Refusal as refusal:
        raise click.ClickException(str(refusal)) from None


def run_on(target: Target, work: Callable[[Target], Awaitable[T]], *, check: bool = True) -> T:
    """`work(target)` on an event loop of its own, the table checked first, the store closed
    after.

    Raises:
        click.ClickException: the store cannot be reached, the table is missing or not
            nilo-job's (`JobError`), a call was refused (`Refusal`), or the database refused a
            statement (a read-only server, a privilege the user lacks, a trigger), with the
            sentence.
    """

    async def run() -> T:
        try:
            if check:
                await target.store.check()
            return await work(target)
        finally:
            await target.store.close()

    try:
        return asyncio.run(run())
    except (JobError, Refusal) as error:
        raise click.ClickException(str(error)) from None
    except driver_errors() as error:
        raise click.ClickException(f"the database refused the command: {said(error)}") from None


def driver_errors() -> tuple[type[Exception], ...]:
    """The base classes of the errors the database drivers loaded in this process raise for a
    statement the server refused (the stores raise those as the driver's own)."""
    found: list[type[Exception]] = [sqlite3.Error]
    for module, name in (("psycopg", "Error"), ("asyncmy.errors", "MySQLError")):
        loaded = sys.modules.get(module)
        if loaded is not None:
            found.append(getattr(loaded, name))
    return tuple(found)


def said(error: Exception) -> str:
    """What the server said in `error`, on one line: a MySQL error's text without its number
    (`(1644, 'text')`), or the first line of the driver's message (PostgreSQL adds its context on
    the lines after)."""
    if len(error.args) == 2 and isinstance(error.args[0], int):
        return str(error.args[1])
    return str(error).strip().split("\n", 1)[0]
