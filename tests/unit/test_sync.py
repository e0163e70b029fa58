"""`jobs.sync`: producers that do not run asyncio push, cancel and read stats."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import nilo_job as job

ran: list[int] = []


@dataclasses.dataclass
class Note:
    nilo_job = "note"
    retry = job.Retry.NONE

    n: int

    def run(self) -> None:
        ran.append(self.n)


def test_a_sync_caller_pushes_cancels_and_reads_stats_without_asyncio(tmp_path: Path) -> None:
    ran.clear()
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    jobs = job.Jobs(kinds=[Note], store=table)
    with contextlib.closing(sqlite3.connect(tmp_path / "q.db")) as conn, conn:
        conn.executescript(table.ddl)  # type: ignore[attr-defined]
    first = jobs.sync.push(Note(1))
    second = jobs.sync.push(Note(2), unique="two")
    assert jobs.sync.push(Note(2), unique="two") is None
    assert jobs.sync.stats() == (2, 0, 0)
    assert second is not None
    assert jobs.sync.cancel(second) is True
    assert jobs.sync.cancel(second) is False
    assert jobs.sync.drain() == 1
    assert ran == [1]
    assert first is not None
    assert jobs.sync.stats() == (0, 0, 0)
    jobs.sync.close()  # the store's connections, closed


def test_sync_push_in_writes_through_the_callers_connection_in_its_transaction(
    tmp_path: Path,
) -> None:
    ran.clear()
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    jobs = job.Jobs(kinds=[Note], store=table)
    conn = sqlite3.connect(tmp_path / "q.db")
    conn.executescript(table.ddl)  # type: ignore[attr-defined]
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO users (id) VALUES (1)")
    assert jobs.sync.push_in(conn, Note(1)) is not None
    conn.rollback()
    assert jobs.sync.stats() == (0, 0, 0)
    conn.execute("INSERT INTO users (id) VALUES (2)")
    jobs.sync.push_in(conn, Note(2))
    conn.commit()
    conn.close()
    assert jobs.sync.drain() == 1
    assert ran == [2]
    jobs.sync.close()


def test_the_operator_calls_block_too(tmp_path: Path) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/ops.db")
    jobs = job.Jobs(kinds=[Note], store=table)
    with contextlib.closing(sqlite3.connect(tmp_path / "ops.db")) as conn, conn:
        conn.executescript(table.ddl)  # type: ignore[attr-defined]
    try:
        jobs.sync.push(Note(1))
        assert jobs.sync.pause("note") is True
        assert jobs.sync.paused().keys() == {"note"}
        assert jobs.sync.drain() == 0
        assert jobs.sync.resume("note") is True
        assert jobs.sync.drain() == 1
        (row,) = jobs.sync.find(job.Where(state="done")).rows
        done = jobs.sync.count(job.Where(state="done"))
        assert (row.kind, row.state, done) == ("note", "done", 1)
        whole = jobs.sync.row(row.id)
        assert whole is not None
        assert [a.outcome for a in whole.attempts_log] == ["done"]  # read by `row` alone
        assert dataclasses.replace(whole, attempts_log=()) == row
        assert jobs.sync.delete_many([row.id]) == 1
        assert jobs.sync.retry_many(job.Where(state="dead")) == 0
        assert jobs.sync.cancel_many(job.Where(state="queued")) == 0
        assert [flow.kind for flow in jobs.sync.flow(minutes=5)] == ["note"]
    finally:
        jobs.sync.close()


async def test_sync_inside_an_event_loop_is_refused_with_the_async_form_of_that_call() -> None:
    jobs = job.Jobs(kinds=[Note], store=job.Memory())
    with pytest.raises(
        job.Refusal, match=r"jobs\.sync\.stats blocks.*\(await jobs\.stats\(\.\.\.\)\)"
    ):
        jobs.sync.stats()


async def create_missing(url: str) -> None:
    table = job.Table(url)
    await table.create_missing()
    await table.close()


SCRIPT = """
import dataclasses
import sys

import nilo_job as job


@dataclasses.dataclass
class Note:
    nilo_job = "note"
    retry = job.Retry.NONE

    n: int

    def run(self) -> None:
        pass


jobs = job.Jobs(store=job.Table(sys.argv[1]), kinds=[Note])
jobs.sync.push(Note(1))
if sys.argv[2] == "fails":
    jobs.sync.push({"n": 2})  # refused: the script ends with that error alone
print(jobs.sync.stats())
"""


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
@pytest.mark.parametrize("ends", ["ok", "fails"])
def test_a_script_that_never_closes_exits_silently(
    kind: str, ends: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "postgres":
        url = request.getfixturevalue("pg_url")
    else:
        url = f"sqlite:///{tmp_path}/q.db"
        asyncio.run(create_missing(url))
    (tmp_path / "script.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "script.py", url, ends],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if ends == "ok":
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout == "Stats(queued=1, running=0, dead=0, done=0)\n"
    else:
        assert done.returncode == 1
        assert "Task was destroyed" not in done.stderr
        assert done.stderr.rstrip().splitlines()[-1].startswith("nilo_job.Refusal: ")
