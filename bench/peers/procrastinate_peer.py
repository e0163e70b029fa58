"""procrastinate's side of the benchmark (run with bench/.peers/venv/bin/python).

An `App` over `PsycopgConnector` (psycopg 3, its default pool), a no-op `async def` task,
`defer_async` to push, `batch_defer_async` for a bulk push, and `run_worker_async(concurrency=4)`
with its other defaults (LISTEN/NOTIFY on, polling every 5 s, finished jobs kept).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import procrastinate
import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common


def _nothing(_i: int) -> None:
    return None


_on_run = _nothing


def make_app(url: str, **pool: Any) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url, **pool))

    @app.task(name="noop")
    async def noop(i: int) -> None:
        _on_run(i)

    return app


async def opened(url: str, **pool: Any) -> procrastinate.App:
    app = make_app(url, **pool)
    await app.open_async()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
        (installed,) = await cur.fetchone()  # type: ignore[misc]
    if not installed:
        await app.schema_manager.apply_schema_async()
    return app


def noop_task(app: procrastinate.App) -> Any:
    return app.tasks["noop"]


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


async def run_worker(app: procrastinate.App, args: argparse.Namespace) -> None:
    await app.run_worker_async(concurrency=args.workers, install_signal_handlers=False)


async def w1_one(args: argparse.Namespace) -> dict[str, Any]:
    app = await opened(args.url)
    task = noop_task(app)
    watch = common.Stopwatch(args.cap_s)
    for i in range(args.jobs):
        if watch.over():
            break
        await task.defer_async(i=i)
        watch.done += 1
    return watch.result(args.jobs)


async def w1_pool16(args: argparse.Namespace) -> dict[str, Any]:
    app = await opened(args.url, min_size=args.connections, max_size=args.connections)
    task = noop_task(app)

    async def producer(first: int, count: int) -> None:
        for i in range(first, first + count):
            if watch.over():
                return
            await task.defer_async(i=i)
            watch.done += 1

    shares = split(args.jobs, args.producers)
    starts = [sum(shares[:k]) for k in range(len(shares))]
    watch = common.Stopwatch(args.cap_s)
    await asyncio.gather(*(producer(s, n) for s, n in zip(starts, shares, strict=True)))
    return watch.result(args.jobs, note=f"psycopg pool of {args.connections}")


async def w1_bulk(args: argparse.Namespace) -> dict[str, Any]:
    app = await opened(args.url)
    task = noop_task(app)
    watch = common.Stopwatch(args.cap_s)
    for first in range(0, args.jobs, args.batch):
        if watch.over():
            break
        ids = await task.batch_defer_async(
            *({"i": i} for i in range(first, min(first + args.batch, args.jobs)))
        )
        watch.done += len(ids)
    return watch.result(args.jobs, batch=args.batch)


async def fill(args: argparse.Namespace) -> dict[str, Any]:
    app = await opened(args.url)
    task = noop_task(app)
    for first in range(0, args.jobs, 1_000):
        await task.batch_defer_async(
            *({"i": i} for i in range(first, min(first + 1_000, args.jobs)))
        )
    await app.close_async()
    return {"filled": args.jobs}


async def w2(args: argparse.Namespace) -> dict[str, Any]:
    global _on_run
    if not args.no_fill:
        await fill(args)
    app = make_app(args.url)
    await app.open_async()
    counter = common.Counter(args.jobs)
    _on_run = lambda _i: counter.hit()  # noqa: E731
    reader = await psycopg.AsyncConnection.connect(args.url, autocommit=True)

    async def remaining() -> int:
        cur = await reader.execute(common.UNDONE["procrastinate"])
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    began = time.perf_counter()
    running = asyncio.create_task(run_worker(app, args))
    result = await common.until_durable(counter, began, args.cap_s, remaining)
    del running
    await reader.close()
    return {**result, "concurrency": args.workers}


async def w2_child(args: argparse.Namespace) -> None:
    global _on_run
    app = make_app(args.url)
    await app.open_async()
    _on_run = lambda _i: common.run_mark()  # noqa: E731
    await common.ready_then_go()
    await run_worker(app, args)


async def w3_inproc(args: argparse.Namespace) -> dict[str, Any]:
    global _on_run
    app = await opened(args.url)
    task = noop_task(app)
    started: dict[int, int] = {}
    arrived = asyncio.Event()

    def seen(i: int) -> None:
        started[i] = time.perf_counter_ns()
        arrived.set()

    _on_run = seen
    running = asyncio.create_task(run_worker(app, args))
    await asyncio.sleep(1.0)
    latencies: list[int] = []
    warm = max(3, args.samples // 20)
    for i in range(warm + args.samples):
        arrived.clear()
        before = time.perf_counter_ns()
        await task.defer_async(i=i)
        await asyncio.wait_for(arrived.wait(), 30)
        if i >= warm:
            latencies.append(started[i] - before)
        await asyncio.sleep(0.005)
    del running
    return common.percentiles(latencies)


async def w3_worker(args: argparse.Namespace) -> None:
    global _on_run
    app = make_app(args.url)
    await app.open_async()
    _on_run = common.start_mark
    running = asyncio.create_task(run_worker(app, args))
    await asyncio.sleep(1.0)
    os.write(1, b"READY\n")
    await running


async def w3_xproc(args: argparse.Namespace) -> dict[str, Any]:
    app = await opened(args.url)
    task = noop_task(app)

    async def push(i: int) -> None:
        await task.defer_async(i=i)

    return await common.cross_process_latency(
        common.child_argv("w3_worker", args), push, args.samples
    )


async def idle_worker(args: argparse.Namespace) -> None:
    app = await opened(args.url)
    running = asyncio.create_task(run_worker(app, args))
    await common.answer_snapshots(lambda: (-1, -1))
    del running


if __name__ == "__main__":
    common.main(
        {
            "w1_one": w1_one,
            "w1_pool16": w1_pool16,
            "w1_bulk": w1_bulk,
            "fill": fill,
            "w2": w2,
            "w2_child": w2_child,
            "w3_inproc": w3_inproc,
            "w3_worker": w3_worker,
            "w3_xproc": w3_xproc,
            "idle_worker": idle_worker,
        }
    )
