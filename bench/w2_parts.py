"""Where W2's time goes in the worker's process: `serve()` on 4 workers running 10,000 queued
no-op jobs, with the process's CPU per job, the cyclic garbage collector's collections and the
time they took, and how many ends waited at most in serve's group to be written (a diagnostic,
not one of `run.py`'s workloads).

    .venv/bin/python bench/w2_parts.py [--url postgresql://…|sqlite] [--jobs 10000] [--runs 3]

Each run is on a fresh database (or file). `--calls` counts the Python functions called per job
over the middle of a run instead (`sys.setprofile`, which slows the run: its time means nothing
then), a figure that holds still where the time moves with the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
import nilo

import nilo_job as job


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_run(url: str, jobs_n: int, calls: bool) -> dict[str, Any]:
    args = argparse.Namespace(url=url, jobs=jobs_n, workers=4, poll_ms=1000)
    filled = await nilo.ready_store(url)
    filler = nilo.queue(filled, args)
    for first in range(0, jobs_n, 1_000):
        await filler.push_many([nilo.Noop(i) for i in range(first, min(first + 1_000, jobs_n))])
    await filled.close()
    jobs = nilo.queue(job.Table(url), args)
    ran: list[float] = []
    counted: collections.Counter[str] = collections.Counter()

    def count(frame: Any, event: str, _arg: object) -> None:
        if event == "call":
            where = frame.f_code.co_filename
            counted["nilo_job" if "/nilo_job/" in where else "other"] += 1
        elif event == "c_call":
            counted["C"] += 1

    def on_run(_i: int) -> None:
        ran.append(time.perf_counter())
        if calls and len(ran) == jobs_n // 4:
            sys.setprofile(count)
        elif calls and len(ran) == jobs_n // 4 * 3:
            sys.setprofile(None)

    nilo._on_run = on_run
    collections_made = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    started = [0.0]

    def watch_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            made = collections_made[info["generation"]]
            made[0] += 1
            made[1] += time.perf_counter() - started[0]

    gc.callbacks.append(watch_gc)
    cpu, began = _cpu_s(), time.perf_counter()
    waiting_most = 0
    serving = asyncio.create_task(jobs.serve(grace_ms=1_000))
    try:
        while len(ran) < jobs_n:
            await asyncio.sleep(0.01)
            group = jobs._runner.ends.group  # the ends handed to serve's group, not yet written
            if group is not None:
                waiting_most = max(waiting_most, len(group.pending) + len(group.flying))
        spent = _cpu_s() - cpu
    finally:
        gc.callbacks.remove(watch_gc)
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        await jobs.store.close()
    wall = ran[-1] - began
    result: dict[str, Any] = {
        "rate": jobs_n / wall,
        "cpu_us_per_job": spent / jobs_n * 1e6,
        "cpu_share": spent / wall,
        "gc": {gen: (n, round(s * 1000, 1)) for gen, (n, s) in collections_made.items()},
        "runs_without_their_end_most": waiting_most,
    }
    if calls:
        middle = jobs_n // 2
        result["calls_per_job"] = {name: round(n / middle, 1) for name, n in counted.items()}
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", action="store_true")
    args = parser.parse_args()
    for n in range(args.runs):
        with common.scratch_database(args.url, "w2") as url:
            found = await one_run(url, args.jobs, args.calls)
        gcs = ", ".join(f"gen {g}: {c} in {ms} ms" for g, (c, ms) in found["gc"].items())
        print(
            f"run {n + 1}: {found['rate']:,.0f} jobs/s; {found['cpu_us_per_job']:.1f} µs of CPU a"
            f" job ({found['cpu_share']:.0%} of the wall time); collections {gcs}; at most"
            f" {found['runs_without_their_end_most']} ends waiting to be written"
            + (f"; calls a job {found['calls_per_job']}" if args.calls else "")
        )


if __name__ == "__main__":
    factory, _name = common.event_loop("auto")  # uvloop when installed, as bench/nilo.py runs
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
