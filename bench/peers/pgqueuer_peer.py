"""pgqueuer's side of the benchmark (run with bench/.peers/venv/bin/python).

pgqueuer is used the way its README shows: an asyncpg connection per QueueManager (the driver it
documents first), `Queries.enqueue` to push (lists for a bulk push), and `QueueManager.run()` with
its defaults (batch_size=10, no cap on concurrent tasks) for the worker. The job is a no-op
`async def` entrypoint. Named `pgqueuer_peer.py` so that `import pgqueuer` finds the library.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, AsyncpgPoolDriver, Job, Queries, QueueManager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _nothing(_i: int) -> None:
    return None


_on_run = _nothing


async def queries(url: str) -> Queries:
    q = Queries(AsyncpgDriver(await asyncpg.connect(url)))
    if not await q.schema_is_installed():
        await q.install()
    return q


def worker(conn: asyncpg.Connection) -> QueueManager:
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        _on_run(int(job.payload or b"0"))

    return qm


def payload(i: int) -> bytes:
    return str(i).encode()


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


async def w1_one(args: argparse.Namespace) -> dict[str, Any]:
    q = await queries(args.url)
    watch = common.Stopwatch(args.cap_s)
    for i in range(args.jobs):
        if watch.over():
            break
        await q.enqueue("noop", payload(i))
        watch.done += 1
    return watch.result(args.jobs)


async def w1_pool16(args: argparse.Namespace) -> dict[str, Any]:
    await queries(args.url)
    pool = await asyncpg.create_pool(args.url, min_size=args.connections, max_size=args.connections)
    q = Queries(AsyncpgPoolDriver(pool))

    async def producer(first: int, count: int) -> None:
        for i in range(first, first + count):
            if watch.over():
                return
            await q.enqueue("noop", payload(i))
            watch.done += 1

    shares = split(args.jobs, args.producers)
    starts = [sum(shares[:k]) for k in range(len(shares))]
    watch = common.Stopwatch(args.cap_s)
    await asyncio.gather(*(producer(s, n) for s, n in zip(starts, shares, strict=True)))
    return watch.result(args.jobs, note=f"asyncpg pool of {args.connections}")


async def w1_bulk(args: argparse.Namespace) -> dict[str, Any]:
    q = await queries(args.url)
    watch = common.Stopwatch(args.cap_s)
    for first in range(0, args.jobs, args.batch):
        if watch.over():
            break
        idx = range(first, min(first + args.batch, args.jobs))
        await q.enqueue(["noop"] * len(idx), [payload(i) for i in idx], [0] * len(idx))
        watch.done += len(idx)
    return watch.result(args.jobs, batch=args.batch)


async def fill(args: argparse.Namespace) -> dict[str, Any]:
    q = await queries(args.url)
    for first in range(0, args.jobs, 1_000):
        idx = range(first, min(first + 1_000, args.jobs))
        await q.enqueue(["noop"] * len(idx), [payload(i) for i in idx], [0] * len(idx))
    return {"filled": args.jobs}


async def w2(args: argparse.Namespace) -> dict[str, Any]:
    global _on_run
    if not args.no_fill:
        await fill(args)
    qm = worker(await asyncpg.connect(args.url))
    counter = common.Counter(args.jobs)
    _on_run = lambda _i: counter.hit()  # noqa: E731
    reader = await asyncpg.connect(args.url)

    async def remaining() -> int:  # a finished job leaves the queue table for its log
        return int(await reader.fetchval(common.UNDONE["pgqueuer"]))

    began = time.perf_counter()
    running = asyncio.create_task(qm.run())
    result = await common.until_durable(counter, began, args.cap_s, remaining)
    qm.shutdown.set()
    del running
    await reader.close()
    return {**result, "settings": "QueueManager.run() defaults"}


async def w2_child(args: argparse.Namespace) -> None:
    global _on_run
    qm = worker(await asyncpg.connect(args.url))
    _on_run = lambda _i: common.run_mark()  # noqa: E731
    await common.ready_then_go()
    await qm.run()


async def w3_inproc(args: argparse.Namespace) -> dict[str, Any]:
    global _on_run
    q = await queries(args.url)
    qm = worker(await asyncpg.connect(args.url))
    started: dict[int, int] = {}
    arrived = asyncio.Event()

    def seen(i: int) -> None:
        started[i] = time.perf_counter_ns()
        arrived.set()

    _on_run = seen
    running = asyncio.create_task(qm.run())
    await asyncio.sleep(1.0)
    latencies: list[int] = []
    warm = max(3, args.samples // 20)
    for i in range(warm + args.samples):
        arrived.clear()
        before = time.perf_counter_ns()
        await q.enqueue("noop", payload(i))
        await asyncio.wait_for(arrived.wait(), 30)
        if i >= warm:
            latencies.append(started[i] - before)
        await asyncio.sleep(0.005)
    del running
    return common.percentiles(latencies)


async def w3_worker(args: argparse.Namespace) -> None:
    global _on_run
    qm = worker(await asyncpg.connect(args.url))
    _on_run = common.start_mark
    running = asyncio.create_task(qm.run())
    await asyncio.sleep(1.0)
    os.write(1, b"READY\n")
    await running


async def w3_xproc(args: argparse.Namespace) -> dict[str, Any]:
    q = await queries(args.url)

    async def push(i: int) -> None:
        await q.enqueue("noop", payload(i))

    return await common.cross_process_latency(
        common.child_argv("w3_worker", args), push, args.samples
    )


async def w3_paired(args: argparse.Namespace) -> dict[str, Any]:
    """W3 across processes, nilo-job and pgqueuer alternated sample by sample
    (`common.cross_process_alternated`): an idle worker of each in a process of its own
    (nilo-job's is `bench/nilo.py w3_worker` on the project's Python, `--nilo-python`, as in
    its own W3), both pushed to from this process, so that both meet the same moments of a
    shared machine. nilo-job is imported here from the run's copy (PYTHONPATH). `p50_ms` and
    the rest are nilo-job's, `pgqueuer_p50_ms` pgqueuer's, `ratio` nilo-job's p50 ÷ pgqueuer's."""
    import ab

    import nilo_job as job

    Noop = ab.noop_kind(job)
    q = await queries(args.url)
    table = job.Table(args.url)
    await table.create_missing()
    jobs = job.Jobs(kinds=[Noop], store=table)

    async def nilo_push(i: int) -> None:
        await jobs.push(Noop(i))

    async def pgqueuer_push(i: int) -> None:
        await q.enqueue("noop", payload(i))

    nilo_worker = common.child_argv("w3_worker", args)
    nilo_worker[:2] = [args.nilo_python, os.path.join(BENCH, "nilo.py")]
    both = [
        ("nilo", nilo_worker, nilo_push),
        ("pgqueuer", common.child_argv("w3_worker", args), pgqueuer_push),
    ]
    result = await common.cross_process_alternated(both, args.samples)
    await table.close()
    nilo, pgqueuer = result["nilo"], result["pgqueuer"]
    return {
        **nilo,
        **{f"pgqueuer_{name}": value for name, value in pgqueuer.items()},
        "ratio": nilo["p50_ms"] / pgqueuer["p50_ms"],
    }


async def idle_worker(args: argparse.Namespace) -> None:
    await queries(args.url)
    qm = worker(await asyncpg.connect(args.url))
    running = asyncio.create_task(qm.run())
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
            "w3_paired": w3_paired,
            "idle_worker": idle_worker,
        },
        loop="auto",  # its CLI runs on uvloop when installed (it is: a dependency)
    )
