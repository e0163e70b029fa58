"""What holds back the cleanup of the queue's tables, with a real transaction held open: on
PostgreSQL a `REPEATABLE READ` transaction left idle (named by `held_back`, said by the serving
process's watch as a WARNING and at INFO once it ends, a metric, a line on the dashboard); on
SQLite a read transaction that keeps checkpoints from completing, and a WAL that shrinks back
to a bound once it ends."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

import nilo_job as job
from nilo_job._worker.holdback import HoldWatch
from nilo_job.dashboard import dashboard_app
from nilo_job.metrics import Metrics
from nilo_job.store.sqlite.connections import WAL_KEPT_BYTES
from tests.helpers.dashboard import client

WHERE = "the test's store"


@dataclass
class Note:
    nilo_job = "note"
    retry = job.Retry.NONE

    text: str

    def run(self) -> None:
        pass


async def test_a_transaction_held_open_on_postgresql_is_named_said_counted_and_shown(
    pg_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = job.Table(pg_url)
    jobs = job.Jobs(kinds=[Note], store=table)
    watch = HoldWatch(table, WHERE, after_s=0.0)
    metrics = Metrics(jobs)
    try:
        await jobs.push(Note("before"))
        assert await table.held_back() is None
        with psycopg.connect(pg_url, application_name="monthly-report") as report:
            report.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            report.execute("SELECT count(*) FROM nilo_jobs;").fetchone()
            pid = report.info.backend_pid
            held = await table.held_back()
            assert held is not None
            assert (held.pid, held.state, held.user, held.application, held.wal_bytes) == (
                pid,
                "idle in transaction",
                "postgres",
                "monthly-report",
                None,
            )
            assert held.query == "SELECT count(*) FROM nilo_jobs;"
            assert held.end_it == f"SELECT pg_terminate_backend({pid})"
            assert 0 <= held.age_s < 60

            with caplog.at_level(logging.INFO, logger="nilo_job"):
                assert await watch.look() is not None
                assert await watch.look() is not None  # said once, not at every look
            (said,) = [r.getMessage() for r in caplog.records]
            assert re.fullmatch(
                r"a transaction has held back the cleanup of the queue's tables in the test's "
                rf"store for \d+ ms: session {pid}, user postgres, application monthly-report, "
                r"idle in transaction, its last statement: SELECT count\(\*\) FROM nilo_jobs\. "
                r"Rows deleted or updated since it began cannot be removed, so the tables and "
                r"their indexes grow and claims slow down; end it \(COMMIT or ROLLBACK in that "
                rf"session, or SELECT pg_terminate_backend\({pid}\)\)",
                said,
            ), said
            assert caplog.records[0].levelno == logging.WARNING

            text = (await metrics.exposition())[0].decode()
            (value,) = re.findall(r"^nilo_job_cleanup_held_back_seconds (\S+)$", text, re.M)
            assert float(value) > 0

            monkeypatch.setattr("nilo_job.dashboard._index.AFTER_S", 0.0)
            async with client(dashboard_app(jobs)) as http:
                page = (await http.get("/")).text
            assert f"A transaction (session {pid}, idle in transaction) has held back" in page
            assert "SELECT count" not in page  # statements are shown only with payloads=True
            report.rollback()

        caplog.clear()
        with caplog.at_level(logging.INFO, logger="nilo_job"):
            assert await watch.look() is None
        assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
            (
                logging.INFO,
                f"the transaction (session {pid}) that held back the cleanup of the test's store "
                "has ended",
            )
        ]
        text = (await metrics.exposition())[0].decode()
        assert "\nnilo_job_cleanup_held_back_seconds 0.0\n" in text
        async with client(dashboard_app(jobs)) as http:
            page = (await http.get("/")).text
        assert 'id="held-back"' not in page
    finally:
        await table.close()


def _wal(path: Path) -> int:
    return os.path.getsize(f"{path}-wal")


async def test_a_sqlite_reader_held_open_is_said_and_the_wal_shrinks_back_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "app.db"
    table = job.Table(f"sqlite:///{path}")
    await table.create_missing()
    jobs = job.Jobs(kinds=[Note], store=table)
    watch = HoldWatch(table, WHERE, after_s=0.0)
    text = "x" * 3_000
    try:
        await jobs.push(Note("before"))
        assert await table.held_back() is None
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as reader:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM nilo_jobs").fetchone()
            for _ in range(8):  # about 12 MB written while the reader holds its snapshot
                await jobs.push_many([Note(text) for _ in range(500)])
            assert _wal(path) > WAL_KEPT_BYTES
            first = await table.held_back()
            assert first is not None
            with caplog.at_level(logging.INFO, logger="nilo_job"):
                held = await watch.look()
            assert held is not None
            assert (held.pid, held.state, held.query, held.user) == (None, None, None, None)
            assert held.wal_bytes == _wal(path)
            assert held.age_s >= first.age_s
            (said,) = [r.getMessage() for r in caplog.records]
            assert re.fullmatch(
                r"a read transaction has kept checkpoints of the test's store from completing "
                r"for \d+ ms \(the WAL is \d+\.\d MB\): a connection of some process holds one "
                r"open\. The WAL grows with every write until it ends, and shrinks back after",
                said,
            ), said
            reader.execute("COMMIT")

        caplog.clear()
        # Writes go on after the reader let go: a checkpoint completes, and the next write
        # restarts the WAL, cut back to its bound.
        for n in range(200):
            await jobs.push(Note(f"after {n}"))
            if _wal(path) <= WAL_KEPT_BYTES:
                break
        assert _wal(path) <= WAL_KEPT_BYTES
        with caplog.at_level(logging.INFO, logger="nilo_job"):
            assert await watch.look() is None
        assert [r.getMessage() for r in caplog.records] == [
            "the read transaction that held back the cleanup of the test's store has ended"
        ]
    finally:
        await table.close()


async def test_memory_has_nothing_to_hold_back() -> None:
    assert await job.Memory().held_back() is None
