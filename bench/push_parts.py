"""Where a SQLite push's time goes: `jobs.push`, the store's `push` alone, and a raw `sqlite3`
INSERT with its commit in the caller's thread, each 3,000 times one by one, WAL and
`synchronous=FULL`, in one process (a diagnostic, not one of `run.py`'s workloads).

    .venv/bin/python bench/push_parts.py [--pushes 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nilo_job as job
from nilo_job.store.contract import NewRow


@dataclass
class Noop:
    nilo_job = "noop"
    retry = job.Retry.NONE

    n: int

    def run(self) -> None:
        return None


async def through_nilo(path: Path, pushes: int) -> tuple[float, float]:
    """Pushes a second through `jobs.push`, then through the store's `push` alone."""
    table = job.Table(f"sqlite:///{path}")
    await table.create_missing()
    jobs = job.Jobs(kinds=[Noop], store=table)
    for n in range(200):  # warm up
        await jobs.push(Noop(n))
    began = time.perf_counter()
    for n in range(pushes):
        await jobs.push(Noop(n))
    queue_rate = pushes / (time.perf_counter() - began)
    began = time.perf_counter()
    for _ in range(pushes):
        await table.push([NewRow("noop", b'{"n":1}', 0)])
    store_rate = pushes / (time.perf_counter() - began)
    await table.close()
    return queue_rate, store_rate


def raw(path: Path, pushes: int) -> float:
    """Pushes a second as one INSERT and its commit in this thread."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE q (id INTEGER PRIMARY KEY, kind TEXT, payload TEXT, run_at INT)")
        began = time.perf_counter()
        for _ in range(pushes):
            conn.execute(
                "INSERT INTO q (kind, payload, run_at) VALUES (?, ?, ?)", ("noop", '{"n":1}', 0)
            )
        return pushes / (time.perf_counter() - began)
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pushes", type=int, default=3_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        queue_rate, store_rate = asyncio.run(through_nilo(Path(folder) / "q.db", args.pushes))
        raw_rate = raw(Path(folder) / "raw.db", args.pushes)
    print(f"jobs.push          {queue_rate:8,.0f}/s  {queue_rate / raw_rate:.2f} × raw")
    print(f"store.push alone   {store_rate:8,.0f}/s  {store_rate / raw_rate:.2f} × raw")
    print(f"raw INSERT+commit  {raw_rate:8,.0f}/s  1.00")


if __name__ == "__main__":
    main()
