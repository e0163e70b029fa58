"""A/B of one push's latency: nilo-job at a git revision against the working tree, in one process.

    .venv/bin/python bench/ab.py [--ref HEAD] [--url postgresql://…|mariadb://…|sqlite]
        [--pushes 3000]

On a shared, noisy machine two throughput runs minutes apart differ by more than a change worth
making. This script takes both versions into one process (the revision's `nilo_job/` from
`git archive`, imported under another name) and alternates them push by push, each `await
jobs.push(value)` of one producer timed on its own, so that both see the same moments of the
machine. It prints each version's median and mean latency (µs), the CPU time of the process per
push (µs), and the ratio of medians (above 1: the working tree is faster).

It makes a database of its own on PostgreSQL or MariaDB (`nilo_ab_<pid>`, dropped afterwards)
or a fresh SQLite file, and both versions write to it, each through its own store.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import common

ROOT = Path(__file__).resolve().parent.parent


def load(name: str, package: Path) -> ModuleType:
    """Import the package at `package` as the module `name`."""
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def at_revision(ref: str, into: Path) -> Path:
    """`nilo_job/` as it was at `ref`, unpacked under `into`."""
    archive = into / "nilo_job.tar"
    subprocess.run(
        ["git", "-C", str(ROOT), "archive", "-o", str(archive), ref, "nilo_job"], check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "nilo_job"


def noop_kind(job: ModuleType, on_run: Callable[[int], object] | None = None) -> type:
    """A no-op kind of the nilo-job module `job` ("noop", no retry, a field `i`); `on_run(i)` is
    called as each run starts, when given."""

    @dataclasses.dataclass
    class Noop:
        nilo_job = "noop"
        retry = job.Retry.NONE

        i: int = 0

        async def run(self) -> None:
            if on_run is not None:
                on_run(self.i)

    return Noop


def pusher(job: ModuleType, url: str) -> Callable[[int], Awaitable[Any]]:
    Noop = noop_kind(job)
    store = job.Table(url)
    jobs = job.Jobs(kinds=[Noop], store=store)

    async def push(i: int) -> Any:
        return await jobs.push(Noop(i))

    push.store = store  # type: ignore[attr-defined]
    return push


def options(doc: str) -> argparse.ArgumentParser:
    """The options every A/B script takes: `--ref` and `--url`."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--ref", default="HEAD", help="the revision to compare against")
    parser.add_argument(
        "--url",
        default="postgresql://postgres@127.0.0.1:5432/test",
        help="a PostgreSQL or MariaDB server (any database on it), or 'sqlite'",
    )
    return parser


async def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--pushes", type=int, default=3_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        old = load("nilo_job_at_ref", at_revision(args.ref, Path(scratch)))
        sys.path.insert(0, str(ROOT))
        import nilo_job as new

        with common.scratch_database(args.url, "ab") as url:
            table = new.Table(url)
            await table.create_missing()
            await table.close()
            subjects = {args.ref: pusher(old, url), "working tree": pusher(new, url)}
            for push in subjects.values():
                for i in range(50):  # connections open, statements prepared
                    await push(i)
            latencies: dict[str, list[int]] = {name: [] for name in subjects}
            cpu = dict.fromkeys(subjects, 0.0)
            order = list(subjects.items())
            for i in range(args.pushes):
                for name, push in order if i % 2 else reversed(order):
                    cpu0, t0 = time.process_time(), time.perf_counter_ns()
                    await push(i)
                    latencies[name].append(time.perf_counter_ns() - t0)
                    cpu[name] += time.process_time() - cpu0
            for push in subjects.values():
                await push.store.close()  # type: ignore[attr-defined]
    base = statistics.median(latencies[args.ref])
    store = (
        "SQLite"
        if args.url == "sqlite"
        else "MariaDB"
        if common.is_mysql(args.url)
        else "PostgreSQL"
    )
    print(f"{args.pushes:,} pushes of one producer each, alternated, on {store}")
    for name, values in latencies.items():
        median, mean = statistics.median(values), statistics.fmean(values)
        print(
            f"{name:>14}: median {median / 1000:7.0f} µs, mean {mean / 1000:7.0f} µs,"
            f" CPU {cpu[name] / args.pushes * 1e6:5.0f} µs a push;"
            f" {args.ref} ÷ this {base / median:.3f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
