"""serve while the ends of its runs cannot be written, on SQLite and PostgreSQL: a process whose
ends fail holds at most two rows per worker whose ends are not written, says so in one WARNING,
runs every row once the ends are written again, and says at its stop which rows it left to
their leases.

The ends are blocked the ways a user meets: the history table renamed away (SQLite; each end is
then tried again through the lease), a transaction holding the history table locked
(PostgreSQL; each end waits, then is tried again), and a trigger that refuses every row the
history gets (both: each end fails at once, and its row is left to its lease). Every wait is
for a condition, polled with a bound; nothing sleeps to wait for time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import nilo_job as job
from nilo_job.store.contract import Claimed, Store
from tests.helpers.serving import until, until_idle

ROWS = 50
WORKERS = 2
BOUND = 2 * WORKERS  # the rows a process holds whose ends are not written, at most

_ran: list[int] = []


@dataclasses.dataclass
class Quick:
    nilo_job = "quick"
    retry = job.Retry.NONE

    n: int = 0

    async def run(self) -> None:
        _ran.append(self.n)


_REFUSE = "SELECT RAISE(ABORT, 'the test refuses history')"
_PG_REFUSE = (
    "CREATE FUNCTION nilo_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'the test refuses history'; END $$"
)
_WAYS = {  # what blocks the ends, and what lifts the block
    "sqlite-renamed": (
        "ALTER TABLE nilo_jobs_done RENAME TO nilo_jobs_done_away",
        "ALTER TABLE nilo_jobs_done_away RENAME TO nilo_jobs_done",
    ),
    "sqlite-refused": (
        f"CREATE TRIGGER nilo_test_refuse BEFORE INSERT ON nilo_jobs_done BEGIN {_REFUSE}; END",
        "DROP TRIGGER nilo_test_refuse",
    ),
    "postgres-locked": ("LOCK TABLE nilo_jobs_done IN ACCESS EXCLUSIVE MODE", "ROLLBACK"),
    "postgres-refused": (
        "CREATE TRIGGER nilo_test_refuse BEFORE INSERT ON nilo_jobs_done "
        "FOR EACH ROW EXECUTE FUNCTION nilo_test_refuse()",
        "DROP TRIGGER nilo_test_refuse ON nilo_jobs_done",
    ),
}


@dataclasses.dataclass
class Blocked:
    """A store, and a connection of the test's own to its database (`side`) on which `block()`
    makes its ends fail and `lift()` lets them through again. `tried_again`: whether each end
    is then tried again through its lease (else it fails at once, and its row is left to its
    lease). `lease_ms`: the lease serve is given, which outlasts the test when ends are tried
    again, and which the test waits for when they are not."""

    store: Store
    side: Any
    way: str
    tried_again: bool
    lease_ms: int

    def block(self) -> None:
        self.side.execute(_WAYS[self.way][0])

    def lift(self) -> None:
        self.side.execute(_WAYS[self.way][1])

    def running(self) -> int:
        """How many of the table's rows are `running`, read on a connection of its own."""
        found = self.side.execute("SELECT count(*) FROM nilo_jobs WHERE state = 'running'")
        return int(found.fetchone()[0])


@pytest.fixture(params=list(_WAYS))
async def blocked(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Blocked]:
    """A fresh store whose ends can be blocked, each way this module tries."""
    way: str = request.param
    tried_again = not way.endswith("refused")
    lease_ms = 30_000 if tried_again else 1_500
    if way.startswith("sqlite"):
        path = tmp_path / "q.db"
        table = job.Table(f"sqlite:///{path}")
        await table.create_missing()
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as side:
            try:
                yield Blocked(table, side, way, tried_again, lease_ms)
            finally:
                await table.close()
        return
    import psycopg

    url = request.getfixturevalue("pg_url")
    # A call the server has not answered within a second fails: locked ends fail soon.
    table = job.Table(url, answer_ms=1_000)
    # In autocommit but for the lock, which its transaction holds until the test lifts it.
    with psycopg.connect(url, autocommit=not way.endswith("locked")) as side:
        if way.endswith("refused"):
            side.execute(_PG_REFUSE)
        try:
            yield Blocked(table, side, way, tried_again, lease_ms)
        finally:
            await table.close()


def _counting_claims(store: Store) -> list[int]:
    """Every row id `store`'s claims take from now on, in order."""
    taken: list[int] = []
    real = store.claim

    async def claim(*args: Any, **kwargs: Any) -> Sequence[Claimed]:
        rows = await real(*args, **kwargs)
        taken.extend(row.id for row in rows)
        return rows

    store.claim = claim  # type: ignore[method-assign]
    return taken


def _jobs(blocked: Blocked) -> job.Jobs:
    # poll_ms longer than any test: only a wake-up (room back, a push) makes serve claim.
    return job.Jobs(
        kinds=[Quick],
        store=blocked.store,
        workers=WORKERS,
        poll_ms=600_000,
        timeout_ms=blocked.lease_ms - 1_000,  # the lease: the longest timeout plus a second
    )


def _at_rest(jobs: job.Jobs) -> bool:
    """serve holds its bound and both its workers wait: it claims nothing until room comes
    back."""
    feed = jobs._parts.wakeups.feed
    return feed is not None and feed.room() <= 0 and len(feed.idle) == WORKERS


def _nilo(caplog: pytest.LogCaptureFixture, level: int, where: str = "") -> list[str]:
    """The messages nilo-job logged at `level` (from its module `where`, when given)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "nilo_job" and r.levelno == level and r.filename.startswith(where)
    ]


async def _served_blocked(
    blocked: Blocked, caplog: pytest.LogCaptureFixture
) -> tuple[job.Jobs, asyncio.Task[None]]:
    """serve started with `WORKERS` workers, the ends blocked, `ROWS` rows pushed, once serve
    holds its bound and has said that ends fail: the queue and serve's task."""
    _ran.clear()
    caplog.set_level(logging.INFO, logger="nilo_job")
    jobs = _jobs(blocked)
    serving = asyncio.create_task(jobs.serve(grace_ms=60_000))
    await until_idle(jobs)  # (serve checks the table as it starts)
    blocked.block()
    await jobs.push_many([Quick(n) for n in range(ROWS)])
    await until("serve to run rows", lambda: len(_ran) >= BOUND or serving.done())
    await until("serve to hold its bound", lambda: _at_rest(jobs) or serving.done())
    await until(
        "the WARNING that ends fail",
        lambda: any(m.startswith("writing ends failed") for m in _nilo(caplog, logging.WARNING)),
    )
    return jobs, serving


async def _stop(serving: asyncio.Task[None], jobs: job.Jobs, twice: bool = False) -> None:
    """Cancel serve (`twice`: and again once its stop has begun, which ends its grace period at
    once, as a second SIGTERM does), and wait for it to end."""
    serving.cancel()
    if twice:
        await until("the stop to begin", lambda: jobs._server.stopping or serving.done())
        serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        async with asyncio.timeout(20):
            await serving


async def test_a_process_holds_at_most_two_rows_a_worker_while_ends_fail_then_runs_them_all(
    blocked: Blocked, caplog: pytest.LogCaptureFixture
) -> None:
    """The ends of serve's runs cannot be written: it runs and holds `BOUND` rows (two per
    worker), claims no more and hands no push to its idle workers, and says so in one WARNING.
    Once the ends go through again, every row ends done exactly once: a row whose end was
    tried again through its lease runs once; one whose end failed is left to its lease and
    runs again after it."""
    claimed = _counting_claims(blocked.store)
    jobs, serving = await _served_blocked(blocked, caplog)
    try:
        assert not serving.done()
        # Given every chance to claim more: a push for the idle workers, and turns of the loop.
        await jobs.push(Quick(ROWS))
        for _ in range(50):
            await asyncio.sleep(0)
        assert _at_rest(jobs)
        assert len(_ran) == BOUND
        assert sorted(claimed) == sorted(set(claimed))
        assert len(claimed) == BOUND
        assert blocked.running() == BOUND
        assert (await jobs.count(job.Where(state="queued"))) == ROWS + 1 - BOUND
        # One WARNING for every end that failed, and no line for each row.
        (warning,) = _nilo(caplog, logging.WARNING, "ends.py")
        assert warning.startswith("writing ends failed with ")
        assert warning.endswith(
            ". Meanwhile this process takes no new row while it holds 4 rows or more whose ends "
            "are not written"
        )
        assert _nilo(caplog, logging.ERROR) == []
        first = sorted(_ran)

        blocked.lift()
        runs = ROWS + 1 + (0 if blocked.tried_again else BOUND)  # those left to their lease
        await until("every row to run", lambda: len(_ran) >= runs, seconds=30)
        feed = jobs._parts.wakeups.feed
        assert feed is not None
        await until("every end to be written", lambda: not feed.tasks and not feed.bound.unwritten)
        assert await jobs.stats() == (0, 0, 0)
        assert await jobs.count(job.Where(state="done")) == ROWS + 1
        times = collections.Counter(_ran)
        assert sorted(times) == list(range(ROWS + 1))
        again = [] if blocked.tried_again else first
        assert sorted(n for n, ran in times.items() if ran == 2) == again
        assert sorted(n for n, ran in times.items() if ran > 2) == []
        (again_said,) = _nilo(caplog, logging.INFO, "ends.py")
        assert again_said.startswith("ends are written again, after ")
    finally:
        await _stop(serving, jobs)


async def test_the_stop_line_counts_the_rows_whose_ends_could_not_be_written(
    blocked: Blocked, caplog: pytest.LogCaptureFixture
) -> None:
    """serve stops while the ends of the rows it ran cannot be written: its WARNING says their
    ends could not be written (not that runs were cut short), and its last line counts them as
    left to their leases, instead of "no row was running"."""
    jobs, serving = await _served_blocked(blocked, caplog)
    # Ends tried again keep their rows' tasks within the grace: a second cancel ends it.
    await _stop(serving, jobs, twice=blocked.tried_again)
    assert blocked.running() == BOUND
    lines = [r for r in caplog.records if r.name == "nilo_job" and r.levelno >= logging.INFO]
    ids = ", ".join(map(str, range(1, BOUND + 1)))
    assert lines[-1].levelno == logging.INFO
    assert lines[-1].getMessage() == (
        f"stopped: {BOUND} rows whose ends could not be written left to their leases (they run "
        "again once those run out)"
    )
    assert lines[-2].levelno == logging.WARNING
    said = lines[-2].getMessage()
    assert said.startswith(f"stopping: the ends of rows {ids} could not be written (")
    assert said.endswith(
        "): their runs had ended; the rows are left to their leases, and run again once those "
        "run out"
    )
    assert not any("past the grace period" in r.getMessage() for r in lines)
    if blocked.tried_again:  # their ends were being tried again as the stop began
        assert f"stopping: {BOUND} rows whose ends are being written, waiting up to 60000 ms" in [
            r.getMessage() for r in lines
        ]
