"""What every benchmark script shares: the result line, the worker-process handshake, percentiles.

This file is imported by scripts that run under two interpreters (the project's `.venv` for
nilo-job and the raw-SQL baselines, `bench/.peers/venv` for the peers), so it uses the standard
library only.

The protocol between `bench/run.py` and a subject script:

- A script is run as `python bench/<subject>.py ACTION --url URL --jobs N [...]` and prints
  exactly one line starting with `RESULT ` followed by JSON; anything else it prints is ignored.
- A worker process started for a multi-process workload (`ACTION` ending in `_child`) prints
  `READY` once it is connected and idle, waits for `GO` on its standard input, then writes one
  byte `r` to its standard output for every run it makes (`run_mark`).
- A worker process for cross-process latency prints `READY`, then one line `START <i> <ns>` for
  every run it makes, `<ns>` being `time.time_ns()` read as the run begins.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

RESULT = "RESULT "


def emit(result: dict[str, Any]) -> None:
    """Print the one result line run.py reads, and flush it."""
    sys.stdout.write(RESULT + json.dumps(result) + "\n")
    sys.stdout.flush()


def arguments(actions: Sequence[str]) -> argparse.Namespace:
    """The command line every subject script takes."""
    parser = argparse.ArgumentParser()
    parser.add_argument("action", choices=actions)
    parser.add_argument("--url", required=True, help="postgresql://…, sqlite:///… or mariadb://…")
    parser.add_argument("--url2", help="a second database (claim cost: the one with dead rows)")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--producers", type=int, default=16)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--claim", type=int, default=1, help="raw W2: rows per claim")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--poll-ms", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--dead", type=int, default=1_000_000)
    parser.add_argument(
        "--no-fill",
        action="store_true",
        help="W2: the rows are already queued (run.py filled them)",
    )
    parser.add_argument(
        "--cap-s", type=float, default=0.0, help="stop a throughput loop after this long (0: never)"
    )
    parser.add_argument(
        "--nilo-python", default=sys.executable, help="W3 paired: the Python of nilo-job's worker"
    )
    return parser.parse_args()


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite:")


def is_mysql(url: str) -> bool:
    """A MariaDB or MySQL URL (`mariadb://…`, `mysql://…`)."""
    return url.startswith(("mariadb:", "mysql:"))


def mysql_params(url: str) -> dict[str, Any]:
    """The connection arguments asyncmy and PyMySQL take for `mariadb://user:password@host:port/
    database` (the user and the password percent-encoded, as the store reads them)."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "database": parts.path.lstrip("/") or None,
    }


def sqlite_path(url: str) -> str:
    """The file of `sqlite:///relative` or `sqlite:////absolute`."""
    return url.removeprefix("sqlite://")[1:]


@contextlib.contextmanager
def scratch_database(server: str, tag: str) -> Iterator[str]:
    """A fresh database for a script run by hand, gone afterwards: `server` is "sqlite" (a file
    in a temporary folder) or a `postgresql://` URL of any database on the server, beside which
    `nilo_<tag>_<pid>` is made (psycopg is imported only then, so the peers' venv needs none),
    or a `mariadb://` URL, the same beside it through PyMySQL."""
    if server == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/{tag}.db"
        return
    name = f"nilo_{tag}_{os.getpid()}"
    # The server's URL without its database, if it names one: the scratch database goes there.
    base = server.split("?", 1)[0].rsplit("/", 1)[0] if server.count("/") > 2 else server
    if is_mysql(server):
        import pymysql

        admin = pymysql.connect(**{**mysql_params(server), "database": None}, autocommit=True)
        try:
            with admin.cursor() as cur:
                cur.execute(f"CREATE DATABASE {name}")
            yield f"{base}/{name}"
        finally:
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {name}")
            admin.close()
        return
    import psycopg

    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def rate(jobs: int, seconds: float, **more: Any) -> dict[str, Any]:
    """A throughput result."""
    return {"jobs": jobs, "seconds": seconds, "rate": jobs / seconds, **more}


class Stopwatch:
    """Times a throughput loop that may be cut short after `cap_s` seconds (0: never), so that
    a slow peer cannot take the whole run; the rate is then over the jobs done so far."""

    def __init__(self, cap_s: float) -> None:
        self.cap_s = cap_s
        self.began = time.perf_counter()
        self.done = 0

    def over(self) -> bool:
        return self.cap_s > 0 and time.perf_counter() - self.began > self.cap_s

    def result(self, target: int, **more: Any) -> dict[str, Any]:
        seconds = time.perf_counter() - self.began
        return rate(self.done, seconds, capped=self.done < target, **more)


async def until_counted(counter: Counter, began: float, cap_s: float) -> dict[str, Any]:
    """Wait until `counter` reaches its target (or `cap_s` passes): the W2 result."""
    try:
        await asyncio.wait_for(counter.done.wait(), cap_s if cap_s > 0 else 3_600)
    except TimeoutError:
        return rate(counter.count, time.perf_counter() - began, capped=True)
    assert counter.done_at is not None
    return rate(counter.target, counter.done_at - began, capped=False)


UNDONE = {
    "nilo": "SELECT count(*) FROM nilo_jobs",
    "pgqueuer": "SELECT count(*) FROM pgqueuer",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
    "oban": "SELECT count(*) FROM oban_jobs"
    " WHERE state NOT IN ('completed', 'discarded', 'cancelled')",
}
"""Each subject's count of the rows whose end its table does not yet show (a done row leaves
nilo_jobs and pgqueuer's table; procrastinate and oban mark it): W2's durable clock, read by
the subjects' scripts (`until_durable`) and by `run.py` for W2 across processes."""


async def until_durable(
    counter: Counter, began: float, cap_s: float, remaining: Callable[[], Awaitable[int]]
) -> dict[str, Any]:
    """The W2 result with the clock stopped when every end is durable: wait for the last run
    (`until_counted`), then read `remaining()` (how many rows the subject's table does not yet
    show finished, read on a connection of the script's own) every millisecond until it is 0.
    `run_seconds` and `run_rate` keep the clock stopped at the last run."""
    ran = await until_counted(counter, began, cap_s)
    if ran["capped"]:
        return ran
    while (left := await remaining()) > 0:
        if cap_s > 0 and time.perf_counter() - began > cap_s:
            return rate(counter.target - left, time.perf_counter() - began, capped=True)
        await asyncio.sleep(0.001)
    seconds = time.perf_counter() - began
    return rate(
        counter.target, seconds, capped=False, run_seconds=ran["seconds"], run_rate=ran["rate"]
    )


def percentiles(samples_ns: Sequence[int]) -> dict[str, Any]:
    """p50/p95/p99 (nearest rank) of latencies in nanoseconds, reported in milliseconds."""
    ordered = sorted(samples_ns)
    if not ordered:
        return {"samples": 0}

    def pick(p: float) -> float:
        rank = max(1, math.ceil(p / 100 * len(ordered)))
        return ordered[rank - 1] / 1e6

    return {
        "samples": len(ordered),
        "p50_ms": pick(50),
        "p95_ms": pick(95),
        "p99_ms": pick(99),
        "max_ms": ordered[-1] / 1e6,
        "mean_ms": sum(ordered) / len(ordered) / 1e6,
    }


def run_mark() -> None:
    """One byte on standard output: a multi-process worker made a run."""
    os.write(1, b"r")


def start_mark(i: int) -> None:
    """A cross-process latency worker made run `i` now (wall clock, shared by processes)."""
    os.write(1, f"START {i} {time.time_ns()}\n".encode())


async def ready_then_go() -> None:
    """Say READY, then wait for GO on standard input (a multi-process worker)."""
    os.write(1, b"READY\n")
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if line.strip() != "GO":
        raise SystemExit(f"expected GO, got {line!r}")


def ready_then_go_sync() -> None:
    os.write(1, b"READY\n")
    line = sys.stdin.readline()
    if line.strip() != "GO":
        raise SystemExit(f"expected GO, got {line!r}")


class Counter:
    """Counts runs inside the run and says when the N-th one happened."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.done_at: float | None = None
        self.done = asyncio.Event()

    def hit(self) -> None:
        self.count += 1
        if self.count == self.target:
            self.done_at = time.perf_counter()
            self.done.set()


async def cross_process_latency(
    worker_argv: list[str],
    push: Callable[[int], Awaitable[object]],
    samples: int,
    *,
    settle_s: float = 1.5,
    gap_s: tuple[float, float] = (0.005, 0.02),
    timeout_s: float = 30.0,
    done: bool = False,
) -> dict[str, Any]:
    """Latency from a push in this process to the run's start in a worker process.

    Starts the worker (`worker_argv`), waits for READY and `settle_s` more so that it is idle,
    then for each sample reads `time.time_ns()`, awaits `push(i)` and waits for the worker's
    `START i ns` line. Both clocks are this host's wall clock. Between samples it sleeps a random
    time in `gap_s` so that samples do not lock to a poll's phase. With `done`, it also waits
    for the worker's `DONE i ns` line (written once the run's end is durable) and adds push → done
    as `done_p50_ms`, `done_p95_ms`, ...
    """
    proc = await asyncio.create_subprocess_exec(
        *worker_argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=None,
    )
    assert proc.stdout is not None
    latencies: list[int] = []
    dones: list[int] = []
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line.strip() != b"READY":
            raise RuntimeError(f"worker said {line!r} instead of READY")
        await asyncio.sleep(settle_s)
        warm = max(3, samples // 20)
        for i in range(samples + warm):
            before = time.time_ns()
            await push(i)
            started_ns = await _mark(proc.stdout, b"START", i, timeout_s)
            if done:
                done_ns = await _mark(proc.stdout, b"DONE", i, timeout_s)
            if i >= warm:
                latencies.append(started_ns - before)
                if done:
                    dones.append(done_ns - before)
            await asyncio.sleep(random.uniform(*gap_s))
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    result = percentiles(latencies)
    if done:
        result.update({f"done_{k}": v for k, v in percentiles(dones).items() if k != "samples"})
    return result


async def _mark(stdout: asyncio.StreamReader, word: bytes, i: int, timeout_s: float) -> int:
    """The nanoseconds of the worker's next `WORD i ns` line."""
    while True:
        line = await asyncio.wait_for(stdout.readline(), timeout_s)
        if not line:
            raise RuntimeError("the worker process ended")
        parts = line.split()
        if parts[:1] == [word] and int(parts[1]) == i:
            return int(parts[2])


async def cross_process_alternated(
    subjects: list[tuple[str, list[str], Callable[[int], Awaitable[object]]]],
    samples: int,
    *,
    settle_s: float = 1.5,
    gap_s: tuple[float, float] = (0.005, 0.02),
    timeout_s: float = 30.0,
) -> dict[str, dict[str, Any]]:
    """`cross_process_latency` for several subjects at once, alternated sample by sample.

    Each subject is (name, its worker's argv, its push). Every worker is started and idle before
    the first sample; then each round takes one sample of every subject, in turn (which goes
    first alternates), with a random gap in `gap_s` after each, so that all of them meet the
    same moments of a shared machine. Each subject's percentiles, by name.
    """
    procs = []
    latencies: dict[str, list[int]] = {name: [] for name, _, _ in subjects}
    try:
        for _name, argv, _push in subjects:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE
            )
            procs.append(proc)
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.strip() != b"READY":
                raise RuntimeError(f"a worker said {line!r} instead of READY")
        await asyncio.sleep(settle_s)
        turns = list(zip(subjects, procs, strict=True))
        warm = max(3, samples // 20)
        for i in range(samples + warm):
            for (name, _argv, push), proc in turns if i % 2 else reversed(turns):
                assert proc.stdout is not None
                before = time.time_ns()
                await push(i)
                while True:
                    line = await asyncio.wait_for(proc.stdout.readline(), timeout_s)
                    if not line:
                        raise RuntimeError(f"{name}'s worker process ended")
                    parts = line.split()
                    if parts[:1] == [b"START"] and int(parts[1]) == i:
                        break
                if i >= warm:
                    latencies[name].append(int(parts[2]) - before)
                await asyncio.sleep(random.uniform(*gap_s))
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
    return {name: percentiles(values) for name, values in latencies.items()}


def child_argv(action: str, args: argparse.Namespace, **overrides: Any) -> list[str]:
    """The command line that runs this same script with `action` (a worker process)."""
    argv = [
        sys.executable,
        os.path.abspath(sys.argv[0]),
        action,
        "--url",
        args.url,
        "--jobs",
        str(args.jobs),
    ]
    argv += ["--workers", str(args.workers), "--poll-ms", str(args.poll_ms)]
    for name, value in overrides.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


async def alternated(
    pushes: list[tuple[str, Callable[[int], Awaitable[object]]]], jobs: int, cap_s: float
) -> tuple[int, dict[str, float]]:
    """`pushes` called in turn, push by push, each push timed alone and each subject going first
    in turn, so that all of them meet the same moments of a shared machine; 20 rounds first,
    not timed (connections opened, statements prepared). Answers the rounds done (fewer than
    `jobs` when `cap_s` ran out) and the seconds each subject spent."""
    for i in range(20):
        for _name, push in pushes:
            await push(-1 - i)
    spent = dict.fromkeys((name for name, _push in pushes), 0)
    watch = Stopwatch(cap_s)
    for i in range(jobs):
        if watch.over():
            break
        k = i % len(pushes)
        for name, push in pushes[k:] + pushes[:k]:
            began = time.perf_counter_ns()
            await push(i)
            spent[name] += time.perf_counter_ns() - began
        watch.done += 1
    return watch.done, {name: ns / 1e9 for name, ns in spent.items()}


def event_loop(choice: str) -> tuple[Callable[[], asyncio.AbstractEventLoop] | None, str]:
    """The loop factory for `choice` and its name: "auto" is uvloop when it is installed (what
    `nilo-job worker --loop auto` runs on, and what uvicorn picks), else asyncio's own; the
    peers run on asyncio's own, their default."""
    if choice == "auto" and os.environ.get("NILO_BENCH_LOOP", "auto") == "auto":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop, f"uvloop {uvloop.__version__}"
    return None, "asyncio"


def main(
    actions: dict[str, Callable[[argparse.Namespace], Awaitable[dict[str, Any] | None]]],
    *,
    loop: str = "asyncio",
) -> None:
    """Parse the command line and run one action on the event loop `loop` picks (see
    `event_loop`); emit its result, then leave at once.

    Leaving with `os._exit` keeps a peer's slow or hanging shutdown out of the benchmark: the
    database is dropped with FORCE afterwards either way.
    """
    args = arguments(list(actions))
    factory, _name = event_loop(loop)

    async def run() -> None:
        result = await actions[args.action](args)
        if result is not None:
            emit(result)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    if factory is None:
        asyncio.run(run())
    else:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(run())


class StatementCount:
    """Counts the SQL statements every `sqlite3` connection of this process executes.

    Installed before the library under test connects (it patches `sqlite3.connect`), so it sees
    nilo-job's and huey's connections alike; BEGIN and COMMIT count as statements.
    """

    def __init__(self) -> None:
        import sqlite3
        import threading

        self.value = 0
        self._lock = threading.Lock()
        original = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> Any:
            conn = original(*args, **kwargs)
            conn.set_trace_callback(self._tick)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]

    def _tick(self, _statement: str) -> None:
        with self._lock:
            self.value += 1


async def answer_snapshots(read: Callable[[], tuple[int, int]]) -> None:
    """An idle worker's side of the idle measurement: print `SNAP <claims> <statements>` each
    time `SNAP` arrives on standard input (-1 where this process cannot count)."""
    os.write(1, b"READY\n")
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        if line.strip() == "SNAP":
            claims, statements = read()
            os.write(1, f"SNAP {claims} {statements}\n".encode())
