"""The SQLite claim walks the two partial indexes in order, whatever else the table holds."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import nilo_job as job
from nilo_job.store.sqlite import SQL


async def test_the_claim_reads_the_due_and_lease_indexes_not_the_kind(tmp_path: Path) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    await table.create_missing()
    await table.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "q.db")) as conn, conn:
        conn.executemany(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, error, died_at) "
            "VALUES ('a', '{}', 'dead', ?, 1, 'Boom', ?)",
            ((n, n) for n in range(20_000)),
        )
        conn.executemany(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at) VALUES ('a', '{}', 'queued', ?)",
            ((n,) for n in range(5_000)),
        )
        conn.execute("ANALYZE")
        params = {"now": 10, "lease_until": 1_000, "limit": 4, "kinds": '["a"]', "worker": "w"}
        plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + SQL["claim"], params)]
    assert "SEARCH nilo_jobs USING INDEX nilo_jobs_due (run_at<?)" in plan, plan
    assert "SEARCH nilo_jobs USING INDEX nilo_jobs_lease (lease_until<?)" in plan, plan
    assert not any("nilo_jobs_unique" in step or step.startswith("SCAN nilo_jobs") for step in plan)
