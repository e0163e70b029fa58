"""The soak: a queue under steady traffic for as long as you give it, watched as it ages.

    .venv/bin/python bench/soak.py --store pg --minutes 30
    .venv/bin/python bench/soak.py --store sqlite --minutes 30 --out soak-sqlite
    .venv/bin/python bench/soak.py --store pg --minutes 30 --hold-snapshot 300 --hold-at 10

Short benchmarks say nothing of a table after weeks of traffic: dead row versions, indexes that
grow, history that piles up, workers whose memory creeps. This runs one queue for `--minutes`
and samples it every `--sample-s`.

- **Its own database.** `--store pg` starts a PostgreSQL cluster of its own (`initdb` in a
  temporary folder, a free port, the server's defaults, so autovacuum is on as users run it;
  as the user `postgres` when run as root), stopped and removed at the end, also after an
  error or Ctrl-C. `--store sqlite` uses a file of its own in that folder.
- **The workers.** `--workers-procs` processes (`nilo-job worker`, uvloop when installed) of
  `--workers` each, on a copy of `nilo_job/` taken at the start (so a run measures one version
  even while the package is being edited). The job is a no-op whose payload carries the time
  of its push; as it starts, its run writes its row id, that time and the start's time down a
  pipe of its own to this process (24 bytes, written in one system call per 100 ms), which
  counts them.
- **The calibration.** `--calibrate-jobs` rows are queued before the workers start (the bytes
  a queued row takes are read then), and run. Then the producer pushes as fast as it can, in
  the traffic's own mix, for `CALIBRATE_S`, while the workers run what it pushes: the runs
  started over the middle 80 % of that window are the capacity, what this machine sustains
  with the producer, the server and the workers on it together (a rate past it leaves the
  workers behind for good). The producer runs at 70 % of it unless `--rate` says otherwise.
- **The producer**, in this process, on its own schedule whatever the answers' pace: 80 % of
  the jobs pushed one by one (`jobs.push`, concurrent as a busy web app's requests are), 20 % in
  `jobs.push_many` of 50.
- **Every sample**: runs started and their push → start p50/p99/max, the queued due rows and
  the oldest one's wait, every `nilo_jobs*` table's and index's size, dead row versions and
  autovacuum counts (SQLite: free pages and the write-ahead log), the oldest snapshot's age,
  and each worker process's resident memory.
- **Server settings.** `--pg-set NAME=VALUE` (repeated) sets one besides the defaults, to
  measure a tuning: `--pg-set autovacuum_naptime=10s`.
- **A held snapshot.** `--hold-snapshot S --hold-at M`: at minute M a separate connection reads
  the table in a REPEATABLE READ transaction and stays idle in it for S seconds (SQLite: a
  reader holding its read transaction), as a forgotten session or a long report would.
- **At the end**, every pushed row must have run exactly once: the ids pushed against the ids
  the runs reported, and the history's rows and attempts in the database.

It writes, in `--out` (default: a new temporary folder, printed): `soak.json` (the settings,
every sample, each sample's histogram of push → start, and the summary), `soak.csv` (the
samples), `summary.txt` (what it prints at the end: first against last minutes, sizes, memory,
bytes per job, the hold, the checks), `soak.png` (with matplotlib, from `bench/.peers/venv` when
this Python has none), `workers.log` and, on PostgreSQL, `server.log`. `docs/bench.md` ("Soak")
has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import csv
import datetime
import hashlib
import json
import math
import os
import platform
import pwd
import shlex
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nilo_job as job

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEERS_PY = BENCH / ".peers" / "venv" / "bin" / "python"

LOAD = 0.7  # the producer's rate, as a share of the calibrated capacity
BATCH = 50  # rows per push_many
BATCHED_SHARE = 0.2  # the share of jobs pushed in batches
IN_FLIGHT = 2_000  # pushes awaiting their answer at most; past it the producer falls behind
CALIBRATE_S = 20.0  # the calibration's window of pushes as fast as the producer can
GRACE_S = 1.0  # a sample counts the runs started up to this long before it (the pipe's delay)
FLUSH_S = 0.1  # how long a worker keeps its records before writing them down the pipe
RECORD = struct.Struct("<qqq")  # row id, pushed at, started at (ns since the epoch)


# ------------------------------------------------------------------- the job (worker side)


class Records:
    """In a worker process: each run's (row id, pushed at, started at), written down the pipe
    `NILO_SOAK_FD` in one system call every `FLUSH_S` (and at exit)."""

    def __init__(self) -> None:
        self.fd = -1
        self.buffer = bytearray()
        self.pending = False

    def add(self, row: int, pushed_ns: int, started_ns: int) -> None:
        self.buffer += RECORD.pack(row, pushed_ns, started_ns)
        if not self.pending:
            self.pending = True
            asyncio.get_running_loop().call_later(FLUSH_S, self.flush)

    def flush(self) -> None:
        self.pending = False
        data = bytes(self.buffer)
        self.buffer.clear()
        while data:
            data = data[os.write(self.fd, data) :]


records = Records()


@dataclass
class Noop:
    """The soak's job: nothing but the record of its start."""

    nilo_job = "soak-noop"
    retry = job.Retry.NONE

    pushed_ns: int  # time.time_ns() as the push was called
    pad: str = ""  # --payload-bytes

    async def run(self, tick: job.Tick) -> None:
        records.add(tick.id, self.pushed_ns, time.time_ns())


def worker_jobs() -> job.Jobs:
    """The queue a worker process serves (`nilo-job worker soak:worker_jobs`), from the
    environment this script gives it."""
    records.fd = int(os.environ["NILO_SOAK_FD"])
    atexit.register(records.flush)
    return job.Jobs(
        kinds=[Noop],
        store=job.Table(os.environ["NILO_SOAK_URL"]),
        retention_ms=int(os.environ["NILO_SOAK_RETENTION_MS"]),
    )


# ------------------------------------------------------------------ a cluster of its own


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if not versions:
        raise SystemExit(f"no {name}: install PostgreSQL's server (or use --store sqlite)")
    return str(versions[-1] / name)


def _as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the user `postgres`."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """A PostgreSQL cluster in `folder`, with the server's defaults but for what running it
    unprivileged in a temporary folder needs (its socket in the folder, TCP on 127.0.0.1) and
    the `settings` given (`name=value`, `--pg-set`)."""

    def __init__(self, folder: Path, settings: list[str]) -> None:
        self.folder = folder
        self.settings = settings
        self.data = folder / "data"
        self.log = folder / "server.log"
        self.url = ""

    def start(self) -> str:
        self.folder.mkdir()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
            self.folder.parent.chmod(0o711)  # the user postgres may go through, not read
        initdb = [_pg_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"]
        subprocess.run(_as_postgres([*initdb, "--no-sync"]), check=True, stdout=subprocess.DEVNULL)
        port = _free_port()
        options = f"-p {port} -k {self.folder} -c listen_addresses=127.0.0.1"
        options += "".join(f" -c {shlex.quote(setting)}" for setting in self.settings)
        start = [_pg_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log)]
        # A session of its own: Ctrl-C in the terminal reaches this script, which stops it.
        subprocess.run(
            _as_postgres([*start, "-w", "start"]),
            check=True,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        return self.url

    def stop(self) -> None:
        if not (self.data / "postmaster.pid").exists():
            return
        stop = [_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-t", "30", "stop"]
        done = subprocess.run(_as_postgres(stop), stdout=subprocess.DEVNULL, check=False)
        if done.returncode != 0 and (self.data / "postmaster.pid").exists():
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)


# ------------------------------------------------------------------------ the runs seen


class IdCounts:
    """How many times each row id was seen (saturating at 255), one byte an id."""

    def __init__(self) -> None:
        self.counts = bytearray(1 << 16)

    def add(self, row: int) -> None:
        if row >= len(self.counts):
            self.counts += bytes(max(row + 1, 2 * len(self.counts)) - len(self.counts))
        if self.counts[row] < 255:
            self.counts[row] += 1

    def total(self) -> int:
        return len(self.counts) - self.counts.count(0)


def bucket(latency_ns: int) -> int:
    """A latency's histogram bucket: buckets are 1 % wide (from 1 µs)."""
    return int(math.log(max(latency_ns, 1_000) / 1_000) * 100)


def bucket_ms(b: int) -> float:
    return math.exp((b + 0.5) / 100) / 1_000


def quantile(hist: Counter[int], q: float) -> float | None:
    """The latency (ms, to 1 %) at quantile `q` of a histogram of `bucket`s."""
    total = sum(hist.values())
    if not total:
        return None
    rank, seen = max(1, math.ceil(q * total)), 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return bucket_ms(b)
    raise AssertionError("unreachable")


class Tally:
    """Every run the workers report: each row id's runs (for exactly once), and per second of
    the soak (from `origin_ns`) the runs started and a histogram of their push → start."""

    def __init__(self) -> None:
        self.runs = IdCounts()
        self.records = 0
        self.origin_ns = time.time_ns()
        self.seconds: dict[int, Counter[int]] = {}
        self.starts: list[int] | None = None  # while calibrating: every start's time
        self.rest: dict[int, bytes] = {}

    def feed(self, fd: int, data: bytes) -> None:
        data = self.rest.pop(fd, b"") + data
        whole = len(data) - len(data) % RECORD.size
        if whole < len(data):
            self.rest[fd] = data[whole:]
        for row, pushed_ns, started_ns in RECORD.iter_unpack(data[:whole]):
            self.records += 1
            self.runs.add(row)
            if self.starts is not None:
                self.starts.append(started_ns)
            second = (started_ns - self.origin_ns) // 1_000_000_000
            hist = self.seconds.get(second)
            if hist is None:
                hist = self.seconds[second] = Counter()
            hist[bucket(started_ns - pushed_ns)] += 1

    def take(self, before_s: float) -> Counter[int]:
        """The histogram of the runs started before `before_s` (seconds of the soak) not taken
        yet; a straggler of an earlier second goes with them."""
        merged: Counter[int] = Counter()
        for second in [s for s in self.seconds if s < before_s]:
            merged.update(self.seconds.pop(second))
        return merged


# ---------------------------------------------------------------------- worker processes


def snapshot_nilo_job(into: Path) -> str:
    """Copy `nilo_job/` as it is now into `into` (the workers import this copy); a short hash
    of the copied sources."""
    shutil.copytree(
        ROOT / "nilo_job", into / "nilo_job", ignore=shutil.ignore_patterns("__pycache__")
    )
    digest = hashlib.sha256()
    for path in sorted((into / "nilo_job").rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(into)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


class Workers:
    """The `nilo-job worker` processes, each with a pipe of its own for its records."""

    def __init__(self, folder: Path, url: str, args: argparse.Namespace, log: Path) -> None:
        self.folder, self.url, self.args, self.log = folder, url, args, log
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pipes: list[int] = []

    def start(self) -> None:
        command = [sys.executable, "-m", "nilo_job", "--log-level", self.args.log_level, "worker"]
        command += ["soak:worker_jobs", "--workers", str(self.args.workers), "--grace-ms", "10000"]
        with self.log.open("ab") as log:
            for _ in range(self.args.workers_procs):
                read, write = os.pipe()
                env = {
                    **os.environ,
                    "PYTHONPATH": os.pathsep.join([str(self.folder), str(BENCH)]),
                    "NILO_SOAK_URL": self.url,
                    "NILO_SOAK_FD": str(write),
                    "NILO_SOAK_RETENTION_MS": str(self.args.retention_ms),
                }
                # cwd: the copy of nilo_job/ comes first (`python -m` puts it on sys.path).
                proc = subprocess.Popen(
                    command,
                    cwd=self.folder,
                    env=env,
                    pass_fds=(write,),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
                os.close(write)
                os.set_blocking(read, False)
                self.procs.append(proc)
                self.pipes.append(read)

    def listen(self, tally: Tally) -> None:
        """Feed `tally` with every record, as it comes, on this event loop."""
        loop = asyncio.get_running_loop()

        def readable(fd: int) -> None:
            try:
                data = os.read(fd, 1 << 20)
            except BlockingIOError:
                return
            if data:
                tally.feed(fd, data)
            else:
                loop.remove_reader(fd)

        for fd in self.pipes:
            loop.add_reader(fd, readable, fd)

    def check_alive(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise SystemExit(f"a worker process ended with {proc.returncode}: see {self.log}")

    def rss_mb(self) -> list[float]:
        """Each worker process's resident memory (VmRSS), in MB."""
        sizes = []
        for proc in self.procs:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
            except OSError:
                sizes.append(float("nan"))
                continue
            kb = next(line.split()[1] for line in status.splitlines() if line[:6] == "VmRSS:")
            sizes.append(int(kb) / 1_024)
        return sizes

    def stop(self) -> None:
        """SIGTERM (the graceful stop), then SIGKILL for any still there after 30 s."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            for fd in self.pipes:
                loop.remove_reader(fd)
        for fd in self.pipes:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pipes = []


# ----------------------------------------------------------------------- the database


class PgProbe:
    """Reads what a sample needs from the cluster, on an autocommit connection of its own (so
    it holds no snapshot between samples)."""

    store = "pg"

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: Any = None

    async def open(self) -> None:
        import psycopg

        self.conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def rows(self, sql: str, params: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
        cur = await self.conn.execute(sql, params)  # None: no placeholders ('%' is a '%')
        return list(await cur.fetchall())

    async def version(self) -> str:
        return str((await self.rows("SHOW server_version"))[0][0])

    async def sizes(self) -> dict[str, Any]:
        """Each `nilo_jobs*` table's heap (`size:`), its indexes' (`indexes:`), its live and
        dead row versions and its vacuums and analyzes; each index's size (`size:`)."""
        found: dict[str, Any] = {}
        for name, heap, indexes, live, dead, autovacuums, autoanalyzes, vacuums in await self.rows(
            "SELECT relname, pg_relation_size(relid), pg_indexes_size(relid), n_live_tup,"
            " n_dead_tup, autovacuum_count, autoanalyze_count, vacuum_count"
            " FROM pg_stat_user_tables WHERE relname LIKE 'nilo\\_jobs%' ORDER BY relname"
        ):
            found[f"size:{name}"] = heap
            found[f"indexes:{name}"] = indexes
            found[f"live:{name}"] = live
            found[f"dead:{name}"] = dead
            found[f"autovacuum:{name}"] = autovacuums + vacuums
            found[f"autoanalyze:{name}"] = autoanalyzes
        for name, size in await self.rows(
            "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes"
            " WHERE relname LIKE 'nilo\\_jobs%' ORDER BY indexrelname"
        ):
            found[f"size:{name}"] = size
        return found

    async def sample(self) -> dict[str, Any]:
        now_us = time.time_ns() // 1_000
        (due, oldest), *_ = await self.rows(
            "SELECT count(*), min(run_at) FROM nilo_jobs WHERE state = 'queued' AND run_at <= %s",
            (now_us,),
        )
        (running,), *_ = await self.rows("SELECT count(*) FROM nilo_jobs WHERE state = 'running'")
        (xmin_age, xact_s, idle_tx), *_ = await self.rows(
            "SELECT max(age(backend_xmin)),"
            " extract(epoch FROM greatest(interval '0', max(clock_timestamp() - xact_start)"
            " FILTER (WHERE backend_xmin IS NOT NULL))),"
            " count(*) FILTER (WHERE state = 'idle in transaction')"
            " FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
        )
        vacuuming = await self.rows(
            "SELECT c.relname FROM pg_stat_progress_vacuum AS v"
            " JOIN pg_class AS c ON c.oid = v.relid ORDER BY c.relname"
        )
        (checkpoints,), *_ = await self.rows(
            "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
        )
        (wal_bytes, wal_fpi), *_ = await self.rows("SELECT wal_bytes, wal_fpi FROM pg_stat_wal")
        return {
            "queued_due": due,
            "oldest_due_s": (now_us - oldest) / 1e6 if oldest is not None else 0.0,
            "running": running,
            "xmin_age": xmin_age or 0,
            "oldest_xact_s": float(xact_s or 0.0),
            "idle_in_transaction": idle_tx,
            "vacuuming": " ".join(name for (name,) in vacuuming),
            "checkpoints": checkpoints,
            "wal_bytes": int(wal_bytes),
            "wal_fpi": wal_fpi,
            **await self.sizes(),
        }

    async def counts(self) -> dict[str, Any]:
        """What the database says at the end: rows left in the queue by state, and the history's
        rows, distinct ids and rows that took more than one attempt."""
        left = dict(await self.rows("SELECT state, count(*) FROM nilo_jobs GROUP BY state"))
        (done, distinct, retried), *_ = await self.rows(
            "SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE attempts > 1)"
            " FROM nilo_jobs_done"
        )
        (attempts,), *_ = await self.rows("SELECT count(*) FROM nilo_jobs_attempts")
        return {"left": left, "done": done, "done_distinct": distinct, "retried": retried,
                "attempt_rows": attempts}  # fmt: skip

    async def workers_seen(self) -> int:
        return int((await self.rows("SELECT count(*) FROM nilo_jobs_workers"))[0][0])

    async def indexes(self) -> dict[str, str]:
        """Each index of the `nilo_jobs*` tables, with its table."""
        return dict(
            await self.rows(
                "SELECT indexrelname, relname FROM pg_stat_user_indexes"
                " WHERE relname LIKE 'nilo\\_jobs%' ORDER BY indexrelname"
            )
        )

    async def hold(self, seconds: float) -> None:
        """A connection of its own: REPEATABLE READ, one read of the table, then idle in that
        transaction for `seconds`."""
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            await conn.execute("SELECT count(*) FROM nilo_jobs")
            await asyncio.sleep(seconds)
            await conn.execute("COMMIT")


class SqliteProbe:
    """The same readings from the SQLite file: sizes by `dbstat` (each table and index), free
    pages, the write-ahead log's size; read in a thread so the producer never waits on them."""

    store = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        assert self.conn is not None
        return self.conn.execute(sql, params).fetchall()

    async def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return await asyncio.to_thread(self._rows, sql, params)

    async def version(self) -> str:
        return sqlite3.sqlite_version

    def _sizes(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        tables = dict(self._rows("SELECT name, type FROM sqlite_master WHERE name LIKE 'nilo%'"))
        owner = dict(self._rows("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'"))
        for name, size in self._rows("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            if name in tables or owner.get(name, "").startswith("nilo_jobs"):
                found[f"size:{name}"] = size
        for table in [t for t, kind in tables.items() if kind == "table"]:
            found[f"indexes:{table}"] = sum(
                found.get(f"size:{index}", 0) for index, on in owner.items() if on == table
            )
        page = self._rows("PRAGMA page_size")[0][0]
        found["free_bytes"] = self._rows("PRAGMA freelist_count")[0][0] * page
        found["file_bytes"] = self.path.stat().st_size
        wal = Path(f"{self.path}-wal")
        found["wal_bytes"] = wal.stat().st_size if wal.exists() else 0
        return found

    async def sizes(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._sizes)

    def _sample(self) -> dict[str, Any]:
        now_us = time.time_ns() // 1_000
        (due, oldest), *_ = self._rows(
            "SELECT count(*), min(run_at) FROM nilo_jobs WHERE state = 'queued' AND run_at <= ?",
            (now_us,),
        )
        (running,), *_ = self._rows("SELECT count(*) FROM nilo_jobs WHERE state = 'running'")
        return {
            "queued_due": due,
            "oldest_due_s": (now_us - oldest) / 1e6 if oldest is not None else 0.0,
            "running": running,
            **self._sizes(),
        }

    async def sample(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._sample)

    async def counts(self) -> dict[str, Any]:
        left = dict(await self.rows("SELECT state, count(*) FROM nilo_jobs GROUP BY state"))
        (done, distinct, retried), *_ = await self.rows(
            "SELECT count(*), count(DISTINCT id), sum(attempts > 1) FROM nilo_jobs_done"
        )
        (attempts,), *_ = await self.rows("SELECT count(*) FROM nilo_jobs_attempts")
        return {"left": left, "done": done, "done_distinct": distinct, "retried": retried or 0,
                "attempt_rows": attempts}  # fmt: skip

    async def workers_seen(self) -> int:
        return int((await self.rows("SELECT count(*) FROM nilo_jobs_workers"))[0][0])

    async def indexes(self) -> dict[str, str]:
        return dict(
            await self.rows(
                "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'"
                " AND tbl_name LIKE 'nilo%' ORDER BY name"
            )
        )

    async def hold(self, seconds: float) -> None:
        """A reader of its own holding its read transaction (its snapshot of the file) for
        `seconds`: the log cannot be checkpointed past it meanwhile."""
        with contextlib.closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM nilo_jobs").fetchone()
            await asyncio.sleep(seconds)
            conn.execute("COMMIT")


Probe = PgProbe | SqliteProbe


# --------------------------------------------------------------------------- the producer


class Producer:
    """Pushes at `rate` jobs a second on a fixed schedule: 80 % of the jobs one by one, 20 % in
    `push_many` of `BATCH`, each push in a task of its own (at most `IN_FLIGHT` awaiting their
    answer; past that the schedule slips, and `behind` says by how many jobs)."""

    def __init__(self, jobs: job.Jobs, pad: str) -> None:
        self.jobs, self.pad = jobs, pad
        self.pushed = IdCounts()
        self.count = 0  # rows pushed (their ids in `pushed`)
        self.due = 0  # rows the schedule wanted pushed by now
        self.errors = 0
        self.first_error = ""
        self.slots = asyncio.Semaphore(IN_FLIGHT)
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def behind(self) -> int:
        """Rows the schedule wanted pushed by now whose push has not answered yet."""
        return max(0, self.due - self.count)

    def _got(self, ids: Iterable[int]) -> None:
        for row in ids:
            self.pushed.add(row)
            self.count += 1

    async def fill(self, n: int) -> None:
        """Queue `n` rows in `push_many` of 1,000, one after the other (the calibration)."""
        for first in range(0, n, 1_000):
            now = time.time_ns()
            size = min(1_000, n - first)
            self._got(await self.jobs.push_many([Noop(now, self.pad) for _ in range(size)]))

    async def _push(self, n: int) -> None:
        try:
            now = time.time_ns()
            if n == 1:
                self._got([await self.jobs.push(Noop(now, self.pad))])
            else:
                self._got(await self.jobs.push_many([Noop(now, self.pad) for _ in range(n)]))
        except Exception as error:  # counted and reported; the soak goes on
            self.errors += 1
            self.first_error = self.first_error or f"{type(error).__name__}: {error}"
        finally:
            self.slots.release()

    async def _launch(self, n: int) -> None:
        await self.slots.acquire()
        task = asyncio.create_task(self._push(n))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def flat_out(self, seconds: float) -> None:
        """Push as fast as `IN_FLIGHT` lets, in the traffic's mix, for `seconds`; then wait for
        the answers still due."""
        singles = round(BATCH * (1 - BATCHED_SHARE) / BATCHED_SHARE)  # pushes per push_many
        began, launched = time.monotonic(), 0
        while time.monotonic() - began < seconds:
            await self._launch(BATCH if launched % (singles + 1) == singles else 1)
            launched += 1
        if self.tasks:
            await asyncio.wait(list(self.tasks))

    async def run(self, rate: float, seconds: float) -> None:
        """Push for `seconds`, then wait for the answers still due."""
        began, before = time.monotonic(), self.count
        singles = batches = 0
        while (elapsed := time.monotonic() - began) < seconds:
            self.due = before + int(rate * elapsed)
            while singles < int(rate * (1 - BATCHED_SHARE) * elapsed):
                await self._launch(1)
                singles += 1
            while batches < int(rate * BATCHED_SHARE * elapsed / BATCH):
                await self._launch(BATCH)
                batches += 1
            await asyncio.sleep(0.005)
        if self.tasks:
            await asyncio.wait(list(self.tasks))


# ------------------------------------------------------------------------------ the run


@dataclass
class Run:
    """What a soak found: the settings and facts (`meta`), every sample, and each sample's
    histogram of push → start (for the summary's windows)."""

    meta: dict[str, Any]
    samples: list[dict[str, Any]]
    hists: list[Counter[int]]


async def wait_until(
    what: str, done: Callable[[], Awaitable[bool]], timeout_s: float, workers: Workers
) -> None:
    """Ask `done()` every 0.1 s until it is true, or fail saying `what` (or that a worker
    process ended)."""
    deadline = time.monotonic() + timeout_s
    while not await done():
        workers.check_alive()
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


async def calibrate(
    producer: Producer, probe: Probe, workers: Workers, tally: Tally, args: argparse.Namespace
) -> dict[str, Any]:
    """Queue `--calibrate-jobs` rows and read the bytes a queued row takes; then start the
    workers, let them run those, and push as fast as the producer can for `CALIBRATE_S`: the
    runs started over the middle 80 % of that window are the capacity (jobs/s)."""
    n: int = args.calibrate_jobs
    await producer.fill(n)
    filled = await probe.sizes()
    tally.starts = []
    workers.start()
    workers.listen(tally)

    async def all_ran() -> bool:
        return tally.records >= n

    async def all_registered() -> bool:
        return await probe.workers_seen() >= int(args.workers_procs)

    await wait_until("the calibration's runs", all_ran, 300, workers)
    await wait_until("the workers' registry entries", all_registered, 60, workers)
    tally.starts = []
    began = time.time_ns()
    await producer.flat_out(CALIBRATE_S)

    async def pushed_ran() -> bool:
        return tally.records >= producer.count

    await wait_until("the calibration's pushed rows", pushed_ran, 300, workers)
    window_ns = CALIBRATE_S * 1e9
    low, high = began + window_ns * 0.1, began + window_ns * 0.9
    started = sum(1 for t in tally.starts if low <= t < high)
    tally.starts = None
    return {
        "calibrate_jobs": n,
        "calibrate_pushed": producer.count - n,
        "capacity": started / ((high - low) / 1e9),
        "queued_row_bytes": filled.get("size:nilo_jobs", 0) / n,
        "queued_row_index_bytes": filled.get("indexes:nilo_jobs", 0) / n,
        "filled_sizes": filled,
    }


async def take_sample(
    t: float, since: float, probe: Probe, workers: Workers, producer: Producer, tally: Tally
) -> tuple[dict[str, Any], Counter[int]]:
    """The sample at `t` seconds into the soak (the one before at `since`): the runs started
    since the last sample (up to `GRACE_S` ago, the records' way down the pipes), the producer,
    the database and the workers' memory; and the histogram of those runs' push → start."""
    hist = tally.take(t - GRACE_S)
    done = sum(hist.values())
    sample: dict[str, Any] = {
        "t_s": round(t, 2),
        "done": done,
        "throughput": done / (t - since),
        "p50_ms": quantile(hist, 0.50),
        "p99_ms": quantile(hist, 0.99),
        "max_ms": bucket_ms(max(hist)) if hist else None,
        "pushed": producer.count,
        "behind": producer.behind,
        "push_errors": producer.errors,
    }
    sample.update(await probe.sample())
    for i, size in enumerate(workers.rss_mb()):
        sample[f"rss_mb_{i}"] = round(size, 1)
    return sample, hist


async def soak(
    url: str, probe: Probe, workers: Workers, args: argparse.Namespace, meta: dict[str, Any]
) -> Run:
    """The whole run: the table, the calibration, `--minutes` of traffic with a sample every
    `--sample-s` (and the held snapshot), the last rows run, the workers stopped, the checks.
    SIGTERM stops it as Ctrl-C does."""
    main_task = asyncio.current_task()
    assert main_task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    store = job.Table(url)
    await store.create_missing()
    await probe.open()
    producer = Producer(job.Jobs(kinds=[Noop], store=store), args.pad)
    tally = Tally()
    run = Run(meta, [], [])
    background: list[asyncio.Task[None]] = []
    try:
        meta["server_version"] = await probe.version()
        meta["indexes"] = await probe.indexes()
        meta.update(await calibrate(producer, probe, workers, tally, args))
        rate = meta["rate"] = args.rate or LOAD * meta["capacity"]
        print(f"capacity {meta['capacity']:,.0f} jobs/s; pushing {rate:,.0f} jobs/s for "
              f"{args.minutes:g} min", file=sys.stderr)  # fmt: skip
        seconds = args.minutes * 60
        tally.origin_ns = time.time_ns()
        tally.seconds.clear()  # the calibration's
        began = time.monotonic()
        background.append(asyncio.create_task(producer.run(rate, seconds)))
        if args.hold_snapshot:
            background.append(asyncio.create_task(held(probe, args, began, meta)))
        last = 0.0
        # Every --sample-s but the last, which comes once every pushed row has run.
        for k in range(1, math.ceil(seconds / args.sample_s)):
            await asyncio.sleep(max(0.0, began + k * args.sample_s - time.monotonic()))
            workers.check_alive()
            t = time.monotonic() - began
            sample, hist = await take_sample(t, last, probe, workers, producer, tally)
            run.samples.append(sample)
            run.hists.append(hist)
            last = t
            print(progress(sample), file=sys.stderr)
        await asyncio.gather(*background)

        async def all_ran() -> bool:
            return tally.records >= producer.count

        await wait_until("every pushed row's run", all_ran, 300, workers)
        t = time.monotonic() - began
        # The last sample: every run not counted yet, the drain's (if any) included.
        sample, hist = await take_sample(t + GRACE_S + 1, last, probe, workers, producer, tally)
        sample["t_s"], sample["throughput"] = round(t, 2), sample["done"] / (t - last)
        run.samples.append(sample)
        run.hists.append(hist)
        meta["drain_s"] = t - seconds
        meta["pushed"] = producer.count
        meta["push_errors"], meta["first_push_error"] = producer.errors, producer.first_error
        meta["push_behind_max"] = max(s["behind"] for s in run.samples)
        await asyncio.to_thread(workers.stop)  # the loop reads their pipes meanwhile
        meta["db"] = await probe.counts()
        meta["end_sizes"] = await probe.sizes()
        kept_all = args.retention_ms / 1_000 > time.monotonic() - began + 60  # nothing pruned
        meta["checks"] = exactly_once(producer.pushed, tally, meta["db"], kept_all)
    finally:
        for task in [*background, *producer.tasks]:
            task.cancel()
        await asyncio.gather(*background, *producer.tasks, return_exceptions=True)
        workers.close()
        await probe.close()
        await store.close()
    return run


async def held(probe: Probe, args: argparse.Namespace, began: float, meta: dict[str, Any]) -> None:
    """The held snapshot, `--hold-at` minutes into the soak, for `--hold-snapshot` seconds."""
    await asyncio.sleep(max(0.0, began + args.hold_at * 60 - time.monotonic()))
    meta["hold_from_s"] = time.monotonic() - began
    print(f"holding a snapshot for {args.hold_snapshot:g} s", file=sys.stderr)
    await probe.hold(args.hold_snapshot)
    meta["hold_to_s"] = time.monotonic() - began
    print("snapshot released", file=sys.stderr)


def exactly_once(
    pushed: IdCounts, tally: Tally, db: dict[str, Any], kept_all: bool
) -> dict[str, Any]:
    """Every pushed row ran exactly once: the ids pushed against the ids the runs reported,
    and the database's history (`kept_all`: the retention kept every done row) and queue."""
    a, b = pushed.counts, tally.runs.counts
    size = max(len(a), len(b))
    a, b = a + bytes(size - len(a)), b + bytes(size - len(b))
    ran = tally.runs.total()
    checks = {
        "pushed": pushed.total(),
        "ids_pushed_twice": sum(1 for x in a if x > 1),  # an id handed out twice
        "rows_run": ran,
        "runs_reported": tally.records,
        "runs_twice": tally.records - ran,
        "pushed_never_run": sum(1 for x, y in zip(a, b, strict=True) if x and not y),
        "run_never_pushed": sum(1 for x, y in zip(a, b, strict=True) if y and not x),
        "history_rows": db["done"],
        "history_rows_retried": db["retried"],
        "attempt_rows": db["attempt_rows"],
        "left_in_queue": sum(db["left"].values()),
    }
    wrong = ("ids_pushed_twice", "pushed_never_run", "run_never_pushed", "history_rows_retried",
             "attempt_rows", "left_in_queue")  # fmt: skip
    checks["ok"] = (
        checks["pushed"] == ran == tally.records
        and (db["done"] == ran or not kept_all)
        and not any(checks[k] for k in wrong)
    )
    return checks


def mb(n: float | None) -> str:
    return f"{(n or 0) / 1_048_576:.1f}"


def shown(key: str, value: Any) -> str:
    """A sample's value in words: bytes in MB, the rest as they are."""
    if key.startswith(("size:", "indexes:")) or key.endswith("_bytes"):
        return f"{mb(value)} MB"
    return f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"


def progress(sample: dict[str, Any]) -> str:
    """One sample on one line, as the soak goes."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    line = (
        f"{sample['t_s'] / 60:5.1f} min {sample['throughput']:7,.0f} jobs/s  "
        f"p50 {ms(sample['p50_ms'])} p99 {ms(sample['p99_ms'])} ms  due {sample['queued_due']:,}  "
        f"nilo_jobs {mb(sample.get('size:nilo_jobs'))}+{mb(sample.get('indexes:nilo_jobs'))} MB  "
        f"done {mb(sample.get('size:nilo_jobs_done'))}+{mb(sample.get('indexes:nilo_jobs_done'))}"
        " MB"
    )
    if "xmin_age" in sample:
        return line + f"  dead {sample.get('dead:nilo_jobs', 0):,}  xmin age {sample['xmin_age']:,}"
    return line + f"  log {mb(sample['wal_bytes'])} MB"


# -------------------------------------------------------------------------- the summary


def window(run: Run, t0: float, t1: float) -> dict[str, Any]:
    """Throughput and push → start over the samples that end in (t0, t1]."""
    picked = [i for i, s in enumerate(run.samples) if t0 < s["t_s"] <= t1]
    if not picked:
        return {}
    hist: Counter[int] = Counter()
    for i in picked:
        hist.update(run.hists[i])
    start = run.samples[picked[0] - 1]["t_s"] if picked[0] else 0.0
    end = run.samples[picked[-1]]["t_s"]
    return {
        "from_s": start,
        "to_s": end,
        "throughput": sum(hist.values()) / (end - start),
        "p50_ms": quantile(hist, 0.5),
        "p99_ms": quantile(hist, 0.99),
        "max_ms": bucket_ms(max(hist)) if hist else None,
    }


def hold_keys(sample: dict[str, Any]) -> list[str]:
    """What the summary follows around the held snapshot."""
    keys = ["dead:nilo_jobs", "dead:nilo_jobs_done", "xmin_age", "oldest_xact_s", "wal_bytes",
            "free_bytes", "size:nilo_jobs", "indexes:nilo_jobs", "size:nilo_jobs_pkey",
            "size:nilo_jobs_due", "size:nilo_jobs_lease", "queued_due", "oldest_due_s"]  # fmt: skip
    return [k for k in keys if k in sample]


def summarize(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    """First against last minutes, sizes, memory, bytes per job and the hold, as numbers."""
    meta, samples = run.meta, run.samples
    soak_s = args.minutes * 60
    span = min(300.0, soak_s / 3)  # 5 minutes, or a third of a shorter run
    early = min(samples, key=lambda s: abs(s["t_s"] - span))
    end = samples[-1]
    last_in_soak = (samples[:-1] or samples)[-1]  # the last sample before the drain
    end_sizes = meta["end_sizes"]
    history = end_sizes.get("size:nilo_jobs_done", 0) + end_sizes.get("indexes:nilo_jobs_done", 0)
    summary: dict[str, Any] = {
        "window_s": span,
        "first": window(run, 0, span),
        "last": window(run, soak_s - span, math.inf),  # the last sample's drain included
        "early_t_s": early["t_s"],
        "sizes": {
            k: [early[k], end[k]]
            for k in end
            if k.startswith(("size:", "indexes:", "dead:", "autovacuum:", "autoanalyze:"))
            or k in ("free_bytes", "wal_bytes", "file_bytes")
        },
        "rss_mb": {k: [samples[0][k], early[k], end[k]] for k in end if k.startswith("rss_mb_")},
        "bytes_per_queued_row": meta["queued_row_bytes"] + meta["queued_row_index_bytes"],
        "bytes_per_history_row": history / max(1, meta["db"]["done"]),
        # Kept up: less than a second of traffic waiting at the soak's last sample.
        "kept_up": last_in_soak["oldest_due_s"] < 1 and last_in_soak["queued_due"] < meta["rate"],
        "due_at_last_sample": [last_in_soak["queued_due"], last_in_soak["oldest_due_s"]],
        "queue_table_max": max(
            s.get("size:nilo_jobs", 0) + s.get("indexes:nilo_jobs", 0) for s in samples
        ),
    }
    if "hold_from_s" in meta:
        h0, h1 = meta["hold_from_s"], meta["hold_to_s"]
        # A sample counts the runs started up to GRACE_S before it: those of the stretch.
        g = GRACE_S
        stretches = {"before": (max(0.0, 2 * h0 - h1) + g, h0 + g), "during": (h0 + g, h1 + g),
                     "after": (h1 + g, math.inf)}  # fmt: skip
        hold: dict[str, Any] = {"from_s": h0, "to_s": h1}
        for name, (t0, t1) in stretches.items():
            part = [s for s in samples if t0 < s["t_s"] <= t1]
            hold[name] = {
                **window(run, t0, t1),
                "worst_p99_ms": max((s["p99_ms"] or 0 for s in part), default=None),
                "max": {k: max((s[k] for s in part), default=None) for k in hold_keys(end)},
            }
        before = [s for s in samples if s["t_s"] <= h0 + g]
        hold["at_start"] = {k: before[-1][k] for k in hold_keys(end)} if before else {}
        hold["at_end"] = {k: end[k] for k in hold_keys(end)}
        summary["hold"] = hold
    return summary


ALWAYS_SHOWN = {"size:nilo_jobs", "indexes:nilo_jobs", "dead:nilo_jobs", "size:nilo_jobs_done",
                "indexes:nilo_jobs_done", "free_bytes", "wal_bytes", "file_bytes"}  # fmt: skip


def report(run: Run, summary: dict[str, Any], args: argparse.Namespace) -> str:
    """The summary in words, as printed and written to summary.txt."""
    meta, checks = run.meta, run.meta["checks"]
    span = f"{summary['window_s'] / 60:.3g} min"

    def w(part: dict[str, Any]) -> str:
        if not part or part["p50_ms"] is None:
            return "no runs"
        return (f"{part['throughput']:,.0f} jobs/s, push → start p50 {part['p50_ms']:.2f} ms, "
                f"p99 {part['p99_ms']:.2f} ms, max {part['max_ms']:.1f} ms")  # fmt: skip

    due, waited = summary["due_at_last_sample"]
    kept_up = "yes" if summary["kept_up"] else "NO, the rate is past what this machine runs"
    lines = [
        f"soak: {args.store} {meta['server_version']}, {args.minutes:g} min at {meta['rate']:,.0f}"
        f" jobs/s ({meta['rate'] / meta['capacity']:.0%} of the calibrated "
        f"{meta['capacity']:,.0f} jobs/s), {args.workers_procs} worker processes × "
        f"{args.workers}; nilo-job {meta['commit']}, sources {meta['sources']}",
        f"pushed {meta['pushed']:,} rows "
        f"({meta['calibrate_jobs'] + meta['calibrate_pushed']:,} of them for the calibration); "
        f"push errors {meta['push_errors']}; the producer was at most "
        f"{meta['push_behind_max']:,} jobs behind its schedule; the last rows ran "
        f"{meta['drain_s']:.1f} s after the pushes ended",
        f"the workers kept up: {kept_up} ({due:,} queued due rows at the soak's last sample, "
        f"the oldest waiting {waited:.1f} s)",
        f"first {span}: {w(summary['first'])}",
        f"last {span}:  {w(summary['last'])}",
        f"at {summary['early_t_s'] / 60:.1f} min → at the end:",
    ]
    for key, (a, b) in summary["sizes"].items():
        name = key.split(":", 1)[-1]
        tiny = shown(key, max(a, b)) in ("0.0 MB", "0") and key not in ALWAYS_SHOWN
        if meta["indexes"].get(name, name) in ("nilo_jobs", "nilo_jobs_done", key) and not tiny:
            lines.append(f"  {key}: {shown(key, a)} → {shown(key, b)}")
    rss = "; ".join(f"{a:.0f} → {b:.0f} → {c:.0f}" for a, b, c in summary["rss_mb"].values())
    lines.append(f"worker RSS (MB), after the calibration → {span} → end: {rss}")
    lines.append(
        f"bytes per job: a queued row {summary['bytes_per_queued_row']:.0f} (heap "
        f"{meta['queued_row_bytes']:.0f}, indexes {meta['queued_row_index_bytes']:.0f}; "
        f"{meta['calibrate_jobs']:,} rows queued); a history row "
        f"{summary['bytes_per_history_row']:.0f} (nilo_jobs_done and its indexes over "
        f"{meta['db']['done']:,} rows); nilo_jobs with its indexes at most "
        f"{mb(summary['queue_table_max'])} MB"
    )
    if "hold" in summary:
        hold = summary["hold"]
        lines.append(f"held snapshot from {hold['from_s'] / 60:.2f} to {hold['to_s'] / 60:.2f} min")
        for name in ("before", "during", "after"):
            part = hold[name]
            most = ", ".join(f"{k} {shown(k, v)}" for k, v in part["max"].items() if v is not None)
            lines.append(f"  {name}: {w(part)}; worst sample p99 {part['worst_p99_ms'] or 0:.1f}"
                         f" ms; the most of: {most}")  # fmt: skip
        for name in ("at_start", "at_end"):
            values = ", ".join(f"{k} {shown(k, v)}" for k, v in hold[name].items())
            lines.append(f"  {name.replace('_', ' ')}: {values}")
    lines.append(
        f"exactly once: {'yes' if checks['ok'] else 'NO'}: pushed {checks['pushed']:,}, rows run "
        f"{checks['rows_run']:,}, runs reported {checks['runs_reported']:,}, run twice "
        f"{checks['runs_twice']}, never run {checks['pushed_never_run']}, history rows "
        f"{checks['history_rows']:,} (retried {checks['history_rows_retried']}), attempts "
        f"recorded {checks['attempt_rows']}, left in the queue {checks['left_in_queue']}"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the files


def write_files(run: Run, summary: dict[str, Any], text: str, out: Path) -> None:
    """soak.json, soak.csv, summary.txt and soak.png in `out`."""
    hists = [dict(sorted(hist.items())) for hist in run.hists]  # bucket → runs, as `bucket`
    data = {"meta": run.meta, "summary": summary, "samples": run.samples, "hists": hists}
    (out / "soak.json").write_text(json.dumps(data, indent=1))
    fields: dict[str, None] = {}
    for sample in run.samples:
        fields.update(dict.fromkeys(sample))
    with (out / "soak.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(run.samples)
    (out / "summary.txt").write_text(text + "\n")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if not PEERS_PY.exists():
            print("no chart: no matplotlib here nor in bench/.peers/venv", file=sys.stderr)
            return
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        chart = [str(PEERS_PY), __file__, "--chart", str(out)]
        done = subprocess.run(chart, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print("chart failed:", done.stderr[-1_000:], file=sys.stderr)
    else:
        draw_chart(out)


def draw_chart(out: Path) -> None:
    """soak.png from soak.json: throughput, push → start, the queue's and the history's sizes,
    dead row versions and the oldest snapshot (SQLite: the log and free pages), the workers'
    memory and the queued due rows; the held snapshot shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads((out / "soak.json").read_text())
    samples, meta = data["samples"], data["meta"]
    minutes = [s["t_s"] / 60 for s in samples]

    def line(ax: Any, key: str, label: str, scale: float = 1.0, **style: Any) -> None:
        ax.plot(minutes, [(s.get(key) or 0) * scale for s in samples], label=label, **style)

    fig, axes = plt.subplots(3, 2, figsize=(13, 11), sharex=True)
    (runs, latency), (queue, history), (dead, memory) = axes
    line(runs, "throughput", "runs started / s")
    runs.axhline(meta["rate"], color="grey", linestyle="--", label="the producer's rate")
    runs.set_title("throughput (jobs/s)")
    line(latency, "p50_ms", "p50")
    line(latency, "p99_ms", "p99")
    latency.set_yscale("log")
    latency.set_title("push → start (ms)")
    for ax, table in ((queue, "nilo_jobs"), (history, "nilo_jobs_done")):
        line(ax, f"size:{table}", "heap", 1 / 1_048_576)
        line(ax, f"indexes:{table}", "indexes", 1 / 1_048_576)
        for index in [i for i, on in meta["indexes"].items() if on == table]:
            line(ax, f"size:{index}", index, 1 / 1_048_576, linestyle=":")
        ax.set_title(f"{table} (MB)")
    if "xmin_age" in samples[0]:
        line(dead, "dead:nilo_jobs", "nilo_jobs")
        line(dead, "dead:nilo_jobs_done", "nilo_jobs_done")
        dead.set_title("dead row versions; the oldest snapshot's age (s, right)")
        right = dead.twinx()
        line(right, "oldest_xact_s", "oldest snapshot (s)", color="black", alpha=0.5)
    else:
        line(dead, "wal_bytes", "write-ahead log", 1 / 1_048_576)
        line(dead, "free_bytes", "free pages", 1 / 1_048_576)
        dead.set_title("SQLite: the log and the free pages (MB); queued due rows (right)")
        right = None
    for key in [k for k in samples[0] if k.startswith("rss_mb_")]:
        line(memory, key, f"worker process {key.rsplit('_', 1)[1]}")
    memory.set_ylim(bottom=0)
    memory.set_title("worker processes' resident memory (MB); queued due rows (right)")
    due = memory.twinx()
    line(due, "queued_due", "queued due rows", color="black", alpha=0.5)
    for ax in (right, due):
        if ax is not None:
            ax.legend(loc="upper right", fontsize=8)
    for ax in axes.flat:
        if "hold_from_s" in meta:
            ax.axvspan(meta["hold_from_s"] / 60, meta["hold_to_s"] / 60, color="orange", alpha=0.2)
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    held = " (shaded: the held snapshot)" if "hold_from_s" in meta else ""
    fig.suptitle(f"soak: {meta['store']}, {meta['rate']:,.0f} jobs/s, {meta['workers_procs']} "
                 f"processes × {meta['workers']} workers{held}")  # fmt: skip
    fig.tight_layout()
    fig.savefig(out / "soak.png", dpi=90)


# ---------------------------------------------------------------------------------- main


def git_commit() -> str:
    """HEAD, and whether `nilo_job/` differs from it."""

    def git(*argv: str) -> str:
        done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "nilo_job")
    return (git("rev-parse", "--short", "HEAD") or "?") + (" (modified)" if dirty else "")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("pg", "sqlite"), default="pg")
    parser.add_argument("--minutes", type=float, default=30, help="the traffic's length")
    parser.add_argument("--rate", type=float, help=f"jobs/s (default: {LOAD:.0%}% of the capacity)")
    parser.add_argument("--workers-procs", type=int, default=2, help="worker processes")
    parser.add_argument("--workers", type=int, default=4, help="workers per process")
    parser.add_argument("--sample-s", type=float, default=15, help="seconds between samples")
    parser.add_argument(
        "--hold-snapshot", type=float, default=0, metavar="SECONDS", help="hold one this long"
    )
    parser.add_argument(
        "--hold-at", type=float, metavar="MINUTE", help="when the hold begins (default: mid-run)"
    )
    parser.add_argument(
        "--calibrate-jobs", type=int, default=20_000, help="rows the capacity is measured on"
    )
    parser.add_argument("--payload-bytes", type=int, default=0, help="padding in each payload")
    parser.add_argument("--retention-ms", type=int, default=3_600_000, help="the queue's default")
    parser.add_argument(
        "--pg-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a server setting besides the defaults (repeat it), e.g. autovacuum_naptime=10s",
    )
    parser.add_argument(
        "--log-level", default="WARNING", help="the worker processes' (workers.log): e.g. INFO"
    )
    parser.add_argument("--out", help="where the files go (default: a new temporary folder)")
    parser.add_argument("--chart", metavar="DIR", help=argparse.SUPPRESS)  # soak.png only
    args = parser.parse_args()
    if args.hold_at is None:
        args.hold_at = args.minutes / 2
    args.pad = "x" * args.payload_bytes
    return args


def stop_on_sigterm(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt  # the same clean-up as Ctrl-C (the soak's loop cancels instead)


def main() -> None:
    args = arguments()
    if args.chart:
        draw_chart(Path(args.chart))
        return
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="nilo-soak-out-"))
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="nilo-soak-"))
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    meta: dict[str, Any] = {
        "store": args.store,
        "minutes": args.minutes,
        "workers_procs": args.workers_procs,
        "workers": args.workers,
        "sample_s": args.sample_s,
        "payload_bytes": args.payload_bytes,
        "retention_ms": args.retention_ms,
        "pg_settings": args.pg_set,
        "hold_snapshot_s": args.hold_snapshot,
        "hold_at_min": args.hold_at if args.hold_snapshot else None,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.platform()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "commit": git_commit(),
        "sources": snapshot_nilo_job(folder),
    }
    cluster = Cluster(folder / "pg", args.pg_set) if args.store == "pg" else None
    workers: Workers | None = None
    try:
        if cluster is not None:
            url = cluster.start()
            probe: Probe = PgProbe(url)
        else:
            path = folder / "soak.db"
            url = f"sqlite:///{path}"
            probe = SqliteProbe(path)
        workers = Workers(folder, url, args, out / "workers.log")
        run = run_on_loop(soak(url, probe, workers, args, meta))
        signal.signal(signal.SIGTERM, stop_on_sigterm)  # the loop's handler went with it
        summary = summarize(run, args)
        text = report(run, summary, args)
        print(text)
        write_files(run, summary, text, out)
        print(f"written to {out}", file=sys.stderr)
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: the workers, the cluster and the temporary folder go", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        if workers is not None:
            workers.stop()
        if cluster is not None:
            cluster.stop()
            if cluster.log.exists():
                shutil.copy(cluster.log, out / "server.log")
        shutil.rmtree(folder, ignore_errors=True)


def run_on_loop(coroutine: Coroutine[Any, Any, Run]) -> Run:
    """Run the soak on uvloop when it is installed (as `nilo-job worker` and uvicorn do)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


if __name__ == "__main__":
    main()
