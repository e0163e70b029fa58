"""Every hot statement of the PostgreSQL store keeps an index-driven plan whatever the table's size
and statistics.

PostgreSQL caches a prepared statement's generic plan, chosen with what it knew of the table
then. Each test here makes the worst of that happen: the table holds 300 queued rows and is
analysed (so the statistics say no row runs and the tables are tiny), the statement is prepared
with `plan_cache_mode = force_generic_plan`, then the tables grow (50,000 running rows, 50,000
queued, 50,000 done) without being analysed again, and the cached plan is run under `EXPLAIN
(ANALYZE, BUFFERS, FORMAT JSON)`. The assertion is on the plan's shape, never on a time: no
sequential scan, no node that reads or throws away more rows than the batch asks for, and no
more pages read than the batch needs (an index walked whole finds few rows and reads hundreds of
pages). Claims, ends and the prune run in the workers' sessions, so they are planned here with
the workers' settings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg
import pytest

from nilo_job.store.postgres import SQL

pytestmark = pytest.mark.procs

GROWN = 50_000
BATCH = 256


def prepared(
    query: str, params: Sequence[object] | Mapping[str, object]
) -> tuple[str, list[object]]:
    """`query` with psycopg's placeholders (`%s`, `%b`, `%(name)s`) as `$n`, and its
    parameters in that order."""
    if isinstance(params, Mapping):
        names: list[str] = []

        def named(found: re.Match[str]) -> str:
            if found[1] not in names:
                names.append(found[1])
            return f"${names.index(found[1]) + 1}"

        return re.sub(r"%\((\w+)\)[sb]", named, query), [params[name] for name in names]
    counter = iter(range(1, 1_000))
    return re.sub(r"%[sb]", lambda _: f"${next(counter)}", query), list(params)


def scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from scans(child)


def fill(conn: psycopg.Connection[Any], count: int, state: str, first_run_at: int = 0) -> None:
    """`count` rows in `state` (running rows with a lease that has not run out)."""
    conn.execute(
        "INSERT INTO nilo_jobs (kind, payload, state, run_at, pushed_at, attempts, lease_until, "
        "started_at, worker) SELECT 'k', '{}', %s, %s + g, 0, "
        "CASE WHEN %s = 'running' THEN 1 ELSE 0 END, "
        "CASE WHEN %s = 'running' THEN 10000000 + g END, "
        "CASE WHEN %s = 'running' THEN 0 END, 'w' FROM generate_series(1, %s) AS g",
        (state, first_run_at, state, state, state, count),
    )


def fill_done(conn: psycopg.Connection[Any], count: int, first_id: int) -> None:
    conn.execute(
        "INSERT INTO nilo_jobs_done (id, kind, payload, run_at, pushed_at, started_at, "
        "finished_at, attempts, worker) SELECT %s + g, 'k', '{}', 0, 0, 0, 1000 + g, 1, 'w' "
        "FROM generate_series(1, %s) AS g",
        (first_id, count),
    )


def running_ids(conn: psycopg.Connection[Any]) -> list[int]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT id FROM nilo_jobs WHERE state = 'running' ORDER BY id DESC LIMIT %s", (BATCH,)
        )
    ]


def one_running(conn: psycopg.Connection[Any]) -> int:
    return running_ids(conn)[0]


def _claim(conn: psycopg.Connection[Any]) -> dict[str, object]:
    return {"now": 5_000, "lease_until": 20_000_000, "limit": 16, "kinds": ["k"], "worker": "w"}


def _done_many(conn: psycopg.Connection[Any]) -> dict[str, object]:
    ids = running_ids(conn)
    return {"ids": ids, "attempts": [1] * len(ids)}


def _keep_many(conn: psycopg.Connection[Any]) -> dict[str, object]:
    ids = running_ids(conn)
    n = len(ids)
    return {
        "ids": ids,
        "attempts": [1] * n,
        "started": [5] * n,
        "finished": [9] * n,
        "results": [None] * n,
    }


def _keep(conn: psycopg.Connection[Any]) -> dict[str, object]:
    return {
        "id": one_running(conn),
        "attempts": 1,
        "started_at": 5,
        "finished_at": 9,
        "result": None,
    }


def _one(conn: psycopg.Connection[Any]) -> list[object]:
    return [one_running(conn), 1]


def _retrying(conn: psycopg.Connection[Any]) -> list[object]:
    return [100, "E", "d", "t", False, one_running(conn), 1]


def _died(conn: psycopg.Connection[Any]) -> list[object]:
    return [100, "E", "d", "t", one_running(conn), 1]


def _released(conn: psycopg.Connection[Any]) -> list[object]:
    return [100, one_running(conn), 1]


def _prune(conn: psycopg.Connection[Any]) -> list[object]:
    return [1_000 + GROWN, 500]


def _push(conn: psycopg.Connection[Any]) -> list[object]:
    return ["k", "{}", 5, 5]


def _push_row(conn: psycopg.Connection[Any]) -> dict[str, object]:
    """A schedule's tick, or any push with a unique key."""
    return {
        "kind": "k", "payload": "{}", "state": "queued", "run_at": 5, "attempts": 0,
        "unique_key": "tick", "lease_until": None, "pushed_at": 5, "started_at": None,
        "worker": None,
    }  # fmt: skip


HOT = {
    "claim": _claim,
    "done_many": _done_many,
    "keep_many": _keep_many,
    "keep": _keep,
    "done": _one,
    "retrying": _retrying,
    "died": _died,
    "released": _released,
    "release_key": _one,
    "prune": _prune,
    "push": _push,
    "push_row": _push_row,
}
"""Each hot statement, and its parameters once the tables have grown."""


@pytest.mark.parametrize("name", sorted(HOT))
def test_a_plan_cached_on_a_small_table_stays_index_driven_as_the_table_grows(
    pg_url: str, name: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        fill(conn, 300, "queued")
        fill_done(conn, 300, 10_000_000)
        conn.execute("ANALYZE nilo_jobs")
        conn.execute("ANALYZE nilo_jobs_done")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        # The workers' sessions, where claims, ends and the prune run.
        conn.execute("SET enable_bitmapscan = off")
        conn.execute("SET enable_seqscan = off")
        fill(conn, GROWN, "running")
        fill(conn, GROWN, "queued", first_run_at=10_000)  # not due yet at the claim's now
        fill_done(conn, GROWN, 0)
        query, values = prepared(SQL[name], HOT[name](conn))
        conn.execute(f"PREPARE hot AS {query}")
        cur = psycopg.ClientCursor(conn)
        arguments = ", ".join(["%s"] * len(values))
        conn.execute("BEGIN")
        try:
            cur.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE hot({arguments})",
                values,
            )
            found = cur.fetchone()
        finally:
            conn.execute("ROLLBACK")
    assert found is not None
    plan = found[0][0]["Plan"]
    batch = BATCH if name.endswith("_many") else 500 if name == "prune" else 16
    for node in scans(plan):
        kind = node["Node Type"]
        where = node.get("Relation Name", "")
        assert kind != "Seq Scan", (name, where, plan)
        if kind in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan"):
            read = (
                node["Actual Rows"] * node["Actual Loops"]
                + node.get("Rows Removed by Filter", 0) * node["Actual Loops"]
            )
            assert read <= 2 * batch + 10, (name, kind, where, node.get("Index Name"), read)
        # A batch's rows may be matched to its ends one by one: at most the batch squared.
        assert node.get("Rows Removed by Join Filter", 0) <= batch * batch, (name, kind, plan)
        if kind in ("Index Scan", "Index Only Scan"):
            pages = node["Shared Hit Blocks"] + node["Shared Read Blocks"]
            assert pages <= 4 * batch + 20, (name, kind, node.get("Index Name"), pages)
