"""Every hot statement of the PostgreSQL store keeps an index-driven plan whatever the table's size
and statistics.

PostgreSQL caches a prepared statement's generic plan, chosen with what it knew of the table
then. Each test here makes the worst of that happen (`tests.helpers.plans`): the table holds 300
queued rows and is analysed (so the statistics say no row runs and the tables are tiny), the
statement is prepared with `plan_cache_mode = force_generic_plan` (and the workers' settings,
under which claims, ends and the prune run), then the tables grow (50,000 running rows, 50,000
queued, 50,000 done) without being analysed again, and the cached plan is run under `EXPLAIN
(ANALYZE, BUFFERS, FORMAT JSON)`. The assertion is on the plan's shape, never on a time: no
sequential scan, no node that reads or throws away more rows than the batch asks for, and no
more pages read than the batch needs (an index walked whole finds few rows and reads hundreds of
pages).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.helpers.plans import BATCH, HOT, cached_then_grown, explain

pytestmark = pytest.mark.procs

GROWN = 50_000


def scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from scans(child)


@pytest.mark.parametrize("name", sorted(HOT))
def test_a_plan_cached_on_a_small_table_stays_index_driven_as_the_table_grows(
    pg_url: str, name: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        values = cached_then_grown(conn, name, GROWN)
        plan = explain(conn, "hot", values)["Plan"]
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
            # A claim finds its rows by their ids: a descent of the primary key each.
            per_row = 8 if name.startswith("claim") else 4
            assert pages <= per_row * batch + 20, (name, kind, node.get("Index Name"), pages)


@pytest.mark.parametrize("name", ["claim", "claim_from"])
@pytest.mark.parametrize(
    "disabled", [("enable_nestloop",), ("enable_hashjoin", "enable_mergejoin")]
)
def test_a_claim_reads_only_the_rows_it_takes_whatever_join_the_planner_prefers(
    pg_url: str, name: str, disabled: tuple[str, ...]
) -> None:
    """A claim's rows are updated by their ids, not by a join the planner could walk the table
    for: a plan made while a vacuum had just found the table empty (its statistics then say it
    holds no row) walked the whole primary key for each claim, seconds a claim as rows piled up.
    Each join method is ruled out in turn, as such statistics can make the planner prefer any."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for setting in disabled:
            conn.execute(f"SET {setting} = off")  # type: ignore[call-overload]
        values = cached_then_grown(conn, name, GROWN)
        plan = explain(conn, "hot", values)["Plan"]
    read = {
        node.get("Index Name"): node["Actual Rows"] * node["Actual Loops"]
        for node in scans(plan)
        if node.get("Relation Name") == "nilo_jobs"
    }
    # The due rows read, those taken by their ids, and the update; a full claim also looks for
    # leases that ran out (none has here).
    taken = {"nilo_jobs_due": 16, "nilo_jobs_pkey": 16, None: 16}
    assert read == (taken if name == "claim_from" else {**taken, "nilo_jobs_lease": 0}), plan
