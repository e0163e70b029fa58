"""A/B of push → run starts across processes: nilo-job at a git revision against the working tree.

    .venv/bin/python bench/ab_w3.py [--ref HEAD] [--url postgresql://…|sqlite] [--samples 1000]

Two runs of `bench/run.py` minutes apart meet different moments of a shared machine, and W3's
p50 moves between them by more than a change to the worker is worth. Here one worker process
serves two queues on one event loop (uvloop when installed, as `bench/run.py` runs nilo-job):
one with the revision's `nilo_job/` (imported under another name, as `bench/ab.py` does), one
with the working tree's, each on a database (or SQLite file) of its own. This process pushes one
row at a time, to one version or the other at random, a few milliseconds apart, and reads when
each run starts (one host, one clock), so both versions see the same moments of the machine.

It prints each version's p50 and p90 of push → start (ms), and the ratio of the p50s (above 1:
the working tree starts rows sooner).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import ab
import common

VERSIONS = ("ref", "tree")
SCRIPT = os.path.abspath(__file__)


def versions(ref_package: str) -> dict[str, ModuleType]:
    """Both versions of nilo-job: the revision's, unpacked at `ref_package`, and this tree's."""
    old = ab.load("nilo_job_at_ref", Path(ref_package))
    sys.path.insert(0, str(ab.ROOT))
    import nilo_job as new

    return {"ref": old, "tree": new}


def noop(job: ModuleType, version: str) -> type:
    """A no-op kind of `job` whose run says `START version i ns` on stdout as it starts."""
    return ab.noop_kind(
        job, lambda i: os.write(1, f"START {version} {i} {time.time_ns()}\n".encode())
    )


async def worker(ref_package: str, urls: list[str]) -> None:
    """Serve both versions' queues (4 workers each, poll_ms=1000) until killed."""
    async with contextlib.AsyncExitStack() as stack:
        for (version, job), url in zip(versions(ref_package).items(), urls, strict=True):
            store = job.Table(url)
            await store.open()
            jobs = job.Jobs(kinds=[noop(job, version)], store=store, workers=4, poll_ms=1_000)
            await stack.enter_async_context(jobs.serving(grace_ms=1_000))
        await asyncio.sleep(0.2)
        os.write(1, b"READY\n")
        await asyncio.Event().wait()


async def compare(ref_package: str, urls: list[str], samples: int) -> dict[str, list[int]]:
    """Push `samples` rows, each to a version at random, and time each to its run's start."""
    pushers: dict[str, Any] = {}
    for (version, job), url in zip(versions(ref_package).items(), urls, strict=True):
        store = job.Table(url)
        await store.create_missing()
        kind = noop(job, version)
        pushers[version] = (job.Jobs(kinds=[kind], store=store), kind)
    argv = [sys.executable, SCRIPT, "worker", ref_package, *urls]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    latencies: dict[str, list[int]] = {version: [] for version in VERSIONS}
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line.strip() != b"READY":
            raise RuntimeError(f"the worker said {line!r} instead of READY")
        await asyncio.sleep(1.5)
        warm = 40
        for i in range(samples + warm):
            version = random.choice(VERSIONS)
            jobs, kind = pushers[version]
            before = time.time_ns()
            await jobs.push(kind(i))
            while True:
                parts = (await asyncio.wait_for(proc.stdout.readline(), 30)).split()
                if not parts:
                    raise RuntimeError("the worker process ended")
                if parts[0] == b"START" and parts[1].decode() == version and int(parts[2]) == i:
                    break
            if i >= warm:
                latencies[version].append(int(parts[3]) - before)
            await asyncio.sleep(random.uniform(0.005, 0.02))
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        for jobs, _kind in pushers.values():
            await jobs.store.close()
    return latencies


async def main() -> None:
    parser = ab.options(__doc__)
    parser.add_argument("--samples", type=int, default=1_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        ref_package = str(ab.at_revision(args.ref, Path(scratch)))
        with (
            common.scratch_database(args.url, "abw3ref") as ref_url,
            common.scratch_database(args.url, "abw3tree") as tree_url,
        ):
            latencies = await compare(ref_package, [ref_url, tree_url], args.samples)
    store = "SQLite" if args.url == "sqlite" else "PostgreSQL"
    print(f"{args.samples:,} pushes on {store}, each to one version at random; one worker process")
    p50 = {version: statistics.median(values) for version, values in latencies.items()}
    for version, values in latencies.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        name = args.ref if version == "ref" else "working tree"
        print(
            f"{name:>14}: p50 {p50[version] / 1e6:6.3f} ms, p90 {p90 / 1e6:6.3f} ms"
            f" ({len(values)} samples)"
        )
    print(f"{args.ref} p50 ÷ working tree p50: {p50['ref'] / p50['tree']:.3f}")


def run(coro: Any) -> None:
    factory, _name = common.event_loop("auto")
    if factory is None:
        asyncio.run(coro)
    else:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(coro)


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        run(worker(sys.argv[2], sys.argv[3:]))
    else:
        run(main())
