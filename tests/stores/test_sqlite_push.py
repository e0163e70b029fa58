"""A single SQLite push is written on the caller's thread when that costs no wait, and in the
store's thread otherwise: behind another connection's write lock the event loop keeps turning,
pushes from several threads at once each get their row, a slow disk sends pushes to the thread,
and the push keeps the store's `synchronous`."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.store.sqlite import connections as _sqlite_connections


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str = ""

    async def run(self) -> None:
        return None


@pytest.fixture
async def file_table(tmp_path: Path) -> AsyncIterator[job.Table]:
    table = job.Table(f"sqlite:///{tmp_path}/q.db", busy_timeout_ms=30_000)
    await table.create_missing()
    try:
        yield table
    finally:
        await table.close()


async def test_a_push_behind_another_connections_write_lock_never_stops_the_loop(
    file_table: job.Table, tmp_path: Path
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=file_table)
    await jobs.push(Mail("first"))  # the store's connections are open
    other = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # holds the write lock
    try:
        push = asyncio.create_task(jobs.push(Mail("behind the lock")))
        began = time.monotonic()
        for _ in range(50):
            await asyncio.sleep(0)
        # A push waiting on the lock in this thread would hold the loop for the busy timeout
        # (30 s): fifty turns of the loop came long before that, and the push is still waiting.
        assert time.monotonic() - began < 10
        assert not push.done()
    finally:
        other.execute("COMMIT")
        other.close()
    row_id = await asyncio.wait_for(push, 10)
    assert isinstance(row_id, int)
    assert (await jobs.stats()).queued == 2


async def test_pushes_from_threads_and_the_loop_at_once_each_get_their_own_row(
    file_table: job.Table,
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=file_table)
    from_threads: list[int | None] = []
    lock = threading.Lock()

    def push_from_a_thread(t: int) -> None:
        for n in range(40):
            row_id = jobs.sync.push(Mail(f"thread{t}-{n}"))
            with lock:
                from_threads.append(row_id)

    threads = [threading.Thread(target=push_from_a_thread, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    from_loop = [await jobs.push(Mail(f"loop-{n}")) for n in range(40)]
    await asyncio.to_thread(lambda: [thread.join(30) for thread in threads])
    ids = from_loop + from_threads
    assert len(ids) == 200
    assert None not in ids
    assert len(set(ids)) == 200
    assert (await jobs.stats()).queued == 200


async def test_a_slow_disk_sends_the_next_pushes_to_the_stores_thread(
    file_table: job.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=file_table)
    ticks = iter(range(0, 10**9, 5))  # every write here seems to take 5 ms, from the first
    this_thread = threading.get_ident()

    def clock() -> float:
        # The test's own writes read the ticks; a thread some other test left running reads a
        # clock that stands still, and so takes no tick from them.
        return next(ticks) / 1_000 if threading.get_ident() == this_thread else 0.0

    monkeypatch.setattr(_sqlite_connections, "_clock", clock)
    connections = file_table._db
    went: list[str] = []  # where each push was written: "here" or "thread"
    here, call = connections.here, connections.call

    def counted_here(fn):  # type: ignore[no-untyped-def]
        answer = here(fn)
        if answer is not None:
            went.append("here")
        return answer

    async def counted(fn, *, work=False):  # type: ignore[no-untyped-def]
        went.append("thread")
        return await call(fn, work=work)

    monkeypatch.setattr(connections, "here", counted_here)
    monkeypatch.setattr(connections, "call", counted)
    ids = [await jobs.push(Mail(f"{n}")) for n in range(21)]
    assert None not in ids
    assert len(set(ids)) == 21
    # 5 ms a write: the moving average (over about 16) passes 2 ms at the 8th write here, and
    # every push after it goes to the store's thread. (A write here that meets a lock gives up
    # and goes to the thread too, as does the store's opening, so only the order is certain,
    # not the place of the 8th.)
    assert went.count("here") == 8
    last_here = len(went) - 1 - went[::-1].index("here")
    assert set(went[last_here + 1 :]) == {"thread"}
    assert (await jobs.stats()).queued == 21


@pytest.mark.parametrize(("synchronous", "pragma"), [("FULL", 2), ("NORMAL", 1), ("EXTRA", 3)])
async def test_a_push_written_on_the_callers_thread_keeps_the_stores_synchronous(
    tmp_path: Path, synchronous: str, pragma: int
) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/q.db", synchronous=synchronous)
    await table.create_missing()
    try:
        jobs = job.Jobs(kinds=[Mail], store=table)
        await jobs.push(Mail("one"))
        await jobs.push(Mail("two"))
        here = table._db._here_conn
        assert here is not None  # the second push was written here
        assert here.execute("PRAGMA synchronous").fetchone()[0] == pragma
    finally:
        await table.close()
