"""serve while the ends of its runs cannot be written, on SQLite, PostgreSQL and MariaDB: a
process whose ends fail holds at most two rows per worker whose ends are not written, says so in
one WARNING (with the rows it holds as it says it, and its bound), runs every row once the ends
are written again, and says at its stop which rows it left to their leases. On every store (a
`finish` that fails on demand): the WARNING counts the rows taken before ends failed, while the
bound followed the last second's writes of ends; and the records of the ends name their lines.

The ends are blocked the ways a user meets: the history table renamed away (SQLite; each end is
then tried again through the lease), a transaction or a session holding the history table locked
(PostgreSQL, MariaDB; each end waits for the store's answer_ms, then is tried again), and a
trigger that refuses every row the history gets (SQLite, PostgreSQL, MariaDB; each end fails at
once, and its row is left to its lease). Every wait is for a condition, polled with a bound;
nothing sleeps to wait for time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import inspect
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import nilo_job as job
from nilo_job._worker import ends
from nilo_job._worker import feed as feed_module
from nilo_job.store.contract import Claimed, End, Store
from tests.helpers.mariadb import connect
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
    "mariadb-locked": ("LOCK TABLES nilo_jobs_done WRITE", "UNLOCK TABLES"),
    "mariadb-refused": (
        "CREATE TRIGGER nilo_test_refuse BEFORE INSERT ON nilo_jobs_done FOR EACH ROW "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the test refuses history'",
        "DROP TRIGGER nilo_test_refuse",
    ),
}
LOCKED = [way for way in _WAYS if way.endswith("locked")]
"""The ways whose first end waits for the store's answer_ms: serve is at rest when it fails."""


class _Side:
    """A PyMySQL connection in autocommit whose `execute` answers its cursor, as sqlite3's and
    psycopg's do."""

    def __init__(self, url: str) -> None:
        self.conn = connect(url)

    def execute(self, statement: str) -> Any:
        cursor = self.conn.cursor()
        cursor.execute(statement)
        return cursor

    def close(self) -> None:
        self.conn.close()


@dataclasses.dataclass
class Blocked:
    """A store, and a connection of the test's own to its database (`side`) on which `block()`
    makes its ends fail and `lift()` lets them through again. `tried_again`: whether each end
    is then tried again through its lease (else it fails at once, and its row is left to its
    lease). `lease_ms`: the lease serve is given, which outlasts the test when ends are tried
    again, and which the test waits for when they are not. `reader`: the connection `running()`
    reads on (`side`, unless a lock held on `side` keeps it from reading other tables)."""

    store: Store
    side: Any
    way: str
    tried_again: bool
    lease_ms: int
    reader: Any = None

    def block(self) -> None:
        self.side.execute(_WAYS[self.way][0])

    def lift(self) -> None:
        self.side.execute(_WAYS[self.way][1])

    def running(self) -> int:
        """How many of the table's rows are `running`, read on a connection of its own."""
        reader = self.side if self.reader is None else self.reader
        found = reader.execute("SELECT count(*) FROM nilo_jobs WHERE state = 'running'")
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
    if way.startswith("mariadb"):
        url = request.getfixturevalue("mariadb_url")
        # A call the server has not answered within a second fails: locked ends fail soon.
        table = job.Table(url, answer_ms=1_000)
        # (A session holding LOCK TABLES reads no other table: `running()` reads on another.)
        with contextlib.closing(_Side(url)) as side, contextlib.closing(_Side(url)) as reader:
            try:
                yield Blocked(table, side, way, tried_again, lease_ms, reader)
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


def _records(
    caplog: pytest.LogCaptureFixture, level: int, where: str = ""
) -> list[logging.LogRecord]:
    """The records nilo-job logged at `level` (from its module `where`, when given)."""
    return [
        r
        for r in caplog.records
        if r.name == "nilo_job" and r.levelno == level and r.filename.startswith(where)
    ]


def _nilo(caplog: pytest.LogCaptureFixture, level: int, where: str = "") -> list[str]:
    """The messages nilo-job logged at `level` (from its module `where`, when given)."""
    return [r.getMessage() for r in _records(caplog, level, where)]


class _Counting(logging.Filter):
    """On the nilo_job logger, while serve of `jobs` runs: gives each record `held_then`, how
    many rows serve holds whose ends are not written as the record is logged (started and not
    ended, claimed and waiting, or whose ends could not be written), counted here from serve's
    feed."""

    jobs: job.Jobs | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        feed = None if self.jobs is None else self.jobs._parts.wakeups.feed
        if feed is not None:
            waiting = feed.waiting_ids()
            record.held_then = len({*feed.tasks.values(), *waiting, *feed.bound.unwritten})
        return True


@pytest.fixture
def counting() -> Iterator[_Counting]:
    """A `_Counting` on the nilo_job logger for the test (its `jobs` to set)."""
    counter = _Counting()
    logger = logging.getLogger("nilo_job")
    logger.addFilter(counter)
    try:
        yield counter
    finally:
        logger.removeFilter(counter)


def _ends_fail(record: logging.LogRecord, again: str, held: int, bound: int) -> str:
    """The WARNING that ends fail, as `record` should say it: its error's name and first line
    (the store's own words, read back from the record, which name a path or a server), the row
    whose end failed first, what becomes of its end (`again`), the rows held, and the bound."""
    message = record.getMessage()
    head = f"writing ends failed with {record.error}: "  # type: ignore[attr-defined]
    tail = (
        f" (the end of quick row {record.row}). Until an end is written again, the rows whose "  # type: ignore[attr-defined]
        f"ends are not written stay running under their leases: {again}, and a row whose end "
        "is never written runs again once its lease runs out. This process holds "
        f"{held} rows whose ends are not written now, and takes no new row while it holds "
        f"{bound} or more"
    )
    said = message.removeprefix(head).removesuffix(tail) if message.endswith(tail) else ""
    assert said, message
    assert "\n" not in said
    return head + said + tail


def _again(blocked: Blocked) -> str:
    """What becomes of an end that failed, as the WARNING says it, for `blocked`'s way."""
    if blocked.tried_again:
        return "each end is tried again (this one in 0.05 s)"
    return "an end the store refuses is not tried again"


async def _served_blocked(
    blocked: Blocked, caplog: pytest.LogCaptureFixture, jobs: job.Jobs | None = None
) -> tuple[job.Jobs, asyncio.Task[None]]:
    """serve (of `jobs`, or of a queue of its own) started with `WORKERS` workers, the ends
    blocked, `ROWS` rows pushed, once serve holds its bound and has said that ends fail: the
    queue and serve's task."""
    _ran.clear()
    caplog.set_level(logging.INFO, logger="nilo_job")
    jobs = jobs or _jobs(blocked)
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
    blocked: Blocked, caplog: pytest.LogCaptureFixture, counting: _Counting
) -> None:
    """The ends of serve's runs cannot be written: it runs and holds `BOUND` rows (two per
    worker), claims no more and hands no push to its idle workers, and says so in one WARNING,
    which counts the rows it holds as it says it (those it took before the first end failed:
    `BOUND` once the first end waited for the store's answer) and names the bound. Once the
    ends go through again, every row ends done exactly once: a row whose end was tried again
    through its lease runs once; one whose end failed is left to its lease and runs again after
    it."""
    claimed = _counting_claims(blocked.store)
    counting.jobs = _jobs(blocked)
    jobs, serving = await _served_blocked(blocked, caplog, counting.jobs)
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
        # One WARNING for every end that failed, and no line for each row: it counts the rows
        # held as it was logged (the first end failed at once, or once serve held its bound).
        (warning,) = _records(caplog, logging.WARNING, "ends.py")
        held: int = warning.held_then  # type: ignore[attr-defined]
        assert held == BOUND if blocked.way in LOCKED else 1 <= held <= BOUND
        assert warning.getMessage() == _ends_fail(warning, _again(blocked), held, BOUND)
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


@dataclasses.dataclass
class _Gate:
    """A store's `finish` that fails on demand: while `closed`, a write waits until `opened` is
    set, then fails as a store that did not answer in time (the first write waits as for the
    store's answer_ms, each one after it fails at once)."""

    real: Any
    closed: bool = False
    opened: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    async def finish(self, ends: Sequence[End]) -> list[bool]:
        if self.closed:
            await self.opened.wait()
            raise job.StoreUnavailable("the store did not answer a finish within 1 s")
        return list(await self.real(ends))


def _names_its_line(record: logging.LogRecord) -> bool:
    """Whether `record`, logged from the ends' module, names a line (not 0) of the function it
    names."""
    function = getattr(ends.Ends, record.funcName, None) or getattr(ends, record.funcName)
    lines, first = inspect.getsourcelines(function)
    return record.pathname == ends.__file__ and first <= record.lineno < first + len(lines)


async def _one_end_written(jobs: job.Jobs) -> None:
    """Run one row under serve, until its end is written: serve's largest recent write of ends
    took one end, which its bound follows (eight rows more)."""
    await until_idle(jobs)
    await jobs.push(Quick(-1))
    feed = jobs._parts.wakeups.feed
    assert feed is not None
    await until("the first end to be written", lambda: feed.bound.wrote == 1 and not feed.tasks)


async def test_the_warning_counts_the_rows_taken_while_the_bound_followed_the_writes_of_ends(
    store: Store,
    caplog: pytest.LogCaptureFixture,
    counting: _Counting,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A write of one end came back within the last second: serve's bound is two rows per worker
    plus eight for that end, 12, and it holds 12 rows when its next write of ends fails (its
    store did not answer in time). The bound is then two rows per worker, 4: the WARNING says
    the 12 rows held and the bound of 4 it takes no new row under, not the bound alone; serve
    takes none until the ends are written again, then runs every row."""
    monkeypatch.setattr(feed_module, "RECENT_S", 600.0)  # the first write stays recent
    _ran.clear()
    caplog.set_level(logging.INFO, logger="nilo_job")
    gate = _Gate(store.finish)
    store.finish = gate.finish  # type: ignore[method-assign]
    jobs = counting.jobs = job.Jobs(
        kinds=[Quick], store=store, workers=WORKERS, poll_ms=600_000, timeout_ms=29_000
    )
    serving = asyncio.create_task(jobs.serve(grace_ms=60_000))
    try:
        await _one_end_written(jobs)
        feed = jobs._parts.wakeups.feed
        assert feed is not None
        gate.closed = True
        await jobs.push_many([Quick(n) for n in range(ROWS)])
        await until("serve to hold 12 rows", lambda: _at_rest(jobs) and len(feed.tasks) == 12)
        assert await jobs.count(job.Where(state="running")) == 12
        assert _nilo(caplog, logging.WARNING) == []

        gate.opened.set()  # the write waiting fails: the store did not answer in time
        await until("the WARNING", lambda: bool(_records(caplog, logging.WARNING, "ends.py")))
        (warning,) = _records(caplog, logging.WARNING, "ends.py")
        assert warning.held_then == 12  # type: ignore[attr-defined]
        assert warning.getMessage() == (
            "writing ends failed with StoreUnavailable: the store did not answer a finish within "
            f"1 s (the end of quick row {warning.row}). Until an end is written again, the rows "  # type: ignore[attr-defined]
            "whose ends are not written stay running under their leases: each end is tried "
            "again (this one in 0.05 s), and a row whose end is never written runs again once "
            "its lease runs out. This process holds 12 rows whose ends are not written now, and "
            "takes no new row while it holds 4 or more"
        )
        await jobs.push(Quick(ROWS))  # not handed to the idle workers: serve holds 12
        for _ in range(50):
            await asyncio.sleep(0)
        assert _at_rest(jobs)
        assert len(_ran) == 1 + 12
        assert await jobs.count(job.Where(state="running")) == 12

        gate.closed = False
        await until("every row to run", lambda: len(_ran) == ROWS + 2, seconds=30)
        await until("every end to be written", lambda: not feed.tasks)
        assert await jobs.count(job.Where(state="done")) == ROWS + 2
        assert sorted(_ran) == list(range(-1, ROWS + 1))
        (again,) = _nilo(caplog, logging.INFO, "ends.py")
        assert again.startswith("ends are written again, after ")
        said = [warning, *_records(caplog, logging.INFO, "ends.py")]
        assert [r.funcName for r in said] == ["_failed", "_wrote"]
        assert all(_names_its_line(r) for r in said)
    finally:
        gate.closed = False
        gate.opened.set()
        await _stop(serving, jobs)


@pytest.mark.parametrize("blocked", LOCKED, indirect=True)
async def test_a_lock_after_a_busy_second_is_said_with_the_rows_taken_before_it(
    blocked: Blocked,
    caplog: pytest.LogCaptureFixture,
    counting: _Counting,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The history table is locked a moment after an end was written: serve has taken 12 rows
    (two per worker, plus eight for the end written) by the time its first end, waiting on the
    lock, fails for want of an answer within answer_ms. Its WARNING says the 12 rows it holds,
    and the bound of 4 it takes no new row under."""
    monkeypatch.setattr(feed_module, "RECENT_S", 600.0)  # the first write stays recent
    _ran.clear()
    caplog.set_level(logging.INFO, logger="nilo_job")
    jobs = counting.jobs = _jobs(blocked)
    serving = asyncio.create_task(jobs.serve(grace_ms=60_000))
    try:
        await _one_end_written(jobs)
        feed = jobs._parts.wakeups.feed
        assert feed is not None
        blocked.block()
        await jobs.push_many([Quick(n) for n in range(ROWS)])
        await until("serve to hold 12 rows", lambda: _at_rest(jobs) and len(feed.tasks) == 12)
        assert blocked.running() == 12
        await until("the WARNING", lambda: bool(_records(caplog, logging.WARNING, "ends.py")))
        (warning,) = _records(caplog, logging.WARNING, "ends.py")
        assert warning.held_then == 12  # type: ignore[attr-defined]
        assert warning.getMessage() == _ends_fail(warning, _again(blocked), 12, BOUND)
        assert blocked.running() == 12

        blocked.lift()
        await until("every row to run", lambda: len(_ran) == ROWS + 1, seconds=30)
        await until("every end to be written", lambda: not feed.tasks)
        assert await jobs.count(job.Where(state="done")) == ROWS + 1
    finally:
        await _stop(serving, jobs)


@dataclasses.dataclass
class Failing:
    nilo_job = "failing"
    retry = job.Retry(times=1)

    def run(self) -> None:
        raise ValueError("no such address")


async def test_the_records_of_failed_attempts_name_their_lines(
    store: Store, caplog: pytest.LogCaptureFixture, t: int
) -> None:
    """A failed attempt's record (its traceback the row's, as the row keeps it) names the line
    that logs it and its function, as any record does: not line 0."""
    caplog.set_level(logging.INFO, logger="nilo_job")
    jobs = job.Jobs(kinds=[Failing], store=store)
    await jobs.push(Failing(), at=t)
    assert await jobs.drain_at(t) == 2  # (its retry is due at once)
    source = Path(ends.__file__).read_text().splitlines()
    calls = [n for n, line in enumerate(source, 1) if line.strip() == "_log_failure("]
    assert len(calls) == 2  # the retry's WARNING, the death's ERROR
    said = [r for r in caplog.records if r.name == "nilo_job" and r.filename == "ends.py"]
    shown = logging.Formatter("%(levelname)s %(filename)s:%(lineno)d %(funcName)s")
    assert [shown.format(r).split("\n")[0] for r in said] == [
        f"WARNING ends.py:{calls[0]} tell",
        f"ERROR ends.py:{calls[1]} tell",
    ]
    assert all(r.lineno > 0 and _names_its_line(r) for r in said)
    assert [r.exc_text for r in said] == [
        "Traceback (most recent call last):\n"
        f'  File "{__file__}", line {Failing.run.__code__.co_firstlineno + 1}, in run\n'
        '    raise ValueError("no such address")\n'
        "ValueError: no such address"
    ] * 2
