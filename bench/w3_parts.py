"""Where W3's time goes: push → run starts, taken apart inside the queue (a diagnostic).

    .venv/bin/python bench/w3_parts.py [--url postgresql://…|sqlite] [--samples 300]

Two set-ups, each on a fresh database (PostgreSQL) or file (SQLite):

- **one process**: `serve()` idle on this event loop and a push of the same queue, which the
  queue hands straight to the idle worker. Parts: the push up to its store call; the store's
  INSERT and durable commit; back to the hand-over; hand-over → the run starts.
- **two queues** (PostgreSQL only): the push from a second queue with a store of its own, as
  another process would, so the worker learns of the row from the NOTIFY and claims it. Parts:
  the push (to its return); push → the wake-up reaches the serving queue; wake-up → its claim is
  sent; the claim; claim → the run starts.

It wraps a few of the queue's own methods to take the times (`store.push`, `store.claim`, the
producer's `hand_over`, the wake-ups' `wake_at`), so it is a diagnostic for this version of the
code, not a benchmark: `bench/run.py` measures W3 from the outside.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common

import nilo_job as job

marks: dict[str, int] = {}
started = asyncio.Event()


@dataclass
class Noop:
    nilo_job = "noop"
    retry = job.Retry.NONE

    i: int = 0

    async def run(self) -> None:
        marks["run"] = time.perf_counter_ns()
        started.set()


def mark(name: str) -> None:
    marks.setdefault(name, time.perf_counter_ns())


async def sample(
    push: Any, samples: int, parts: list[tuple[str, str, str]]
) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {name: [] for name, _, _ in parts}
    for i in range(samples + 20):
        started.clear()
        marks.clear()
        marks["call"] = time.perf_counter_ns()
        await push(Noop(i))
        mark("returned")
        async with asyncio.timeout(10):
            await started.wait()
        if i >= 20 and all(a in marks and b in marks for _, a, b in parts):
            for name, a, b in parts:
                out[name].append(marks[b] - marks[a])
        await asyncio.sleep(0.005)
    return out


async def one_process(url: str, samples: int) -> dict[str, list[int]]:
    store = job.Table(url)
    await store.create_missing()
    jobs = job.Jobs(kinds=[Noop], store=store)
    push_rows = store.push

    async def timed_push(rows: Any) -> Any:
        mark("insert")
        answer = await push_rows(rows)
        mark("committed")
        return answer

    store.push = timed_push  # type: ignore[method-assign]
    hand_over = jobs._producer.handover.hand_over

    def timed_hand_over(*args: Any) -> None:
        mark("hand_over")
        hand_over(*args)

    jobs._producer.handover.hand_over = timed_hand_over  # type: ignore[method-assign]
    try:
        async with jobs.serving(grace_ms=1_000):
            await asyncio.sleep(0.5)
            return await sample(
                jobs.push,
                samples,
                [
                    ("push → its INSERT is sent", "call", "insert"),
                    ("INSERT + durable commit", "insert", "committed"),
                    ("→ hand-over", "committed", "hand_over"),
                    ("hand-over → run starts", "hand_over", "run"),
                    ("in all", "call", "run"),
                ],
            )
    finally:
        await store.close()


async def two_queues(url: str, samples: int) -> dict[str, list[int]]:
    serving_store, pushing_store = job.Table(url), job.Table(url)
    await serving_store.create_missing()
    worker = job.Jobs(kinds=[Noop], store=serving_store)
    pusher = job.Jobs(kinds=[Noop], store=pushing_store)
    wake_at = worker._wakeups.wake_at

    def timed_wake_at(run_at: int | None) -> None:
        mark("woken")
        wake_at(run_at)

    worker._wakeups.wake_at = timed_wake_at  # type: ignore[method-assign]
    claim = serving_store.claim

    async def timed_claim(*args: Any) -> Any:
        mark("claim")
        rows = await claim(*args)
        if rows:
            mark("claimed")
        return rows

    serving_store.claim = timed_claim  # type: ignore[method-assign]
    try:
        async with worker.serving(grace_ms=1_000):
            await asyncio.sleep(1.0)
            return await sample(
                pusher.push,
                samples,
                [
                    ("the push, to its return", "call", "returned"),
                    ("push → the NOTIFY wakes the worker", "call", "woken"),
                    ("wake-up → the claim is sent", "woken", "claim"),
                    ("the claim", "claim", "claimed"),
                    ("claim → run starts", "claimed", "run"),
                    ("in all", "call", "run"),
                ],
            )
    finally:
        await serving_store.close()
        await pushing_store.close()


def show(title: str, parts: dict[str, list[int]]) -> None:
    count = len(next(iter(parts.values())))
    print(f"{title} ({count} samples, p50 of each part)")
    for name, values in parts.items():
        print(f"  {name:38} {statistics.median(values) / 1_000:7.0f} µs")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    with common.scratch_database(args.url, "w3") as url:
        show("one process", await one_process(url, args.samples))
    if args.url != "sqlite":
        with common.scratch_database(args.url, "w3") as url:
            show("two queues (as two processes)", await two_queues(url, args.samples))


if __name__ == "__main__":
    asyncio.run(main())
