"""nilo-job's side of the benchmark, through its public API only (run with the project's .venv).

    .venv/bin/python bench/nilo.py ACTION --url postgresql://…|sqlite:///…|mariadb://… [--jobs N] …

Every action prints one `RESULT {json}` line (see bench/common.py). The job is a no-op
`async def run`; a hook set per action counts or timestamps runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nilo_job as job
from nilo_job.store.contract import Released

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

print(f"nilo_job from {os.path.dirname(job.__file__)}", file=sys.stderr)


def _nothing(_i: int) -> None:
    return None


_on_run = _nothing


@dataclass
class Noop:
    nilo_job = "noop"
    retry = job.Retry.NONE

    i: int = 0

    async def run(self) -> None:
        _on_run(self.i)


class ClaimCount:
    """An observer (`jobs.observe`) that counts the claims `serve` makes.

    Written against the observer protocol loosely on purpose (any hook it does not know is a
    no-op that returns a null context manager), so that the protocol can grow while the
    benchmark keeps working.
    """

    def __init__(self) -> None:
        self.claims = 0
        self.rows = 0

    def claimed(self, rows: Any, *_rest: Any) -> None:
        self.claims += 1
        self.rows += rows if isinstance(rows, int) else len(rows)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *_args, **_kwargs: contextlib.nullcontext()


def queue(store: Any, args: argparse.Namespace, **options: Any) -> job.Jobs:
    return job.Jobs(
        kinds=[Noop], store=store, workers=args.workers, poll_ms=args.poll_ms, **options
    )


async def ready_store(url: str) -> Any:
    store = job.Table(url)
    await store.create_missing()
    await store.open()
    return store


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


# ------------------------------------------------------------------------------------- W1


async def w1_one(args: argparse.Namespace) -> dict[str, Any]:
    """A loop of `await jobs.push(Noop(i))`: one producer, each push its own transaction."""
    jobs = queue(await ready_store(args.url), args)
    watch = common.Stopwatch(args.cap_s)
    for i in range(args.jobs):
        if watch.over():
            break
        await jobs.push(Noop(i))
        watch.done += 1
    return watch.result(args.jobs)


async def w1_paired(args: argparse.Namespace) -> dict[str, Any]:
    """W1 one by one, nilo, raw SQL on psycopg's async connection and the same INSERT on its
    sync connection, alternated push by push in this process (PostgreSQL, `common.alternated`),
    each on its own connection: all meet the same moments of a shared machine, so their ratios
    hold still where two separate 8-second runs can differ by two. `rate` is nilo's, `raw_rate`
    and `raw_sync_rate` raw SQL's (`bench/raw.py`'s table and INSERT), `ratio` and `ratio_sync`
    nilo's rate ÷ each of those. On MariaDB: nilo against raw SQL's INSERT on an asyncmy
    connection in autocommit (`raw.maria_insert`), the store's driver."""
    import raw

    if common.is_mysql(args.url):
        return await _w1_paired_mariadb(args)
    import psycopg

    jobs = queue(await ready_store(args.url), args)
    conn = await raw.pg_ready(args.url)

    async def raw_insert(i: int) -> None:
        cur = await conn.execute(raw.PG_INSERT, (raw.payload(i), raw.now_us()))
        await cur.fetchone()

    async def nilo_push(i: int) -> None:
        await jobs.push(Noop(i))

    sync_conn = psycopg.connect(args.url, autocommit=True)

    async def raw_sync_insert(i: int) -> None:
        sync_conn.execute(raw.PG_INSERT, (raw.payload(i), raw.now_us())).fetchone()

    both = [("nilo", nilo_push), ("raw", raw_insert), ("raw_sync", raw_sync_insert)]
    done, spent = await common.alternated(both, args.jobs, args.cap_s)
    await conn.close()
    sync_conn.close()
    nilo_s, raw_s, sync_s = (spent[name] for name in ("nilo", "raw", "raw_sync"))
    return common.rate(
        done,
        nilo_s,
        raw_rate=done / raw_s,
        ratio=raw_s / nilo_s,
        raw_sync_rate=done / sync_s,
        ratio_sync=sync_s / nilo_s,
        capped=done < args.jobs,
    )


async def _w1_paired_mariadb(args: argparse.Namespace) -> dict[str, Any]:
    """`w1_paired` on MariaDB: nilo's push and raw SQL's INSERT, both in autocommit through
    asyncmy, alternated push by push."""
    import raw

    jobs = queue(await ready_store(args.url), args)
    conn = await raw.maria_ready(args.url)
    cur = conn.cursor()

    async def raw_insert(i: int) -> None:
        await raw.maria_insert(cur, i)

    async def nilo_push(i: int) -> None:
        await jobs.push(Noop(i))

    both = [("nilo", nilo_push), ("raw", raw_insert)]
    done, spent = await common.alternated(both, args.jobs, args.cap_s)
    await cur.close()
    conn.close()
    nilo_s, raw_s = spent["nilo"], spent["raw"]
    return common.rate(
        done, nilo_s, raw_rate=done / raw_s, ratio=raw_s / nilo_s, capped=done < args.jobs
    )


async def w1_pool16(args: argparse.Namespace) -> dict[str, Any]:
    """16 asyncio tasks pushing at once through one store: on PostgreSQL `job.Table(pool)` over
    a pool of `--connections` connections, on SQLite the store's one connection."""
    if common.is_sqlite(args.url):
        store = await ready_store(args.url)
        note = "job.Table(sqlite) (one connection in the store's thread)"
    else:
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(
            args.url,
            min_size=args.connections,
            max_size=args.connections,
            kwargs={"autocommit": True},
            open=False,
        )
        await pool.open(wait=True)
        store = job.Table(pool)
        await store.create_missing()
        note = f"job.Table(AsyncConnectionPool(min_size=max_size={args.connections}))"
    jobs = queue(store, args)

    async def producer(first: int, count: int) -> None:
        for i in range(first, first + count):
            if watch.over():
                return
            await jobs.push(Noop(i))
            watch.done += 1

    shares = split(args.jobs, args.producers)
    starts = [sum(shares[:k]) for k in range(len(shares))]
    watch = common.Stopwatch(args.cap_s)
    await asyncio.gather(*(producer(s, n) for s, n in zip(starts, shares, strict=True)))
    return watch.result(args.jobs, note=note)


async def w1_bulk(args: argparse.Namespace) -> dict[str, Any]:
    """`jobs.push_many(values)` in batches of `--batch`."""
    jobs = queue(await ready_store(args.url), args)
    values = [Noop(i) for i in range(args.jobs)]
    watch = common.Stopwatch(args.cap_s)
    for first in range(0, args.jobs, args.batch):
        if watch.over():
            break
        watch.done += len(await jobs.push_many(values[first : first + args.batch]))
    return watch.result(args.jobs, batch=args.batch)


# ------------------------------------------------------------------------------------- W2


async def fill(args: argparse.Namespace) -> dict[str, Any]:
    """Queue `--jobs` rows (not timed): the state W2 starts from."""
    jobs = queue(await ready_store(args.url), args)
    for first in range(0, args.jobs, 1_000):
        await jobs.push_many([Noop(i) for i in range(first, min(first + 1_000, args.jobs))])
    return {"filled": args.jobs}


async def w2(args: argparse.Namespace) -> dict[str, Any]:
    """`--jobs` rows queued first; then time from the start of `serve()` (one process,
    `--workers`) until the table shows every row done (its end durable)."""
    global _on_run
    if not args.no_fill:
        await fill(args)
    jobs = queue(job.Table(args.url), args)
    counter = common.Counter(args.jobs)
    _on_run = lambda _i: counter.hit()  # noqa: E731
    async with undone_reader(args.url) as remaining:
        began = time.perf_counter()
        serving = asyncio.create_task(jobs.serve(grace_ms=1_000))
        result = await common.until_durable(counter, began, args.cap_s, remaining)
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
    return {**result, "workers": args.workers}


@contextlib.asynccontextmanager
async def undone_reader(url: str) -> AsyncIterator[Callable[[], Awaitable[int]]]:
    """A count of the rows not yet done (a done row leaves `nilo_jobs`), read on a connection
    of its own: committed ends only."""
    if common.is_sqlite(url):
        conn = sqlite3.connect(common.sqlite_path(url))

        async def lite() -> int:
            return int(conn.execute(common.UNDONE["nilo"]).fetchone()[0])

        try:
            yield lite
        finally:
            conn.close()
        return
    if common.is_mysql(url):
        import raw

        maria = await raw.maria_connect(url)

        async def maria_count() -> int:
            async with maria.cursor() as cur:  # autocommit: each count sees the latest commits
                await cur.execute(common.UNDONE["nilo"])
                row = await cur.fetchone()
            return int(row[0]) if row else 0

        try:
            yield maria_count
        finally:
            maria.close()
        return
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as pg:

        async def count() -> int:
            cur = await pg.execute(common.UNDONE["nilo"])
            row = await cur.fetchone()
            return int(row[0]) if row else 0

        yield count


async def w2_child(args: argparse.Namespace) -> None:
    """A worker process of the multi-process W2: READY, GO, then serve; a byte per run."""
    global _on_run
    store = job.Table(args.url)
    await store.open()
    jobs = queue(store, args)
    _on_run = lambda _i: common.run_mark()  # noqa: E731
    await common.ready_then_go()
    await jobs.serve(grace_ms=1_000)


# ------------------------------------------------------------------------------------- W3


async def w3_inproc(args: argparse.Namespace) -> dict[str, Any]:
    """serve() running and idle in this process: `perf_counter_ns()` before `push`, and again
    as the run starts."""
    global _on_run
    store = await ready_store(args.url)
    jobs = queue(store, args)
    started: dict[int, int] = {}
    arrived = asyncio.Event()

    def seen(i: int) -> None:
        started[i] = time.perf_counter_ns()
        arrived.set()

    _on_run = seen
    latencies: list[int] = []
    warm = max(3, args.samples // 20)
    async with jobs.serving(grace_ms=1_000):
        await asyncio.sleep(0.5)
        for i in range(warm + args.samples):
            arrived.clear()
            before = time.perf_counter_ns()
            await jobs.push(Noop(i))
            await asyncio.wait_for(arrived.wait(), 30)
            if i >= warm:
                latencies.append(started[i] - before)
            await asyncio.sleep(0.005)
    return common.percentiles(latencies)


class DoneMark:
    """An observer (`jobs.observe`) that writes `DONE i ns` as each run's end is told, which is
    once the end is written: push → done for W3's lone jobs (one at a time, so the row is the
    last one started)."""

    def __init__(self) -> None:
        self.last = -1

    def started(self, i: int) -> None:
        self.last = i
        common.start_mark(i)

    def ended(self, *_args: Any) -> None:
        os.write(1, f"DONE {self.last} {time.time_ns()}\n".encode())

    def __getattr__(self, _name: str) -> Any:
        return lambda *_a, **_k: contextlib.nullcontext()


async def w3_worker(args: argparse.Namespace) -> None:
    """The idle worker process of cross-process W3: a `START i ns` line per run, and a
    `DONE i ns` line once its end is written."""
    global _on_run
    store = job.Table(args.url)
    await store.open()
    jobs = queue(store, args)
    marks = DoneMark()
    jobs.observe(marks)
    _on_run = marks.started
    async with jobs.serving(grace_ms=1_000):
        await asyncio.sleep(0.2)
        os.write(1, b"READY\n")
        await asyncio.Event().wait()


async def w3_xproc(args: argparse.Namespace) -> dict[str, Any]:
    """A producer here, an idle worker (poll_ms as given) in another process."""
    store = await ready_store(args.url)
    jobs = queue(store, args)

    async def push(i: int) -> None:
        await jobs.push(Noop(i))

    # Both stores wake a worker in another process (NOTIFY; SQLite's datagram beside the file),
    # so the pushes come a few milliseconds apart, as a web process's would.
    gap = (0.005, 0.02)
    return await common.cross_process_latency(
        common.child_argv("w3_worker", args), push, args.samples, gap_s=gap, done=True
    )


# ----------------------------------------------------------------------------------- idle


async def idle_worker(args: argparse.Namespace) -> None:
    """A worker process with nothing to do; answers SNAP with its claim and statement counts."""
    statements = common.StatementCount() if common.is_sqlite(args.url) else None
    store = await ready_store(args.url)
    jobs = queue(store, args)
    claims = ClaimCount()
    jobs.observe(claims)
    async with jobs.serving(grace_ms=1_000):
        await common.answer_snapshots(
            lambda: (claims.claims, statements.value if statements else -1)
        )


# ----------------------------------------------------------------------------- claim cost


def _add_dead_pg(url: str, n: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, error, detail,"
            " died_at) SELECT 'noop', '{\"i\":0}', 'dead', g, 1, 'Boom', 'no-op failed', g"
            " FROM generate_series(1, %s) AS g",
            (n,),
        )


def _add_dead_sqlite(path: str, n: int) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < ?) "
            "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, error, detail, "
            "died_at) SELECT 'noop', '{\"i\":0}', 'dead', x, 1, 'Boom', 'no-op failed', x "
            "FROM g",
            (n,),
        )
        conn.execute("COMMIT")


async def _maria(url: str, *statements: str) -> None:
    """`statements` in autocommit on an asyncmy connection of this script's own."""
    import raw

    conn = await raw.maria_connect(url)
    try:
        async with conn.cursor() as cur:
            for statement in statements:
                await cur.execute(statement)
                await cur.fetchall()
    finally:
        conn.close()


async def _add_dead_mariadb(url: str, n: int) -> None:
    """`n` dead rows, inserted from MariaDB's Sequence engine (`seq_1_to_N`, a table that
    exists in every database) in statements of 100,000 rows, each its own transaction."""
    step = 100_000
    await _maria(
        url,
        *(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, error, detail, "
            "died_at) SELECT 'noop', '{\"i\":0}', 'dead', seq, 1, 'Boom', 'no-op failed', seq "
            f"FROM seq_{first}_to_{min(first + step - 1, n)}"
            for first in range(1, n + 1, step)
        ),
    )


async def _explain_mariadb(url: str) -> dict[str, Any]:
    """The plan of the claim's first SELECT (the ids of the rows it may take, which
    `store.claim` sends for one kind, with a limit of 4, locking nothing): `EXPLAIN`'s rows,
    whether every arm reads a range or a ref of an index (no full scan), and from `ANALYZE
    FORMAT=JSON` (which runs it) the index entries each arm read."""
    import json

    import raw

    from nilo_job.store.mysql.statements import claim_params, claim_statement

    query, params = claim_statement(1), claim_params(["noop"], job.now_us(), 4)
    conn = await raw.maria_connect(url)
    try:
        async with conn.cursor() as cur:
            await cur.execute("EXPLAIN " + query, params)
            names = [column[0] for column in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]
            await cur.execute("ANALYZE FORMAT=JSON " + query, params)
            analyzed = json.loads((await cur.fetchone())[0])
    finally:
        conn.close()
    block = analyzed["query_block"]
    union = block.get("union_result", {}).get("query_specifications")
    arms = [arm["query_block"] for arm in union] if union else [block]  # (one arm: no union)
    read = [arm.get("nested_loop", [{}])[0].get("table", {}) for arm in arms]
    return {
        "explain": rows,
        "explain_index_only": all(
            row["type"] in ("range", "ref", "eq_ref", "const") and row["key"] for row in rows
        ),
        "analyze_rows_read": [{"key": t.get("key"), "r_rows": t.get("r_rows")} for t in read],
    }


async def _analyze(url: str) -> None:
    if common.is_mysql(url):
        await _maria(url, "ANALYZE TABLE nilo_jobs")
    elif common.is_sqlite(url):
        with contextlib.closing(sqlite3.connect(common.sqlite_path(url))) as conn:
            conn.execute("ANALYZE")
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE nilo_jobs")


async def claim_cost(args: argparse.Namespace) -> dict[str, Any]:
    """Median latency of `store.claim(kinds, now, lease, limit=4)` on a table with 100 due rows
    (`--url`) against one with 100 due rows and `--dead` dead rows (`--url2`), alternating. On
    MariaDB, also the plan of the claim's SELECT on the big table (`_explain_mariadb`)."""
    assert args.url2, "claim_cost needs --url2"
    stores = {}
    for name, url in (("empty", args.url), ("dead", args.url2)):
        store = job.Table(url)
        await store.create_missing()
        if name == "dead":
            began = time.perf_counter()
            if common.is_sqlite(url):
                _add_dead_sqlite(common.sqlite_path(url), args.dead)
            elif common.is_mysql(url):
                await _add_dead_mariadb(url, args.dead)
            else:
                _add_dead_pg(url, args.dead)
            print(f"{args.dead} dead rows in {time.perf_counter() - began:.1f} s", file=sys.stderr)
        jobs = queue(store, args)
        await jobs.push_many([Noop(i) for i in range(100)])
        await _analyze(url)
        await store.open()
        stores[name] = store
    samples: dict[str, list[int]] = {"empty": [], "dead": []}
    warm = 20
    for k in range(warm + args.samples):
        for name, store in stores.items():
            now = job.now_us()
            before = time.perf_counter_ns()
            rows = await store.claim(["noop"], now, now + 60_000_000, 4)
            took = time.perf_counter_ns() - before
            assert len(rows) == 4, (name, len(rows))
            await store.finish([Released(r.id, r.attempts, r.run_at) for r in rows])
            if k >= warm:
                samples[name].append(took)
    counts = {name: await store.stats() for name, store in stores.items()}
    empty, dead = common.percentiles(samples["empty"]), common.percentiles(samples["dead"])
    plan = await _explain_mariadb(args.url2) if common.is_mysql(args.url2) else {}
    return {
        "empty": empty,
        "dead": dead,
        "dead_rows": counts["dead"].dead,
        "ratio": dead["p50_ms"] / empty["p50_ms"],
        **plan,
    }


if __name__ == "__main__":
    common.main(
        {
            "w1_one": w1_one,
            "w1_paired": w1_paired,
            "w1_pool16": w1_pool16,
            "w1_bulk": w1_bulk,
            "fill": fill,
            "w2": w2,
            "w2_child": w2_child,
            "w3_inproc": w3_inproc,
            "w3_worker": w3_worker,
            "w3_xproc": w3_xproc,
            "idle_worker": idle_worker,
            "claim_cost": claim_cost,
        },
        loop="auto",
    )
