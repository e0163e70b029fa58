"""Regressions from trying to break the queue: runaway threads, runs that raise what is not an
Exception, a run's own CancelledError, values that change type through JSON, odd ids, forks."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import nilo_job as job
from nilo_job._base.clock import datetime_to_us

release = threading.Event()
started: list[int] = []


@dataclasses.dataclass
class Stuck:
    """A sync run that outlives its timeout on its first attempt (a call with no timeout)."""

    nilo_job = "stuck"
    retry = job.Retry(times=2)
    timeout_ms = 100

    def run(self, tick: job.Tick) -> None:
        started.append(tick.attempts)
        if tick.attempts == 1:
            release.wait(timeout=30)


class Ends:
    """An observer that lets a test wait for ends."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[str, str | None]] = []
        self.changed = asyncio.Event()

    def pushing(self, kind: str) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def pushed(self, kind: str, row_id: int | None) -> None:
        pass

    def claimed(self, rows: object, now_us: int, seconds: float) -> None:
        pass

    def running(self, kind: str, tick: job.Tick) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def ended(self, kind: str, outcome: str, error: str | None, seconds: float) -> None:
        self.outcomes.append((outcome, error))
        self.changed.set()

    async def until(self, count: int) -> None:
        while len(self.outcomes) < count:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 30)


async def test_a_runaway_thread_neither_blocks_the_loop_nor_overlaps_its_retry() -> None:
    release.clear()
    started.clear()
    jobs = job.Jobs(kinds=[Stuck], store=job.Memory(), poll_ms=10, workers=2)
    ends = Ends()
    jobs.observe(ends)
    row = await jobs.push(Stuck())
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats
        while True:
            beats += 1
            await asyncio.sleep(0.005)

    beating = asyncio.create_task(heartbeat())
    async with jobs.serving():
        await ends.until(1)
        assert ends.outcomes[0] == ("retrying", "TimedOut")
        # The retry is due now, but the first attempt's thread still runs: it must not start,
        # and the loop must go on.
        before = beats
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert beats > before
        assert started == [1]
        release.set()
        await ends.until(2)
    beating.cancel()
    assert started == [1, 2]
    assert ends.outcomes == [("retrying", "TimedOut"), ("done", None)]
    assert await jobs.stats() == (0, 0, 0)
    assert row is not None


@dataclasses.dataclass
class Raises:
    nilo_job = "raises"
    retry = job.Retry(times=2)

    what: str

    async def run(self) -> None:
        if self.what == "cancelled":
            raise asyncio.CancelledError
        if self.what == "exit":
            raise SystemExit(3)
        if self.what == "ctrl-c":
            raise KeyboardInterrupt


@dataclasses.dataclass
class RaisesInThread:
    nilo_job = "raises-in-thread"
    retry = job.Retry.NONE

    what: str

    def run(self) -> None:
        if self.what == "exit":
            raise SystemExit(3)
        raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("what", "error"), [("cancelled", "CancelledError"), ("exit", "SystemExit")]
)
async def test_a_run_raising_what_is_not_an_exception_fails_its_attempts_and_dies(
    store: job.Store, t: int, what: str, error: str
) -> None:
    jobs = job.Jobs(kinds=[Raises], store=store)
    await jobs.push(Raises(what), at=t)
    assert await jobs.drain_at(t) == 3
    (dead,) = await jobs.dead_ones()
    assert (dead.error, dead.attempts) == (error, 3)


async def test_an_async_run_raising_keyboard_interrupt_records_its_attempt_then_stops(
    store: job.Store, t: int
) -> None:
    """A KeyboardInterrupt out of an async run (its own, or a second Ctrl-C) stops the caller,
    after its attempt is written: a run raising it every time dies by its retries."""
    jobs = job.Jobs(kinds=[Raises], store=store)
    await jobs.push(Raises("ctrl-c"), at=t)
    for attempt in (1, 2, 3):
        with pytest.raises(KeyboardInterrupt):
            await jobs.drain_at(t)
        assert (await jobs.stats()).running == 0, f"attempt {attempt} left its row running"
    (dead,) = await jobs.dead_ones()
    assert (dead.error, dead.attempts) == ("KeyboardInterrupt", 3)
    assert await jobs.drain_at(t) == 0


@pytest.mark.parametrize(
    ("what", "error"), [("exit", "SystemExit"), ("ctrl-c", "KeyboardInterrupt")]
)
async def test_a_sync_run_raising_system_exit_or_keyboard_interrupt_dies_by_that_name(
    store: job.Store, t: int, what: str, error: str
) -> None:
    jobs = job.Jobs(kinds=[RaisesInThread], store=store)
    await jobs.push(RaisesInThread(what), at=t)
    assert await jobs.drain_at(t) == 1
    (dead,) = await jobs.dead_ones()
    assert dead.error == error
    assert await jobs.stats() == (0, 0, 1)


@dataclasses.dataclass
class Loose:
    nilo_job = "loose"
    retry = job.Retry.NONE

    meta: Any = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def run(self) -> None:
        pass


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (Loose(meta=datetime(2024, 1, 1, tzinfo=UTC)), "Loose.meta would not come back"),
        (Loose(meta=b"\x00"), "bytes b'\\x00' would arrive as str"),
        (Loose(meta={1, 2}), "set {1, 2} would arrive as list [1, 2]"),
        (Loose(meta=(1, 2)), "tuple (1, 2) would arrive as list [1, 2]"),
        (Loose(extra={"when": datetime(2024, 1, 1)}), "Loose.extra would not come back"),
    ],
)
async def test_a_value_that_would_change_type_through_json_is_refused_naming_the_field(
    value: Loose, words: str
) -> None:
    jobs = job.Jobs(kinds=[Loose], store=job.Memory())
    with pytest.raises(job.Refusal) as refused:
        await jobs.push(value)
    assert words in str(refused.value)
    assert await jobs.stats() == (0, 0, 0)
    assert await jobs.push(Loose(meta=[1, "a", {"b": None}])) == 1


async def test_ids_that_cannot_name_a_row(store: job.Store) -> None:
    jobs = job.Jobs(kinds=[Loose], store=store, status=job.MemorySpace(ttl_s=60))
    row = await jobs.push(Loose())
    with pytest.raises(job.Refusal, match=r"cancel\('1'\) is a str, not a number: row_id must"):
        await jobs.cancel(str(row))  # type: ignore[arg-type]
    with pytest.raises(job.Refusal, match="row_id must be an int from 1 to "):
        await jobs.cancel(2**70)
    with pytest.raises(job.Refusal, match=r"retry_dead\(-1\) is below 1"):
        await jobs.retry_dead(-1)
    with pytest.raises(job.Refusal, match=r"status\(0\) is below 1"):
        await jobs.status(0)
    with pytest.raises(job.Refusal, match=r"drain_at\(1.5\) is not a whole number"):
        await jobs.drain_at(1.5)  # type: ignore[arg-type]
    with pytest.raises(job.Refusal, match="past what a store can hold"):
        await jobs.drain_at(2**63 - 1)
    assert await jobs.cancel(row + 1) is False  # an id no row has is no mistake
    assert await jobs.stats() == (1, 0, 0)


async def test_progress_for_a_row_not_running_here_writes_nothing() -> None:
    jobs = job.Jobs(kinds=[Loose], store=job.Memory(), status=job.MemorySpace(ttl_s=60))
    await jobs.progress(12345, 7)
    assert await jobs.status(12345) is None


async def test_ready_is_false_while_the_table_is_missing(tmp_path: Path) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    jobs = job.Jobs(kinds=[Loose], store=table)
    assert await jobs.ready() is False
    await table.create_missing()
    assert await jobs.ready() is True
    await table.close()


def test_the_sync_face_works_in_a_forked_child(tmp_path: Path) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    jobs = job.Jobs(kinds=[Loose], store=table)
    with contextlib.closing(sqlite3.connect(tmp_path / "q.db")) as conn, conn:
        conn.executescript(table.ddl)  # type: ignore[attr-defined]
    assert jobs.sync.stats() == (0, 0, 0)
    pid = os.fork()
    if pid == 0:  # the child: push through the inherited queue, then leave at once
        code = 0
        try:
            code = 0 if jobs.sync.push(Loose()) == 1 else 1
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert jobs.sync.stats() == (1, 0, 0)
    jobs.sync.close()  # the store's connections, closed


def test_a_cron_step_in_a_repeated_dst_hour_fires_on_the_real_clock() -> None:
    """A minute step is an interval, not a time of day: in the hour the autumn change repeats
    it runs in both passes, every real half hour (as Vixie cron runs a wildcard job)."""
    schedule = job.cron("*/30 1 * * *", tz="America/New_York")
    moment = datetime_to_us(datetime(2024, 11, 3, tzinfo=UTC))
    ticks = []
    for _ in range(5):
        moment = schedule.next(moment)
        ticks.append(datetime.fromtimestamp(moment / 1_000_000, tz=UTC))
    # 01:00 and 01:30 EDT, 01:00 and 01:30 EST, then the next day's 01:00 EST.
    assert ticks == [
        datetime(2024, 11, 3, 5, tzinfo=UTC),
        datetime(2024, 11, 3, 5, 30, tzinfo=UTC),
        datetime(2024, 11, 3, 6, tzinfo=UTC),
        datetime(2024, 11, 3, 6, 30, tzinfo=UTC),
        datetime(2024, 11, 4, 6, tzinfo=UTC),
    ]
    inside_second = datetime_to_us(datetime(2024, 11, 3, 6, 10, tzinfo=UTC))  # 01:10 EST
    assert schedule.next(inside_second) == datetime_to_us(datetime(2024, 11, 3, 6, 30, tzinfo=UTC))


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # Every real hour across the change: 01:00 PDT, 01:00 PST, 02:00 PST.
        ("0 * * * *", ["08:00", "09:00", "10:00", "11:00"]),
        ("*/30 * * * *", ["08:00", "08:30", "09:00", "09:30"]),
        # A time of day: once, at its first occurrence, then the next day.
        ("30 1 * * *", ["08:30", "09:30+1", "09:30+2", "09:30+3"]),
    ],
)
def test_an_hourly_cron_runs_every_real_hour_across_the_autumn_change(
    expr: str, expected: list[str]
) -> None:
    schedule = job.cron(expr, tz="America/Los_Angeles")
    moment = datetime_to_us(datetime(2026, 11, 1, 7, 40, tzinfo=UTC))
    seen = []
    for _ in range(4):
        moment = schedule.next(moment)
        tick = datetime.fromtimestamp(moment / 1_000_000, tz=UTC)
        days = (tick.date() - datetime(2026, 11, 1).date()).days
        seen.append(tick.strftime("%H:%M") + (f"+{days}" if days else ""))
    assert seen == expected


async def test_a_sqlite_file_is_created_by_create_missing_alone(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    table = job.Table(f"sqlite:///{path}")
    jobs = job.Jobs(kinds=[Stuck], store=table)
    said = (
        f"there is no SQLite database at {path}: check the path (sqlite:///relative.db, "
        "sqlite:////absolute.db), or create it and its table with `nilo-job migrate "
        f"sqlite:///{path}` (or await table.create_missing())"
    )
    for call in (jobs.stats, table.check, lambda: jobs.push(Stuck()), jobs.dead_ones):
        with pytest.raises(job.StoreUnavailable) as raised:
            await call()
        assert str(raised.value) == said
    assert not path.exists()
    await table.create_missing()
    assert await jobs.push(Stuck()) == 1
    assert await jobs.stats() == (1, 0, 0)
    await table.close()


async def test_a_sqlite_file_and_its_wal_are_made_for_their_user_alone(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    old = os.umask(0o022)  # the usual umask, which would leave them readable by every user
    try:
        table = job.Table(f"sqlite:///{path}")
        jobs = job.Jobs(kinds=[Stuck], store=table)
        await table.create_missing()
        await jobs.push(Stuck())
        modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir() if p.is_file()}
        await table.close()
    finally:
        os.umask(old)
    assert modes["app.db"] == 0o600
    assert modes["app.db-wal"] == 0o600


async def test_a_file_made_beforehand_keeps_its_permissions(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    path.touch()
    path.chmod(0o660)  # shared with a group
    table = job.Table(f"sqlite:///{path}")
    await table.create_missing()
    await table.close()
    assert path.stat().st_mode & 0o777 == 0o660


async def test_a_wake_folder_open_to_every_user_is_left_unused_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "app.db"
    folder = tmp_path / "app.db.wake"
    folder.mkdir()
    folder.chmod(0o777)
    table = job.Table(f"sqlite:///{path}")
    await table.create_missing()
    jobs = job.Jobs(kinds=[Stuck], store=table)
    with caplog.at_level(logging.WARNING, logger="nilo_job"):
        async with jobs.serving():
            await asyncio.sleep(0)  # serve starts its listener
            for _ in range(100):
                if caplog.records:
                    break
                await asyncio.sleep(0.01)  # a poll for the log line, bounded
    await table.close()
    assert [r.getMessage() for r in caplog.records] == [
        f"no wake-ups between processes: the folder {folder} is open to every local user (mode "
        "0777), so another local user could remove or replace its sockets; it is left unused, "
        "and rows pushed elsewhere start at the poll. Remove it (nilo-job makes it again, for "
        "this user alone) or `chmod o-rwx` it"
    ]
    assert list(folder.iterdir()) == []
