"""huey's side of the SQLite benchmark (run with bench/.peers/venv/bin/python).

`SqliteHuey` with its defaults (WAL, SQLite's default synchronous=FULL), a no-op task, and the
consumer `huey.create_consumer(workers=4, worker_type="thread")` with its other defaults. huey
deletes a task from its table when a worker takes it, so a crash mid-run loses the task: it does
less work per job than a queue that keeps the row until the run ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import sys
import threading
import time
from typing import Any

from huey import SqliteHuey

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common


def _nothing(_i: int) -> None:
    return None


_on_run = _nothing


def make_huey(url: str) -> tuple[SqliteHuey, Any]:
    huey = SqliteHuey("bench", filename=common.sqlite_path(url))

    @huey.task(name="noop")
    def noop(i: int) -> None:
        _on_run(i)

    return huey, noop


async def w1_one(args: argparse.Namespace) -> dict[str, Any]:
    """`noop(i)`: each call enqueues one task in its own commit."""
    _huey, noop = make_huey(args.url)
    watch = common.Stopwatch(args.cap_s)
    for i in range(args.jobs):
        if watch.over():
            break
        noop(i)
        watch.done += 1
    return watch.result(args.jobs)


async def w1_paired(args: argparse.Namespace) -> dict[str, Any]:
    """W1 one by one, nilo-job's `await jobs.push(Noop(i))` and huey's `noop(i)` alternated push
    by push in this process, on this venv's Python, each on a file of its own (both WAL and
    synchronous=FULL, their defaults), each push timed alone (`common.alternated`): both meet
    the same moments of a shared machine. `rate` is nilo-job's, `huey_rate` huey's, `ratio`
    nilo-job's rate ÷ huey's. nilo-job is imported from the run's copy (PYTHONPATH)."""
    import dataclasses

    import nilo_job as job

    @dataclasses.dataclass
    class Noop:
        nilo_job = "noop"
        retry = job.Retry.NONE

        i: int

        async def run(self) -> None:
            return None

    base = common.sqlite_path(args.url)
    _huey, noop = make_huey(f"sqlite:///{base}.huey")
    table = job.Table(f"sqlite:///{base}")
    await table.create_missing()
    jobs = job.Jobs(kinds=[Noop], store=table)

    async def nilo_push(i: int) -> None:
        await jobs.push(Noop(i))

    async def huey_push(i: int) -> None:
        noop(i)

    both = [("nilo", nilo_push), ("huey", huey_push)]
    done, spent = await common.alternated(both, args.jobs, args.cap_s)
    await table.close()
    nilo_s, huey_s = spent["nilo"], spent["huey"]
    return common.rate(
        done, nilo_s, huey_rate=done / huey_s, ratio=huey_s / nilo_s, capped=done < args.jobs
    )


def fill_now(huey: SqliteHuey, noop: Any, jobs: int) -> None:
    """Queue `jobs` tasks in one transaction (huey has no bulk enqueue; not timed)."""
    rows = [(huey.name, huey.serialize_task(noop.s(i)), 0) for i in range(jobs)]
    with contextlib.closing(sqlite3.connect(huey.storage.filename)) as conn, conn:
        conn.executemany("INSERT INTO task (queue, data, priority) VALUES (?, ?, ?)", rows)


async def w2(args: argparse.Namespace) -> dict[str, Any]:
    """`--jobs` tasks queued first; then time from `consumer.start()` (4 worker threads)
    until every task has run."""
    global _on_run
    huey, noop = make_huey(args.url)
    if not args.no_fill:
        fill_now(huey, noop, args.jobs)
    lock = threading.Lock()
    finished = threading.Event()
    count = 0
    done_at = 0.0

    def hit(_i: int) -> None:
        nonlocal count, done_at
        with lock:
            count += 1
            if count == args.jobs:
                done_at = time.perf_counter()
                finished.set()

    _on_run = hit
    consumer = huey.create_consumer(workers=args.workers, worker_type="thread")
    began = time.perf_counter()
    consumer.start()
    if not finished.wait(args.cap_s if args.cap_s > 0 else 3_600):
        return common.rate(count, time.perf_counter() - began, capped=True, workers=args.workers)
    return common.rate(
        args.jobs, done_at - began, capped=False, workers=args.workers, worker_type="thread"
    )


async def w3_worker(args: argparse.Namespace) -> None:
    """The idle worker process of cross-process W3: huey's consumer with its defaults (one
    worker thread, polling from 0.1 s, backing off to 10 s while idle); a `START i ns` line
    per run."""
    global _on_run
    huey, _noop = make_huey(args.url)
    _on_run = common.start_mark
    consumer = huey.create_consumer(worker_type="thread")
    consumer.start()
    os.write(1, b"READY\n")
    await asyncio.Event().wait()


async def w3_xproc(args: argparse.Namespace) -> dict[str, Any]:
    """A producer here (`noop(i)`, its own commit), huey's consumer in another process."""
    _huey, noop = make_huey(args.url)

    async def push(i: int) -> None:
        noop(i)

    return await common.cross_process_latency(
        common.child_argv("w3_worker", args), push, args.samples
    )


async def idle_worker(args: argparse.Namespace) -> None:
    statements = common.StatementCount()
    huey, _noop = make_huey(args.url)
    consumer = huey.create_consumer(workers=args.workers, worker_type="thread")
    consumer.start()
    await common.answer_snapshots(lambda: (-1, statements.value))


if __name__ == "__main__":
    common.main(
        {
            "w1_one": w1_one,
            "w1_paired": w1_paired,
            "w2": w2,
            "w3_worker": w3_worker,
            "w3_xproc": w3_xproc,
            "idle_worker": idle_worker,
        },
        loop="auto",  # huey runs in threads; nilo-job's half of w1_paired on uvloop
    )
