"""A cached plan against a fresh one: each hot statement of the PostgreSQL store, its generic plan
cached while the table held 300 rows, then run once the table has grown, never analysed since.

    .venv/bin/python bench/plans.py [--url postgresql://postgres@127.0.0.1:5432]
                                    [--sizes 25000,1000000]

For each size and each hot statement, a scratch database gets 300 queued rows and 300 done
ones, analysed (so the statistics say that no row runs and that the tables are tiny); the
statement is prepared there with `plan_cache_mode = force_generic_plan`, in a session with the
workers' settings (`enable_bitmapscan` and `enable_seqscan` off), as claims, ends and the prune
run, and run once, which makes its plan. Then the tables grow to `size` running rows, `size`
queued ones (not yet due) and `size` done ones, and the statement runs under `EXPLAIN ANALYZE`
(in a transaction rolled back) with its cached plan, and again planned afresh
(`force_custom_plan`), in turn, three times each. It prints the best execution time of each, in
ms, and their ratio. The scenario is the plan test's (`tests/helpers/plans.py`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.helpers.plans import HOT, SQL, cached_then_grown, explain, placeholders


def run(server: str, size: int) -> None:
    print(f"\n{size:,} rows of each: execution time, ms (cached plan, fresh plan, ratio)")
    database = f"nilo_plans_{size}"
    for name in HOT:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {database}")
        try:
            with psycopg.connect(f"{server}/{database}", autocommit=True) as conn:
                for statement in SQL["create"].split(";"):
                    if statement.strip():
                        conn.execute(statement)  # type: ignore[call-overload]
                values = cached_then_grown(conn, name, size, as_name="cached")
                conn.execute("SET plan_cache_mode = force_custom_plan")
                query = placeholders(SQL[name], HOT[name]([0], size))[0]  # (the text alone)
                conn.execute(f"PREPARE fresh AS {query}")  # type: ignore[call-overload]
                times: dict[str, list[float]] = {"cached": [], "fresh": []}
                for _ in range(3):
                    for which in times:
                        times[which].append(float(explain(conn, which, values)["Execution Time"]))
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
