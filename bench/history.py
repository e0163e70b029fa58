"""The benchmark of the operator's history: keyset pages, pruning, and what keeping done rows costs.

    .venv/bin/python bench/history.py                 # 1,000,000 rows, W2 of 10,000 jobs × 3
    .venv/bin/python bench/history.py --quick         # 100,000 rows, W2 of 2,000 jobs × 1
    .venv/bin/python bench/history.py --stores pg --only paging,prune --sweep 200:20,50:20

Three parts, on PostgreSQL (a database of its own, dropped afterwards) and SQLite (a file in a
temporary folder), each figure a ratio of two things measured in the same run, alternated:

- `paging`: `jobs.find(where, limit=100)` on 1,000,000 dead rows (`nilo_jobs`) and 1,000,000
  done rows (`nilo_jobs_done`) put there with one INSERT … SELECT: page 1 against page 500
  (its cursor reached by walking the pages), alternated call by call; and the EXPLAIN of the
  statement `find_statement` builds for page 500.
- `prune`: on the same table, whose done rows all finished ten days ago (past the default
  retention), a paced stream of `store.push` + `store.claim` + `store.finish`: claim latency
  without pruning against claim latency while `Pruner(store, retention_ms, clock).run()` runs
  as a task in the same process (what `serve` does), alternating; with the pruner's `BATCH` and
  `REST` as they are and as given by `--sweep` (set on the module here, never in the file);
  and the rate of a prune with no rest (`Pruner.prune_at`).
- `keep`: bench/nilo.py's W2 (10,000 queued no-op jobs, one process × 4 workers), run with the
  queue's `retention_ms` at its default (3,600,000: every done row is kept) and at 0 (deleted),
  alternated, each run a subprocess in a fresh database, median of 3.

Like bench/run.py, it copies `nilo_job/` first and measures the copy, so that one run measures
one version while the package is being edited.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import functools
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nilo_job as job
from nilo_job._worker import pruner as _prune
from nilo_job.store._sql import find_statement
from nilo_job.store.contract import Done, NewRow

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

BENCH = Path(__file__).resolve().parent
SNAPSHOT = "NILO_HISTORY_SNAPSHOT"
RETENTION_MS = 3_600_000
DAY_US = 86_400_000_000
LIMIT = 100
DEEP_PAGE = 500


# --------------------------------------------------------------------------- the databases


def pg_admin(base: str, wait_s: float = 180.0) -> Any:
    """A connection to the `postgres` database; waits for a server the project's own tests are
    restarting, for up to `wait_s` seconds."""
    import psycopg

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return psycopg.connect(base + "/postgres", autocommit=True)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


class Places:
    """Fresh databases (PostgreSQL) and files (SQLite), each gone afterwards."""

    def __init__(self, pg_base: str, tmp: Path) -> None:
        self.pg_base = pg_base.rstrip("/")
        self.tmp = tmp
        self.made = 0

    @contextlib.contextmanager
    def database(self, store: str) -> Iterator[str]:
        self.made += 1
        name = f"nilo_history_{os.getpid()}_{self.made}"
        if store == "sqlite":
            path = self.tmp / f"{name}.db"
            try:
                yield f"sqlite:///{path}"
            finally:
                for suffix in ("", "-wal", "-shm", "-journal"):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(f"{path}{suffix}")
            return
        with pg_admin(self.pg_base) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{self.pg_base}/{name}"
        finally:
            with pg_admin(self.pg_base) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# The rows: x = 1…N, one a millisecond, ten days ago (past any retention this measures). Every
# 4th row is of kind `mail` (the rest `noop`), every 3rd failed with ValueError (the rest Boom).
# Dead rows get ids 1…N (the identity), done rows 10**9 + x (ids nilo_jobs never reaches here).
_KIND = "CASE WHEN {x} % 4 = 0 THEN 'mail' ELSE 'noop' END"
_ERROR = "CASE WHEN {x} % 3 = 0 THEN 'ValueError' ELSE 'Boom' END"
DONE_ID = 1_000_000_000


def _payload(x: str, cast: str) -> str:
    return f"""('{{"i": ' || {x} || '}}'){cast}"""


def _dead_sql(x: str, base: str, cast: str) -> str:
    t = f"{base} + {x} * 1000"
    return (
        "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, error, detail, died_at,"
        " traceback, pushed_at, started_at, worker)"
        f" SELECT {_KIND.format(x=x)}, {_payload(x, cast)}, 'dead', {t} - 900, 3,"
        f" {_ERROR.format(x=x)}, 'it failed', {t}, 'Traceback (most recent call last): …',"
        f" {t} - 1000, {t} - 100, 'bench:1'"
    )


def _done_sql(x: str, base: str, cast: str) -> str:
    t = f"{base} + {x} * 1000"
    return (
        "INSERT INTO nilo_jobs_done (id, kind, payload, run_at, pushed_at, started_at,"
        " finished_at, attempts, worker, error, detail, result)"
        f" SELECT {DONE_ID} + {x}, {_KIND.format(x=x)}, {_payload(x, cast)}, {t} - 900,"
        f" {t} - 1000, {t} - 100, {t}, 1, 'bench:1', {_ERROR.format(x=x)}, NULL, NULL"
    )


def fill(url: str, n: int, base_us: int, *, offset: int = 0) -> None:
    """N dead rows into nilo_jobs and N done rows into nilo_jobs_done, then ANALYZE; with
    `offset`, only done rows, x from offset + 1 on (to top the history up again)."""
    makes = (_dead_sql, _done_sql) if not offset else (_done_sql,)
    if common.is_sqlite(url):
        cte = "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?) "
        path = common.sqlite_path(url)
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            for make in makes:
                sql = make(f"(x + {offset})", str(base_us), "")
                insert, select = sql.split(" SELECT ", 1)
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(f"{cte}{insert} SELECT {select} FROM g", (n,))
                conn.execute("COMMIT")
            conn.execute("ANALYZE")
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for make in makes:
            insert = make(f"(g + {offset})", str(base_us), "::json").replace("%", "%%")
            conn.execute(f"{insert} FROM generate_series(1, %s) AS g", (n,))
        conn.execute("VACUUM ANALYZE nilo_jobs")
        conn.execute("VACUUM ANALYZE nilo_jobs_done")


def explain(url: str, sql: str, params: list[object]) -> list[str]:
    """The plan of `sql`: EXPLAIN QUERY PLAN on SQLite, EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL."""
    if common.is_sqlite(url):
        with contextlib.closing(sqlite3.connect(common.sqlite_path(url))) as conn:
            return [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}", params
        ).fetchall()
    return [row[0] for row in rows]


# ------------------------------------------------------------------------------- the jobs


@dataclass
class Noop:
    nilo_job = "noop"
    retry = job.Retry.NONE

    async def run(self) -> None:
        return None


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    async def run(self) -> None:
        return None


def ms(samples_ns: list[int]) -> dict[str, Any]:
    """p50/p95/p99 in milliseconds (bench/common.py's nearest rank)."""
    return common.percentiles(samples_ns)


# ------------------------------------------------------------------------------ 1. paging

CASES = (
    ("dead", job.Where(state="dead")),
    ("dead, kind=mail", job.Where(state="dead", kind="mail")),
    ("dead, error=ValueError", job.Where(state="dead", error="ValueError")),
    ("done", job.Where(state="done")),
    ("done, kind=mail", job.Where(state="done", kind="mail")),
    ("done, error=ValueError", job.Where(state="done", error="ValueError")),
)


async def paging(url: str, jobs: job.Jobs, n: int, base_us: int, samples: int) -> list[dict]:
    """Page 1 against page 500 of each case, alternated call by call."""
    results = []
    for label, where in CASES:
        matching = await jobs.count(where)
        deep = min(DEEP_PAGE, matching // LIMIT)
        began = time.perf_counter()
        after: str | None = None
        for _page in range(deep - 1):  # walk to the cursor of page `deep`
            found = await jobs.find(where, after=after, limit=LIMIT)
            after = found.next
        walk_s = time.perf_counter() - began
        assert after is not None
        if label == "dead":  # the cursor of row 49,900 newest first, computed: the same
            x = n - (deep - 1) * LIMIT + 1
            assert after == f"{base_us + x * 1000}.{x}", (after, x)
        first = await jobs.find(where, limit=LIMIT)
        page = await jobs.find(where, after=after, limit=LIMIT)
        assert len(first.rows) == len(page.rows) == LIMIT
        assert all(r.state == where.state for r in page.rows)
        assert where.kind is None or all(r.kind == where.kind for r in page.rows)
        assert where.error is None or all(r.error == where.error for r in page.rows)
        times: dict[str, list[int]] = {"first": [], "deep": []}
        calls = [("first", None), ("deep", after)]
        warm = 10
        for i in range(warm + samples):
            for name, cursor in calls if i % 2 else calls[::-1]:
                t0 = time.perf_counter_ns()
                await jobs.find(where, after=cursor, limit=LIMIT)
                took = time.perf_counter_ns() - t0
                if i >= warm:
                    times[name].append(took)
        key = tuple(int(v) for v in after.split("."))
        sql, params = find_statement(where, key, LIMIT + 1, postgres=not common.is_sqlite(url))
        p1, pd = ms(times["first"]), ms(times["deep"])
        results.append(
            {
                "case": label,
                "matching": matching,
                "page": deep,
                "walk_ms_per_page": walk_s * 1000 / max(1, deep - 1),
                "first": p1,
                "deep": pd,
                "ratio_p50": pd["p50_ms"] / p1["p50_ms"],
                "ratio_p95": pd["p95_ms"] / p1["p95_ms"],
                "sql": sql,
                "plan": explain(url, sql, params),
            }
        )
        r = results[-1]
        print(
            f"  {label}: page 1 p50 {p1['p50_ms']:.2f} ms, page {deep} p50 {pd['p50_ms']:.2f} ms"
            f" (×{r['ratio_p50']:.2f})",
            file=sys.stderr,
        )
    return results


# ------------------------------------------------------------------------------- 2. prune


class Counted:
    """The store as the pruner sees it: counts and times its prune batches, and can hold the
    next one back so that the pruner is cancelled between batches, never inside one."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.rows = 0
        self.batch_ns: list[int] = []
        self.spans: list[tuple[int, int]] = []  # (start, end) of every batch, perf_counter_ns
        self.holding = False
        self.idle = asyncio.Event()
        self.idle.set()

    async def prune(self, before_us: int, limit: int) -> int:
        if self.holding:
            await asyncio.Event().wait()
        self.idle.clear()
        t0 = time.perf_counter_ns()
        try:
            n: int = await self.store.prune(before_us, limit)
        finally:
            self.idle.set()
        t1 = time.perf_counter_ns()
        self.batch_ns.append(t1 - t0)
        self.spans.append((t0, t1))
        self.rows += n
        return n


async def claim_stream(store: Any, seconds: float, samples: dict[str, list[int]]) -> int:
    """Push a row, claim it (timed), finish it as done and kept (timed), rest 0-4 ms; again."""
    end = time.perf_counter() + seconds
    count = 0
    while time.perf_counter() < end:
        now = job.now_us()
        await store.push([NewRow("noop", b'{"i": 0}', now, pushed_at=now)])
        now = job.now_us()
        t0 = time.perf_counter_ns()
        rows = await store.claim(["noop"], now, now + 60_000_000, 1, "bench:1")
        t1 = time.perf_counter_ns()
        assert len(rows) == 1, rows
        r = rows[0]
        await store.finish([Done(r.id, r.attempts, finished_at=job.now_us(), started_at=now)])
        t2 = time.perf_counter_ns()
        samples["claim"].append(t1 - t0)
        samples["span"].append((t0, t1))  # type: ignore[arg-type]
        samples["finish"].append(t2 - t1)
        count += 1
        await asyncio.sleep(random.uniform(0, 0.004))
    return count


def overlapping(claims: list[tuple[int, int]], batches: list[tuple[int, int]]) -> list[int]:
    """The indexes of the claims whose time overlaps a prune batch's."""
    starts = [b[0] for b in batches]
    hit = []
    for i, (c0, c1) in enumerate(claims):
        k = bisect.bisect_left(starts, c1)  # batches that began before the claim ended
        if k and batches[k - 1][1] > c0:
            hit.append(i)
    return hit


async def prune_config(
    store: Any, batch: int, rest: float, rounds: int, phase_s: float
) -> dict[str, Any]:
    """Claim latency without and with the pruner (BATCH=batch, REST=rest), alternated."""
    off: dict[str, list[Any]] = {"claim": [], "finish": [], "span": []}
    on: dict[str, list[Any]] = {"claim": [], "finish": [], "span": []}
    counted = Counted(store)
    pruning_s = 0.0
    rounds_off: list[list[int]] = []
    rounds_on: list[list[int]] = []
    saved = _prune.BATCH, _prune.REST
    _prune.BATCH, _prune.REST = batch, rest
    try:
        for k in range(rounds):
            for pruning in (False, True) if k % 2 == 0 else (True, False):
                if not pruning:
                    first = len(off["claim"])
                    await claim_stream(store, phase_s, off)
                    rounds_off.append(off["claim"][first:])
                    continue
                counted.holding = False
                pruner = _prune.Pruner(counted, RETENTION_MS, job.now_us)  # type: ignore[arg-type]
                task = asyncio.create_task(pruner.run())
                began = time.perf_counter()
                first = len(on["claim"])
                await claim_stream(store, phase_s, on)
                rounds_on.append(on["claim"][first:])
                counted.holding = True
                await counted.idle.wait()
                pruning_s += time.perf_counter() - began
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await asyncio.sleep(0.2)
    finally:
        _prune.BATCH, _prune.REST = saved
    a, b = ms(off["claim"]), ms(on["claim"])
    batches = ms(counted.batch_ns)
    hit = overlapping(on["span"], counted.spans)
    hit_ns = [on["claim"][i] for i in hit]
    return {
        "batch": batch,
        "rest": rest,
        "off": a,
        "on": b,
        "finish_off": ms(off["finish"]),
        "finish_on": ms(on["finish"]),
        "ratio_p99": b["p99_ms"] / a["p99_ms"],
        "ratio_p50": b["p50_ms"] / a["p50_ms"],
        # Robust to a burst of the machine's noise landing in one phase: each round's p99
        # with the pruner ÷ the same round's without, the median over the rounds.
        "round_ratio_p99": statistics.median(
            ms(x)["p99_ms"] / ms(y)["p99_ms"] for x, y in zip(rounds_on, rounds_off, strict=True)
        ),
        "pruned": counted.rows,
        "prune_rate": counted.rows / pruning_s,
        "batch_p50_ms": batches.get("p50_ms"),
        "batch_p99_ms": batches.get("p99_ms"),
        "duty": sum(counted.batch_ns) / 1e9 / pruning_s,
        "overlapped": len(hit) / max(1, len(on["claim"])),
        "overlapped_p50_ms": ms(hit_ns).get("p50_ms"),
    }


async def prune_part(
    store: Any,
    url: str,
    rows: int,
    base_us: int,
    configs: list[tuple[int, float]],
    rounds: int,
    phase_s: float,
    flat: int,
) -> dict[str, Any]:
    results = []
    offset = rows
    for batch, rest in configs:
        # Top the history up to `rows` old done rows (not timed), so that every setting
        # prunes the same table.
        short = rows - (await store.stats()).done
        if short > 0:
            fill(url, short, base_us, offset=offset)
            offset += short
        r = await prune_config(store, batch, rest, rounds, phase_s)
        results.append(r)
        print(
            f"  BATCH={batch} REST={rest:g}: claim p99 {r['off']['p99_ms']:.2f} → "
            f"{r['on']['p99_ms']:.2f} ms (×{r['ratio_p99']:.2f},"
            f" rounds ×{r['round_ratio_p99']:.2f}),"
            f" {r['prune_rate']:,.0f} rows/s",
            file=sys.stderr,
        )
    # The pruner's top speed: batches of BATCH with no rest (prune_at), timed.
    short = rows - (await store.stats()).done
    if short > 0:
        fill(url, short, base_us, offset=offset)
    pruner = _prune.Pruner(store, RETENTION_MS, job.now_us)
    began = time.perf_counter()
    gone = await pruner.prune_at(job.now_us(), most=flat)
    flat_s = time.perf_counter() - began
    return {"configs": results, "flat_rows": gone, "flat_rate": gone / flat_s}


# -------------------------------------------------------------------------------- 3. keep


async def w2_child(url: str, jobs_n: int, retention_ms: int) -> dict[str, Any]:
    """bench/nilo.py's W2 (one process, 4 workers), its queue given `retention_ms`."""
    import nilo

    nilo.queue = functools.partial(nilo.queue, retention_ms=retention_ms)  # type: ignore[assignment]
    args = argparse.Namespace(
        url=url, jobs=jobs_n, workers=4, poll_ms=1_000, no_fill=False, cap_s=120.0
    )
    result = await nilo.w2(args)
    store = job.Table(url)
    stats = await store.stats()
    await store.close()
    return {**result, "retention_ms": retention_ms, "kept": stats.done}


def run_w2(url: str, jobs_n: int, retention_ms: int) -> dict[str, Any]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "w2",
        "--url",
        url,
        "--jobs",
        str(jobs_n),
    ]
    argv += ["--retention-ms", str(retention_ms)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    for line in done.stdout.splitlines():
        if line.startswith(common.RESULT):
            return dict(json.loads(line[len(common.RESULT) :]))
    raise RuntimeError(f"W2 gave no result: {done.stderr[-2000:]}")


def keep_part(places: Places, stores: list[str], jobs_n: int, reps: int) -> dict[str, Any]:
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rep in range(reps):
        order = (RETENTION_MS, 0) if rep % 2 == 0 else (0, RETENTION_MS)
        for retention in order:
            for store in stores if rep % 2 == 0 else stores[::-1]:
                with places.database(store) as url:
                    r = run_w2(url, jobs_n, retention)
                runs.setdefault((store, retention), []).append(r)
                print(
                    f"  {store} retention_ms={retention}: {r['rate']:,.0f} jobs/s"
                    f" (kept {r['kept']})",
                    file=sys.stderr,
                )
    summary = {}
    for store in stores:
        kept = statistics.median(r["rate"] for r in runs[(store, RETENTION_MS)])
        gone = statistics.median(r["rate"] for r in runs[(store, 0)])
        summary[store] = {
            "keep_rate": kept,
            "delete_rate": gone,
            "ratio": kept / gone,
            "keep_runs": [r["rate"] for r in runs[(store, RETENTION_MS)]],
            "delete_runs": [r["rate"] for r in runs[(store, 0)]],
            "kept": [r["kept"] for r in runs[(store, RETENTION_MS)]],
        }
    return summary


# ------------------------------------------------------------------------------ the report

NAMES = {"pg": "PostgreSQL", "sqlite": "SQLite"}


def report_paging(store: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n### Keyset pages, {NAMES[store]}: jobs.find(where, limit=100)\n")
    print(
        "| where | matching rows | page 1 p50 / p95 | page N | page N p50 / p95 | N ÷ 1 p50 | p95 |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        a, b = r["first"], r["deep"]
        print(
            f"| {r['case']} | {r['matching']:,} | {a['p50_ms']:.2f} / {a['p95_ms']:.2f} ms"
            f" | {r['page']} | {b['p50_ms']:.2f} / {b['p95_ms']:.2f} ms"
            f" | {r['ratio_p50']:.2f} | {r['ratio_p95']:.2f} |"
        )
    for r in rows:
        print(f"\n{r['case']}, page {r['page']}: {r['sql']}")
        for line in r["plan"]:
            print(f"    {line}")


def report_prune(store: str, part: dict[str, Any]) -> None:
    print(f"\n### Claims while pruning, {NAMES[store]} (done rows all past the retention)\n")
    print(
        "| BATCH | REST | claim p50 off → on | claim p99 off → on | p99 on ÷ off"
        " | per round, median | batch p50 / p99 | pruning (share of time)"
        " | claims overlapping a batch (their p50) | pruned | rows/s |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in part["configs"]:
        a, b = r["off"], r["on"]
        print(
            f"| {r['batch']} | {r['rest']:g} | {a['p50_ms']:.2f} → {b['p50_ms']:.2f} ms"
            f" | {a['p99_ms']:.2f} → {b['p99_ms']:.2f} ms | {r['ratio_p99']:.2f}"
            f" | {r['round_ratio_p99']:.2f}"
            f" | {r['batch_p50_ms'] or 0:.1f} / {r['batch_p99_ms'] or 0:.1f} ms"
            f" | {r['duty']:.1%} | {r['overlapped']:.1%} ({r['overlapped_p50_ms'] or 0:.2f} ms)"
            f" | {r['pruned']:,} | {r['prune_rate']:,.0f} |"
        )
    print(
        f"\nclaims timed per setting: {part['configs'][0]['off']['samples']:,} without,"
        f" {part['configs'][0]['on']['samples']:,} with the pruner (first row);"
        f" prune with no rest (prune_at): {part['flat_rows']:,} rows at"
        f" {part['flat_rate']:,.0f} rows/s"
    )


def report_keep(summary: dict[str, Any], jobs_n: int) -> None:
    print(f"\n### The cost of keeping history: W2, {jobs_n:,} queued no-op jobs, 1 process × 4\n")
    print("| store | retention_ms=3,600,000 | retention_ms=0 | kept ÷ deleted | runs |")
    print("| --- | ---: | ---: | ---: | --- |")
    for store, s in summary.items():
        runs = ", ".join(f"{v:,.0f}" for v in s["keep_runs"])
        runs += "; " + ", ".join(f"{v:,.0f}" for v in s["delete_runs"])
        print(
            f"| {NAMES[store]} | {s['keep_rate']:,.0f} jobs/s | {s['delete_rate']:,.0f} jobs/s"
            f" | {s['ratio']:.2f} | {runs} |"
        )


# ---------------------------------------------------------------------------------- main


def machine_note() -> str:
    load = Path("/proc/loadavg").read_text().split()[:3]
    return f"{os.cpu_count()} cores, load average {' '.join(load)}, SQLite {sqlite3.sqlite_version}"


async def store_parts(
    places: Places, store: str, args: argparse.Namespace, out: dict[str, Any]
) -> None:
    with places.database(store) as url:
        table = job.Table(url)
        await table.create_missing()
        base_us = job.now_us() - 10 * DAY_US
        began = time.perf_counter()
        fill(url, args.rows, base_us)
        print(
            f"{store}: {args.rows:,} dead + {args.rows:,} done rows in"
            f" {time.perf_counter() - began:.1f} s",
            file=sys.stderr,
        )
        await table.open()
        jobs = job.Jobs(kinds=[Noop, Mail], store=table)
        if "paging" in args.only:
            out[f"paging_{store}"] = await paging(url, jobs, args.rows, base_us, args.samples)
            report_paging(store, out[f"paging_{store}"])
        if "prune" in args.only:
            configs = [(_prune.BATCH, float(_prune.REST))]
            for pair in filter(None, args.sweep.split(",")):
                b, r = pair.split(":")
                if (int(b), float(r)) not in configs:
                    configs.append((int(b), float(r)))
            part = await prune_part(
                table, url, args.rows, base_us, configs, args.rounds, args.phase_s, args.flat
            )
            out[f"prune_{store}"] = part
            report_prune(store, part)
        await table.close()


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    print(f"nilo_job from {os.path.dirname(job.__file__)}", file=sys.stderr)
    out: dict[str, Any] = {"machine_start": machine_note(), "args": vars(args)}
    print(f"# History benchmark ({'quick' if args.quick else 'full'})\n")
    print(f"- {out['machine_start']}; nilo_job snapshot {os.environ.get(SNAPSHOT, '—')}")
    print(
        f"- rows: {args.rows:,} dead + {args.rows:,} done; BATCH={_prune.BATCH} REST={_prune.REST}"
    )
    with tempfile.TemporaryDirectory(prefix="nilo-history-") as tmp:
        places = Places(args.pg, Path(tmp))
        for store in args.stores if args.only & {"paging", "prune"} else []:
            await store_parts(places, store, args, out)
        if "keep" in args.only:
            summary = keep_part(places, args.stores, args.jobs, args.repeat)
            out["keep"] = summary
            report_keep(summary, args.jobs)
    out["machine_end"] = machine_note()
    print(f"\n- at the end: {out['machine_end']}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", nargs="?", default="all", choices=["all", "w2"])
    parser.add_argument("--quick", action="store_true", help="100,000 rows, W2 of 2,000 × 1")
    parser.add_argument("--stores", default="pg,sqlite")
    parser.add_argument("--only", default="paging,prune,keep")
    parser.add_argument(
        "--pg", default=os.environ.get("NILO_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
    )
    parser.add_argument("--rows", type=int, help="dead rows and done rows (1,000,000)")
    parser.add_argument("--samples", type=int, help="find calls per page and case (300)")
    parser.add_argument("--rounds", type=int, help="off/on rounds per pruner setting (18)")
    parser.add_argument("--phase-s", type=float, help="seconds of claims per phase (1)")
    parser.add_argument("--sweep", default="", help="more BATCH:REST pairs, e.g. 50:20,200:100")
    parser.add_argument("--flat", type=int, help="rows pruned with no rest (50,000)")
    parser.add_argument("--jobs", type=int, help="W2 jobs (10,000)")
    parser.add_argument("--repeat", type=int, help="W2 repetitions (3)")
    parser.add_argument("--json", help="also write every figure here")
    parser.add_argument("--url", help="w2: the database")
    parser.add_argument("--retention-ms", type=int, default=RETENTION_MS, help="w2")
    args = parser.parse_args()
    quick = args.quick
    for name, full, small in (
        ("rows", 1_000_000, 100_000),
        ("samples", 300, 100),
        ("rounds", 18, 6),
        ("phase_s", 1.0, 1.0),
        ("flat", 50_000, 10_000),
        ("jobs", 10_000, 2_000),
        ("repeat", 3, 1),
    ):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)

    if args.action == "w2":

        async def child() -> None:
            common.emit(await w2_child(args.url, args.jobs, args.retention_ms))
            sys.stdout.flush()
            os._exit(0)

        asyncio.run(child())
        return 0

    if SNAPSHOT not in os.environ:  # measure a copy of nilo_job/, as bench/run.py does
        import run

        with tempfile.TemporaryDirectory(prefix="nilo-history-src-") as src:
            os.environ[SNAPSHOT] = run.snapshot_nilo_job(Path(src))
            return subprocess.call([sys.executable, *sys.argv])

    args.stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    args.only = {s.strip() for s in args.only.split(",")}
    out = asyncio.run(run_all(args))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
