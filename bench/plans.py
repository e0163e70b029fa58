"""A cached plan against a fresh one: each hot statement of the PostgreSQL store, its generic plan
cached while the table held 300 rows, then run once the table has grown, never analysed since.

    .venv/bin/python bench/plans.py [--url postgresql://postgres@127.0.0.1:5432]
                                    [--sizes 25000,1000000]

For each size, a scratch database gets 300 queued rows and 300 done ones, is analysed (so the
statistics say that no row runs and that the tables are tiny), and every hot statement is
prepared there with `plan_cache_mode = force_generic_plan`, in a session with the workers'
settings (`enable_bitmapscan` and `enable_seqscan` off), as claims, ends and the prune run. Then
the tables grow to `size` running rows, `size` queued ones (not yet due) and `size` done ones,
and each statement runs under `EXPLAIN ANALYZE` (in a transaction rolled back) with its cached
plan, and again planned afresh (`force_custom_plan`), in turn, three times each. It prints the
best execution time of each, in ms, and their ratio.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nilo_job.store.postgres import SQL

BATCH = 256


def placeholders(
    query: str, params: Sequence[object] | Mapping[str, object]
) -> tuple[str, list[object]]:
    """`query` with psycopg's placeholders as `$n`, and its parameters in that order."""
    if isinstance(params, Mapping):
        names: list[str] = []

        def named(found: re.Match[str]) -> str:
            if found[1] not in names:
                names.append(found[1])
            return f"${names.index(found[1]) + 1}"

        return re.sub(r"%\((\w+)\)[sb]", named, query), [params[name] for name in names]
    counter = iter(range(1, 1_000))
    return re.sub(r"%[sb]", lambda _: f"${next(counter)}", query), list(params)


def fill(conn: psycopg.Connection[Any], count: int, state: str, first_run_at: int = 0) -> None:
    conn.execute(
        "INSERT INTO nilo_jobs (kind, payload, state, run_at, pushed_at, attempts, lease_until, "
        "started_at, worker) SELECT 'k', '{}', %s, %s + g, 0, "
        "CASE WHEN %s = 'running' THEN 1 ELSE 0 END, "
        "CASE WHEN %s = 'running' THEN 100000000 + g END, "
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


def hot(size: int) -> dict[str, Callable[[list[int]], Sequence[object] | Mapping[str, object]]]:
    """Each hot statement, and its parameters given running row ids (newest first)."""
    n = BATCH
    return {
        "claim": lambda ids: {"now": 5_000, "lease_until": 10**9, "limit": 16, "kinds": ["k"],
                              "worker": "w"},
        "done_many": lambda ids: {"ids": ids[:n], "attempts": [1] * n},
        "keep_many": lambda ids: {"ids": ids[:n], "attempts": [1] * n, "started": [5] * n,
                                  "finished": [9] * n, "results": [None] * n},
        "keep": lambda ids: {"id": ids[0], "attempts": 1, "started_at": 5, "finished_at": 9,
                             "result": None},
        "done": lambda ids: [ids[0], 1],
        "retrying": lambda ids: [100, "E", "d", "t", False, ids[0], 1],
        "died": lambda ids: [100, "E", "d", "t", ids[0], 1],
        "released": lambda ids: [100, ids[0], 1],
        "release_key": lambda ids: [ids[0], 1],
        "prune": lambda ids: [1_000 + size, 500],
    }  # fmt: skip


def execution_ms(conn: psycopg.Connection[Any], name: str, values: list[object]) -> float:
    cur = psycopg.ClientCursor(conn)
    conn.execute("BEGIN")
    try:
        arguments = ", ".join(["%s"] * len(values))
        cur.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name}({arguments})", values)
        found = cur.fetchone()
    finally:
        conn.execute("ROLLBACK")
    assert found is not None
    return float(found[0][0]["Execution Time"])


def run(server: str, size: int) -> None:
    database = f"nilo_plans_{size}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {database}")
    try:
        with psycopg.connect(f"{server}/{database}", autocommit=True) as conn:
            for statement in SQL["create"].split(";"):
                if statement.strip():
                    conn.execute(statement)  # type: ignore[call-overload]
            fill(conn, 300, "queued")
            fill_done(conn, 300, 10**9)
            conn.execute("ANALYZE nilo_jobs")
            conn.execute("ANALYZE nilo_jobs_done")
            for setting in ("enable_bitmapscan", "enable_seqscan"):
                conn.execute(f"SET {setting} = off")
            statements = hot(size)
            small_ids = [row[0] for row in conn.execute("SELECT id FROM nilo_jobs ORDER BY id")]
            shapes: dict[str, list[object]] = {}
            conn.execute("SET plan_cache_mode = force_generic_plan")
            for name, params in statements.items():
                query, values = placeholders(SQL[name], params(small_ids))
                conn.execute(f"PREPARE cached_{name} AS {query}")  # type: ignore[call-overload]
                shapes[name] = values
            fill(conn, size, "running")
            fill(conn, size, "queued", first_run_at=10**9)
            fill_done(conn, size, 0)
            ids = [
                row[0]
                for row in conn.execute(
                    "SELECT id FROM nilo_jobs WHERE state = 'running' ORDER BY id DESC LIMIT %s",
                    (BATCH,),
                )
            ]
            print(f"\n{size:,} rows of each: execution time, ms (cached plan, fresh plan, ratio)")
            for name, params in statements.items():
                query, values = placeholders(SQL[name], params(ids))
                conn.execute("SET plan_cache_mode = force_custom_plan")
                conn.execute(f"PREPARE fresh_{name} AS {query}")  # type: ignore[call-overload]
                times: dict[str, list[float]] = {"cached": [], "fresh": []}
                for _ in range(3):
                    for which in times:
                        times[which].append(execution_ms(conn, f"{which}_{name}", values))
                cached, fresh = min(times["cached"]), min(times["fresh"])
                print(f"  {name:12} {cached:9.3f} {fresh:9.3f} {cached / fresh:6.2f} ×")
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--sizes", default="25000,1000000")
    args = parser.parse_args()
    for size in (int(size) for size in args.sizes.split(",")):
        run(args.url, size)


if __name__ == "__main__":
    main()
