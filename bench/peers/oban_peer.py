"""oban's side of the benchmark (the Python Oban on PyPI; run with bench/.peers/venv/bin/python).

`Oban.create_pool` (psycopg 3 pool, its defaults: 1 to 10 connections), a `@worker` class with a
no-op `async def process`, `oban.enqueue(Noop.new(...))` to push, `enqueue_many` for a bulk
push, and a queue `{"default": 4}` for the worker with every other setting at its default.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import psycopg
from oban import Oban, worker
from oban.schema import install

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common


def _nothing(_i: int) -> None:
    return None


_on_run = _nothing


@worker(queue="default")
class Noop:
    async def process(self, job: Any) -> None:
        _on_run(job.args["i"])


async def pool(url: str, **sizes: Any) -> Any:
    return await Oban.create_pool(url, **sizes)


async def installed(url: str, **sizes: Any) -> Any:
    p = await pool(url, **sizes)
    async with p.connection() as conn:
        cur = await conn.execute("SELECT to_regclass('oban_jobs') IS NOT NULL")
        (present,) = await cur.fetchone()
    if not present:
        await install(p)
    return p


async def client(url: str, **sizes: Any) -> Oban:
    return await Oban(pool=await installed(url, **sizes)).start()


async def server(url: str, args: argparse.Namespace) -> Oban:
    return await Oban(pool=await pool(url), queues={"default": args.workers}).start()


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


async def w1_one(args: argparse.Namespace) -> dict[str, Any]:
    oban = await client(args.url)
    watch = common.Stopwatch(args.cap_s)
    for i in range(args.jobs):
        if watch.over():
            break
        await oban.enqueue(Noop.new({"i": i}))
        watch.done += 1
    return watch.result(args.jobs)


async def w1_pool16(args: argparse.Namespace) -> dict[str, Any]:
    oban = await client(args.url, min_size=args.connections, max_size=args.connections)

    async def producer(first: int, count: int) -> None:
        for i in range(first, first + count):
            if watch.over():
                return
            await oban.enqueue(Noop.new({"i": i}))
            watch.done += 1

    shares = split(args.jobs, args.producers)
    starts = [sum(shares[:k]) for k in range(len(shares))]
    watch = common.Stopwatch(args.cap_s)
    await asyncio.gather(*(producer(s, n) for s, n in zip(starts, shares, strict=True)))
    return watch.result(args.jobs, note=f"psycopg pool of {args.connections}")


async def w1_bulk(args: argparse.Namespace) -> dict[str, Any]:
    oban = await client(args.url)
    watch = common.Stopwatch(args.cap_s)
    for first in range(0, args.jobs, args.batch):
        if watch.over():
            break
        inserted = await oban.enqueue_many(
            [Noop.new({"i": i}) for i in range(first, min(first + args.batch, args.jobs))]
        )
        watch.done += len(inserted)
    return watch.result(args.jobs, batch=args.batch)


async def fill(args: argparse.Namespace) -> dict[str, Any]:
    oban = await client(args.url)
    for first in range(0, args.jobs, 1_000):
        await oban.enqueue_many(
            [Noop.new({"i": i}) for i in range(first, min(first + 1_000, args.jobs))]
        )
    return {"filled": args.jobs}


async def w2(args: argparse.Namespace) -> dict[str, Any]:
    global _on_run
    if not args.no_fill:
        p = await installed(args.url)
        filler = Oban(pool=p, name="filler")
        for first in range(0, args.jobs, 1_000):
            await filler.enqueue_many(
                [Noop.new({"i": i}) for i in range(first, min(first + 1_000, args.jobs))]
            )
    counter = common.Counter(args.jobs)
    _on_run = lambda _i: counter.hit()  # noqa: E731
    reader = await psycopg.AsyncConnection.connect(args.url, autocommit=True)

    async def remaining() -> int:
        cur = await reader.execute(common.UNDONE["oban"])
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    began = time.perf_counter()
    await server(args.url, args)
    result = await common.until_durable(counter, began, args.cap_s, remaining)
    await reader.close()
    return {**result, "queue_limit": args.workers}


async def w2_child(args: argparse.Namespace) -> None:
    global _on_run
    p = await pool(args.url)
    _on_run = lambda _i: common.run_mark()  # noqa: E731
    await common.ready_then_go()
    await Oban(pool=p, queues={"default": args.workers}).start()
    await asyncio.Event().wait()


async def w3_inproc(args: argparse.Namespace) -> dict[str, Any]:
    global _on_run
    await installed(args.url)
    oban = await server(args.url, args)
    started: dict[int, int] = {}
    arrived = asyncio.Event()

    def seen(i: int) -> None:
        started[i] = time.perf_counter_ns()
        arrived.set()

    _on_run = seen
    await asyncio.sleep(1.0)
    latencies: list[int] = []
    warm = max(3, args.samples // 20)
    for i in range(warm + args.samples):
        arrived.clear()
        before = time.perf_counter_ns()
        await oban.enqueue(Noop.new({"i": i}))
        await asyncio.wait_for(arrived.wait(), 30)
        if i >= warm:
            latencies.append(started[i] - before)
        await asyncio.sleep(0.005)
    return common.percentiles(latencies)


async def w3_worker(args: argparse.Namespace) -> None:
    global _on_run
    _on_run = common.start_mark
    await server(args.url, args)
    await asyncio.sleep(1.0)
    os.write(1, b"READY\n")
    await asyncio.Event().wait()


async def w3_xproc(args: argparse.Namespace) -> dict[str, Any]:
    oban = await client(args.url)

    async def push(i: int) -> None:
        await oban.enqueue(Noop.new({"i": i}))

    return await common.cross_process_latency(
        common.child_argv("w3_worker", args), push, args.samples
    )


async def idle_worker(args: argparse.Namespace) -> None:
    await installed(args.url)
    await server(args.url, args)
    await common.answer_snapshots(lambda: (-1, -1))


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
        },
        loop="auto",  # its CLI runs on uvloop when installed (it is: a dependency)
    )
