"""Stalls under a growing backlog: 64 workers for minutes on a PostgreSQL cluster of its own.

    .venv/bin/python bench/stalls.py [--minutes 10] [--processes 4] [--workers 16]
                                     [--run-ms 50] [--rate 1500]

It starts a cluster with the server's own defaults (autovacuum on) in a temporary folder, on a
free port (as the user `postgres` when run as root), makes the table, starts `--processes`
`nilo-job worker` processes of `--workers` each, and pushes `--rate` rows a second (in groups of
`--rate / 10` every 100 ms) of a kind whose run takes `--run-ms`, more than the workers can run:
the backlog grows for the whole run. Every end is kept as history, so afterwards the longest gap
between two consecutive completions (`finished_at` in `nilo_jobs_done`) says whether ends ever
stalled; it prints that, the completions per second, the backlog at the end, and the rows still
running once the workers have stopped (none, after a clean stop).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nilo_job as job  # noqa: E402

URL = os.environ.get("NILO_STALLS_URL", "sqlite:///:memory:")
RUN_S = int(os.environ.get("NILO_STALLS_RUN_MS", "50")) / 1_000


@dataclass
class Work:
    """A run that takes `RUN_S` seconds of waiting (an HTTP call, say)."""

    nilo_job = "work"
    retry = job.Retry.NONE

    n: int

    async def run(self) -> None:
        await asyncio.sleep(RUN_S)


jobs = job.Jobs(kinds=[Work], store=job.Table(URL), timeout_ms=60_000)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    if not versions:
        raise SystemExit(f"no {name}: install PostgreSQL's server")
    return str(versions[-1] / name)


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def start_cluster(folder: Path) -> tuple[str, Path]:
    data = folder / "data"
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(folder, entry.pw_uid, entry.pw_gid)
    subprocess.run(
        _as_postgres([_bin("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    port = _free_port()
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
    subprocess.run(
        _as_postgres([_bin("pg_ctl"), "-D", str(data), "-o", options, "-l",
                      str(folder / "server.log"), "-w", "start"]),
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return f"postgresql://postgres@127.0.0.1:{port}/postgres", data


def stop_cluster(data: Path) -> None:
    subprocess.run(
        _as_postgres([_bin("pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
        check=False, stdout=subprocess.DEVNULL,
    )  # fmt: skip


async def push_for(queue: job.Jobs, seconds: float, rate: int) -> int:
    n = 0
    group = max(1, rate // 10)
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        await queue.push_many([Work(n + i) for i in range(group)])
        n += group
        await asyncio.sleep(max(0.0, began + n / rate - time.monotonic()))
    return n


def start_worker(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, cwd=ROOT, env=env)


async def measure(url: str, args: argparse.Namespace) -> None:
    store = job.Table(url)
    await store.create_missing()
    queue = job.Jobs(kinds=[Work], store=store)
    env = {**os.environ, "NILO_STALLS_URL": url, "NILO_STALLS_RUN_MS": str(args.run_ms)}
    command = [
        *(sys.executable, "-m", "nilo_job", "--log-level", "WARNING", "worker"),
        *("bench.stalls:jobs", "--workers", str(args.workers), "--grace-ms", "10000"),
    ]
    workers = [start_worker(command, env) for _ in range(args.processes)]
    try:
        pushed = await push_for(queue, args.minutes * 60, args.rate)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(60)
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT max(gap), percentile_cont(0.999) WITHIN GROUP (ORDER BY gap), count(*), "
            "(max(finished_at) - min(finished_at)) FROM (SELECT finished_at, finished_at - "
            "lag(finished_at) OVER (ORDER BY finished_at) AS gap FROM nilo_jobs_done) AS g"
        )
        gap, p999, done, span = await cur.fetchone() or (0, 0, 0, 1)
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE state = 'queued'), "
            "count(*) FILTER (WHERE state = 'running') FROM nilo_jobs"
        )
        queued, running = await cur.fetchone() or (0, 0)
    await store.close()
    print(f"pushed {pushed:,}; done {done:,} ({done / (span / 1e6):,.0f} a second)")
    print(
        f"longest gap between two completions: {gap / 1_000:.1f} ms (p99.9 {p999 / 1_000:.2f} ms)"
    )
    print(f"left queued (the backlog): {queued:,}; left running after the stop: {running:,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--run-ms", type=int, default=50)
    parser.add_argument("--rate", type=int, default=1_500)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="nilo-stalls-"))
    url, data = start_cluster(folder)
    try:
        asyncio.run(measure(url, args))
    finally:
        stop_cluster(data)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
