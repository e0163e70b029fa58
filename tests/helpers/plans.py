"""The worst case for a cached plan, for the plan test and `bench/plans.py`: every hot statement of
the PostgreSQL store prepared while its tables were small, then run once they have grown.

`small(conn)` leaves 300 queued rows and 300 done ones, analysed (the statistics then say that no
row runs and that the tables are tiny), in a session with the workers' settings (claims, ends and
the prune run on the workers' sessions) and `plan_cache_mode = force_generic_plan`, so that each
statement `prepare`d then keeps the plan chosen then. `grow(conn, size)` adds `size` running
rows, `size` queued ones (not yet due) and `size` done ones, without analysing. `HOT` gives each
statement's parameters, from `running_ids(conn)`. `cached_then_grown` does it all for one
statement: its plan is made (and cached) by a first run on the small tables.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg

from nilo_job.store.postgres import SQL

BATCH = 256
"""Ends in one group."""

Params = Sequence[object] | Mapping[str, object]


def placeholders(query: str, params: Params) -> tuple[str, list[object]]:
    """`query` with psycopg's placeholders (`%s`, `%b`, `%(name)s`) as `$n`, and its parameters
    in that order."""
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
    """`count` rows in `state` (running rows with a lease that has not run out)."""
    conn.execute(
        "INSERT INTO nilo_jobs (kind, payload, state, run_at, pushed_at, attempts, lease_until, "
        "started_at, worker) SELECT 'k', '{}', %s, %s + g, 0, "
        "CASE WHEN %s = 'running' THEN 1 ELSE 0 END, "
        "CASE WHEN %s = 'running' THEN 1000000000 + g END, "
        "CASE WHEN %s = 'running' THEN 0 END, 'w' FROM generate_series(1, %s) AS g",
        (state, first_run_at, state, state, state, count),
    )


def fill_done(conn: psycopg.Connection[Any], count: int, first_id: int) -> None:
    """`count` done rows, ids from `first_id + 1`, finished at 1,001 µs and on."""
    conn.execute(
        "INSERT INTO nilo_jobs_done (id, kind, payload, run_at, pushed_at, started_at, "
        "finished_at, attempts, worker) SELECT %s + g, 'k', '{}', 0, 0, 0, 1000 + g, 1, 'w' "
        "FROM generate_series(1, %s) AS g",
        (first_id, count),
    )


def small(conn: psycopg.Connection[Any]) -> None:
    """The tables as plans are cached (see the module's docstring)."""
    fill(conn, 300, "queued")
    fill_done(conn, 300, 10**12)
    conn.execute("ANALYZE nilo_jobs")
    conn.execute("ANALYZE nilo_jobs_done")
    conn.execute("SET enable_bitmapscan = off")
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET plan_cache_mode = force_generic_plan")


def grow(conn: psycopg.Connection[Any], size: int) -> None:
    """`size` more rows running, queued (due at 10⁹ µs) and done, not analysed."""
    fill(conn, size, "running")
    fill(conn, size, "queued", first_run_at=10**9)
    fill_done(conn, size, 0)


def running_ids(conn: psycopg.Connection[Any]) -> list[int]:
    """The newest `BATCH` running rows' ids, newest first (of any rows while none runs: the
    small tables' first run of each statement, which makes the plan that is then cached)."""
    found = conn.execute(
        "SELECT id FROM nilo_jobs ORDER BY state = 'running' DESC, id DESC LIMIT %s", (BATCH,)
    )
    return [row[0] for row in found]


def cached_then_grown(
    conn: psycopg.Connection[Any], name: str, size: int, as_name: str = "hot"
) -> list[object]:
    """Statement `name` prepared as `as_name` on the small tables and run once there (its
    generic plan is made then, and cached), then the tables grown by `size`: the statement's
    parameters now."""
    small(conn)
    query, first = placeholders(SQL[name], HOT[name](running_ids(conn), 300))
    conn.execute(f"PREPARE {as_name} AS {query}")  # type: ignore[call-overload]
    explain(conn, as_name, first)
    grow(conn, size)
    return placeholders(SQL[name], HOT[name](running_ids(conn), size))[1]


def _many(ids: list[int], size: int) -> dict[str, object]:
    return {"ids": ids, "attempts": [1] * len(ids)}


def _keep_many(ids: list[int], size: int) -> dict[str, object]:
    n = len(ids)
    return {
        **_many(ids, size),
        "started": [5] * n,
        "finished": [9] * n,
        "ended": [9] * n,
        "results": [None] * n,
    }


HOT: dict[str, Callable[[list[int], int], Params]] = {
    "claim": lambda ids, size: {
        "now": 5_000, "lease_until": 2 * 10**9, "limit": 16, "kinds": ["k"], "worker": "w"
    },
    "claim_from": lambda ids, size: {
        "now": 5_000, "lease_until": 2 * 10**9, "limit": 16, "kinds": ["k"], "worker": "w",
        "from": 100,
    },
    "done_many": _many,
    "keep_many": _keep_many,
    "keep": lambda ids, size: {
        "id": ids[0], "attempts": 1, "started_at": 5, "finished_at": 9, "result": None
    },
    "done": lambda ids, size: {"id": ids[0], "attempts": 1},
    "retrying": lambda ids, size: [100, "E", "d", "t", False, ids[0], 1],
    "died": lambda ids, size: [100, "E", "d", "t", ids[0], 1],
    "released": lambda ids, size: [100, ids[0], 1],
    "release_key": lambda ids, size: [ids[0], 1],
    "prune": lambda ids, size: [1_000 + size, 500],
    "push": lambda ids, size: ["k", "{}", 5, 5, None],
    "push_row": lambda ids, size: {  # a schedule's tick, or any push with a unique key
        "kind": "k", "payload": "{}", "state": "queued", "run_at": 5, "attempts": 0,
        "unique_key": "tick", "lease_until": None, "pushed_at": 5, "started_at": None,
        "worker": None, "trace": None,
    },
}  # fmt: skip
"""Each hot statement, and its parameters given the running rows' ids and the grown size."""


def explain(conn: psycopg.Connection[Any], name: str, values: list[object]) -> dict[str, Any]:
    """`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE name(values)`, in a transaction rolled
    back: the plan's JSON (its "Plan", "Execution Time"…)."""
    cur = psycopg.ClientCursor(conn)
    arguments = ", ".join(["%s"] * len(values))
    conn.execute("BEGIN")
    try:
        cur.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {name}({arguments})", values)
        found = cur.fetchone()
    finally:
        conn.execute("ROLLBACK")
    assert found is not None
    return dict(found[0][0])
