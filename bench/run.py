"""The benchmark: nilo-job against raw SQL and the Python job queues, side by side in one run.

    .venv/bin/python bench/run.py                      # the full run (10,000 jobs, median of 3)
    .venv/bin/python bench/run.py --quick              # 2,000 jobs, one repetition
    .venv/bin/python bench/run.py --only W2,idle --stores pg --subjects nilo,pgqueuer
    .venv/bin/python bench/run.py --only W1,W2,W3,claim --stores mariadb,pg

It installs the peers (procrastinate, pgqueuer, oban, huey) and matplotlib into
`bench/.peers/venv` on first use, runs every workload as a subprocess per subject in a fresh
database, and writes `bench/results.json`, `bench/RESULTS.md` and `bench/results.png`.
What each workload measures, and why it is fair: `docs/bench.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import glob
import hashlib
import json
import os
import platform
import shutil
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEERS_DIR = BENCH / ".peers"
PEERS_VENV = PEERS_DIR / "venv"
PEERS_PY = PEERS_VENV / "bin" / "python"
LOGS = PEERS_DIR / "logs"

# Versions that install on this machine kind (Python 3.12 for oban, which requires it).
PINS = {
    "procrastinate": "procrastinate==3.10.0",
    "pgqueuer": "pgqueuer==1.6.0",
    "oban": "oban==0.7.0",
    "huey": "huey==3.5.4",
    "matplotlib": "matplotlib==3.11.2",
    "psycopg": "psycopg[binary]==3.3.9",
    "psycopg-pool": "psycopg-pool==3.3.3",
    "asyncpg": "asyncpg==0.32.0",
    # nilo-job's own dependencies, for the SQLite W1 alternated with huey in one process
    "msgspec": "msgspec>=0.18",
    "click": "click>=8.1",
    "cronsim": "cronsim>=2.6",
}
PEERS = ("pgqueuer", "procrastinate", "oban", "huey")
PEER_STORES = {"pgqueuer": "pg", "procrastinate": "pg", "oban": "pg", "huey": "sqlite"}

# Measured in the first repetition only: idle and the wire counts are long, steady measurements
# of their own. (The claim cost is not: its ratio read 1.00, 1.23 and 0.94 in three runs over two
# days, so it takes the median of the repetitions like the rest.)
ONCE: set[object] = {"idle", "wire"}

GROUPS = {
    "W1": ("w1_one", "w1_pool16", "w1_bulk"),
    "W2": ("w2_1x4", "w2_4proc"),
    "W3": ("w3_inproc", "w3_xproc"),
    "idle": ("idle",),
    "claim": ("claim",),
    "wire": ("wire",),
}

TITLES = {
    "w1_one": "W1 push one by one (one producer, each push its own transaction)",
    "w1_pool16": "W1 push from 16 concurrent producers (asyncio tasks) through one pool",
    "w1_bulk": "W1 bulk push (batches of 1,000)",
    "w2_1x4": "W2 run 10,000 queued no-op jobs: one process, 4 workers",
    "w2_4proc": "W2 run 10,000 queued no-op jobs: 4 processes × 4 workers",
    "w3_inproc": "W3 push → run starts, worker idle in the same process",
    "w3_xproc": "W3 push → run starts, idle worker in another process (poll_ms=1000)",
    "idle": "Idle cost: a worker process (4 workers, poll_ms=1000) with nothing to do",
    "claim": "Claim cost: store.claim(limit=4), 100 due rows, empty table vs 1,000,000 dead rows",
    "wire": "Statements sent to PostgreSQL per job (counted on the wire)",
}


# ------------------------------------------------------------------------------ the cases


@dataclass(frozen=True)
class Case:
    workload: str
    store: str  # "pg" | "sqlite" | "mariadb"
    subject: str  # "nilo", "raw", "raw_tx", "raw_claim1", "raw_claim100", or a peer
    script: str  # relative to bench/
    action: str
    extra: tuple[str, ...] = ()

    @property
    def python(self) -> str:
        return str(PEERS_PY) if self.script.startswith("peers/") else sys.executable

    @property
    def key(self) -> str:
        return f"{self.store}/{self.workload}/{self.subject}"


def all_cases() -> list[Case]:
    cases: list[Case] = []

    def add(
        workload: str, store: str, subject: str, action: str, *extra: str, script: str = ""
    ) -> None:
        if not script:
            script = "nilo.py" if subject.startswith("nilo") else ""
        if not script:
            script = "raw.py" if subject.startswith("raw") else f"peers/{subject}_peer.py"
        cases.append(Case(workload, store, subject, script, action, tuple(extra)))

    pg_peers = ("pgqueuer", "procrastinate", "oban")
    # PostgreSQL
    add("w1_one", "pg", "nilo", "w1_one")
    add("w1_one", "pg", "raw", "w1_one")
    add("w1_one", "pg", "raw_tx", "w1_one_tx")
    add("w1_one", "pg", "nilo_paired", "w1_paired")
    for peer in pg_peers:
        add("w1_one", "pg", peer, "w1_one")
    add("w1_pool16", "pg", "nilo", "w1_pool16")
    add("w1_pool16", "pg", "raw", "w1_pool16")
    add("w1_pool16", "pg", "raw_tx", "w1_pool16_tx")
    for peer in pg_peers:
        add("w1_pool16", "pg", peer, "w1_pool16")
    add("w1_bulk", "pg", "nilo", "w1_bulk")
    add("w1_bulk", "pg", "raw", "w1_bulk")
    for peer in pg_peers:
        add("w1_bulk", "pg", peer, "w1_bulk")
    add("w2_1x4", "pg", "nilo", "w2")
    add("w2_1x4", "pg", "raw_claim1", "w2", "--claim", "1")
    add("w2_1x4", "pg", "raw_claim100", "w2", "--claim", "100")
    for peer in pg_peers:
        add("w2_1x4", "pg", peer, "w2")
    add("w3_inproc", "pg", "raw", "w3_inproc")
    # nilo-job and pgqueuer alternated sample by sample, each worker in a process of its own
    add("w3_xproc", "pg", "nilo_paired", "w3_paired", "--nilo-python", sys.executable,
        script="peers/pgqueuer_peer.py")  # fmt: skip
    for subject in ("nilo", *pg_peers):
        add("w2_4proc", "pg", subject, "w2_child")
        add("w3_inproc", "pg", subject, "w3_inproc")
        add("w3_xproc", "pg", subject, "w3_xproc")
        add("idle", "pg", subject, "idle_worker")
    add("claim", "pg", "nilo", "claim_cost")
    for subject in ("nilo", *pg_peers):
        add("wire", "pg", subject, "wire")
    # SQLite
    add("w1_one", "sqlite", "nilo", "w1_one")
    add("w1_one", "sqlite", "raw", "w1_one")
    add("w1_one", "sqlite", "huey", "w1_one")
    # nilo-job and huey alternated push by push in one process (the peers' Python, both there)
    add("w1_one", "sqlite", "nilo_paired", "w1_paired", script="peers/huey_peer.py")
    add("w1_pool16", "sqlite", "nilo", "w1_pool16")
    add("w1_bulk", "sqlite", "nilo", "w1_bulk")
    add("w1_bulk", "sqlite", "raw", "w1_bulk")
    add("w2_1x4", "sqlite", "nilo", "w2")
    add("w2_1x4", "sqlite", "raw_claim1", "w2", "--claim", "1")
    add("w2_1x4", "sqlite", "raw_claim100", "w2", "--claim", "100")
    add("w2_1x4", "sqlite", "huey", "w2")
    add("w2_4proc", "sqlite", "nilo", "w2_child")
    add("w3_inproc", "sqlite", "nilo", "w3_inproc")
    add("w3_inproc", "sqlite", "raw", "w3_inproc")
    add("w3_xproc", "sqlite", "nilo", "w3_xproc")
    add("w3_xproc", "sqlite", "huey", "w3_xproc")
    add("idle", "sqlite", "nilo", "idle_worker")
    add("idle", "sqlite", "huey", "idle_worker")
    add("claim", "sqlite", "nilo", "claim_cost")
    # MariaDB (`--stores mariadb`): nilo-job against raw SQL on the store's driver (asyncmy)
    add("w1_one", "mariadb", "nilo", "w1_one")
    add("w1_one", "mariadb", "raw", "w1_one")
    add("w1_one", "mariadb", "nilo_paired", "w1_paired")  # nilo and raw SQL, push by push
    add("w2_1x4", "mariadb", "nilo", "w2")
    add("w2_1x4", "mariadb", "raw_claim1", "w2", "--claim", "1")
    add("w2_1x4", "mariadb", "raw_claim100", "w2", "--claim", "100")
    add("w3_xproc", "mariadb", "nilo", "w3_xproc")
    add("claim", "mariadb", "nilo", "claim_cost")
    return cases


# ------------------------------------------------------------------------------ the peers


def _python_version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    major, minor = out.split()
    return int(major), int(minor)


def find_python_312() -> str | None:
    """A Python 3.12 or newer for the peers' venv (oban requires it), or None."""
    candidates = [shutil.which(name) for name in ("python3.13", "python3.12")]
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(glob.glob(f"{pyenv}/versions/3.1[2-9]*/bin/python3"), reverse=True)
    candidates += [sys.executable]
    for python in candidates:
        if python and (version := _python_version(python)) and version >= (3, 12):
            return python
    return None


@dataclass
class PeerEnv:
    python: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # peer -> why it cannot run here
    chart: bool = False


def ensure_peers() -> PeerEnv:
    """`bench/.peers/venv` with the pinned peers, made on first use (again when PINS change)."""
    env = PeerEnv()
    base = find_python_312()
    reason_312 = ""
    if base is None:
        base = sys.executable
        reason_312 = "oban 0.5 and newer require Python 3.12+, and none was found here"
    stamp = PEERS_VENV / ".bench-pins"
    wanted_stamp = json.dumps([base, sorted(PINS.values())])
    pip_log = ""
    if not (PEERS_PY.exists() and stamp.exists() and stamp.read_text() == wanted_stamp):
        print(f"installing the peers into {PEERS_VENV} (Python {base})", flush=True)
        if PEERS_VENV.exists():
            shutil.rmtree(PEERS_VENV)
        try:
            subprocess.run([base, "-m", "venv", str(PEERS_VENV)], check=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as error:
            try:
                venv.EnvBuilder(with_pip=True).create(PEERS_VENV)
            except Exception:
                for peer in PEERS:
                    env.missing[peer] = f"could not create the peers' virtualenv: {error}"
                return env
        pip = [str(PEERS_PY), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        pins = [pin for name, pin in PINS.items() if not (name == "oban" and reason_312)]
        done = subprocess.run([*pip, *pins], capture_output=True, text=True, timeout=1_800)
        if done.returncode != 0:
            pip_log = done.stderr[-2_000:]
            for pin in pins:  # one at a time, to learn which cannot be installed
                subprocess.run([*pip, pin], capture_output=True, text=True, timeout=900)
        else:
            stamp.write_text(wanted_stamp)
    env.python = str(PEERS_PY)
    for peer in (*PEERS, "matplotlib"):
        if peer == "oban" and reason_312:
            env.missing[peer] = reason_312
            continue
        code = f"import {peer}, importlib.metadata as m; print(m.version({peer!r}))"
        probe = subprocess.run(
            [str(PEERS_PY), "-c", code], capture_output=True, text=True, timeout=120
        )
        if probe.returncode == 0:
            env.versions[peer] = probe.stdout.strip()
        else:
            why = (probe.stderr.strip().splitlines() or ["import failed"])[-1]
            env.missing[peer] = f"not importable in {PEERS_VENV}: {why}" + (
                f" (pip: {pip_log.strip().splitlines()[-1]})" if pip_log.strip() else ""
            )
    env.chart = "matplotlib" in env.versions
    env.missing.pop("matplotlib", None)
    return env


# --------------------------------------------------------------------------- the databases


@dataclass
class Places:
    pg_base: str
    tmp: Path
    made: int = 0
    mariadb_base: str = "mariadb://root@127.0.0.1:3306"

    def mariadb_admin(self) -> Any:
        """A PyMySQL connection to the MariaDB server, in autocommit, no database chosen."""
        import pymysql

        if str(BENCH) not in sys.path:
            sys.path.insert(0, str(BENCH))
        import common

        params = {**common.mysql_params(self.mariadb_base), "database": None}
        return pymysql.connect(**params, autocommit=True, charset="utf8mb4")

    def mariadb_show(self, *names: str) -> dict[str, str]:
        """The server's variables `names`, and its version."""
        with contextlib.closing(self.mariadb_admin()) as conn, conn.cursor() as cur:
            cur.execute("SELECT version()")
            found = {"version": str(cur.fetchone()[0])}
            for name in names:
                cur.execute("SHOW GLOBAL VARIABLES LIKE %s", (name,))
                row = cur.fetchone()
                found[name] = str(row[1]) if row else "?"
        return found

    def pg_admin(self, wait_s: float = 180.0) -> Any:
        """A connection to the `postgres` database; waits for a server that is restarting (the
        project's own tests restart it) for up to `wait_s` seconds."""
        import psycopg

        deadline = time.monotonic() + wait_s
        while True:
            try:
                return psycopg.connect(self.pg_base + "/postgres", autocommit=True)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def pg_started(self) -> str:
        """When the PostgreSQL server started: it changes when someone restarts it mid-case."""
        with self.pg_admin() as conn:
            return str(conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0])

    @contextlib.contextmanager
    def database(self, store: str) -> Iterator[str]:
        """A fresh, empty database (PG, MariaDB) or file (SQLite) for one case; gone
        afterwards."""
        self.made += 1
        name = f"nilo_bench_{os.getpid()}_{self.made}"
        if store == "mariadb":
            with contextlib.closing(self.mariadb_admin()) as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{name}`")
            try:
                yield f"{self.mariadb_base}/{name}"
            finally:
                with contextlib.closing(self.mariadb_admin()) as conn, conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            return
        if store == "sqlite":
            path = self.tmp / f"{name}.db"
            try:
                yield f"sqlite:///{path}"
            finally:
                for suffix in ("", "-wal", "-shm", "-journal"):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(f"{path}{suffix}")
            return
        with self.pg_admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{self.pg_base}/{name}"
        finally:
            with self.pg_admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def xacts(self, url: str) -> int:
        name = url.rsplit("/", 1)[1]
        with self.pg_admin() as conn:
            row = conn.execute(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                (name,),
            ).fetchone()
        return int(row[0]) if row else 0


# ------------------------------------------------------------------------------ running one


@dataclass
class Settings:
    jobs: int
    samples: int
    cap_s: float
    idle_s: float
    claim_samples: int
    dead: int


def _argv(case: Case, url: str, s: Settings, action: str | None = None) -> list[str]:
    argv = [case.python, str(BENCH / case.script), action or case.action, "--url", url]
    argv += ["--jobs", str(s.jobs), "--cap-s", str(s.cap_s)]
    if case.workload.startswith("w3"):
        argv += ["--samples", str(s.samples)]
    return argv + list(case.extra)


def _log(case: Case, rep: int) -> Path:
    LOGS.mkdir(parents=True, exist_ok=True)
    return LOGS / f"{case.store}-{case.workload}-{case.subject}-{rep}.log"


def run_script(argv: list[str], log: Path, timeout: float) -> dict[str, Any]:
    """Run one subject script; its RESULT line as a dict, or {"error": ...}."""
    with open(log, "a") as err:
        err.write("$ " + " ".join(argv) + "\n")
        err.flush()
        try:
            done = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout, cwd=ROOT
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    tail = log.read_text().strip().splitlines()[-3:]
    return {"error": f"exit {done.returncode}: " + " | ".join(tail)}


async def run_procs(case: Case, url: str, s: Settings, log: Path, procs: int = 4) -> dict[str, Any]:
    """W2 across processes: fill, start `procs` worker processes, wait for each READY, say GO
    to all, and count the bytes they write (one per run) until every job has run."""
    filled = run_script(_argv(case, url, s, "fill"), log, 600)
    if "error" in filled:
        return filled
    err = open(log, "a")  # noqa: SIM115, ASYNC230 (the children write to it; closed below)
    argv = _argv(case, url, s)
    children = [
        await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            cwd=ROOT,
        )
        for _ in range(procs)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), 120)
            if line.strip() != b"READY":
                return {"error": f"a worker process said {line!r} instead of READY"}
        count = 0
        done_at = 0.0
        finished = asyncio.Event()

        async def read(child: asyncio.subprocess.Process) -> None:
            nonlocal count, done_at
            assert child.stdout is not None
            while chunk := await child.stdout.read(65_536):
                count += chunk.count(b"r")
                if count >= s.jobs and not finished.is_set():
                    done_at = time.perf_counter()
                    finished.set()

        began = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write(b"GO\n")
        readers = [asyncio.create_task(read(child)) for child in children]
        try:
            await asyncio.wait_for(finished.wait(), s.cap_s if s.cap_s > 0 else 3_600)
            durable_at = await until_durable(case.subject, url)
            result = {
                "jobs": s.jobs,
                "seconds": durable_at - began,
                "capped": False,
                "run_seconds": done_at - began,
                "run_rate": s.jobs / (done_at - began),
            }
        except TimeoutError:
            result = {"jobs": count, "seconds": time.perf_counter() - began, "capped": True}
        result["rate"] = result["jobs"] / result["seconds"]
        result["processes"] = procs
        for reader in readers:
            reader.cancel()
        return result
    finally:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()
        err.close()


async def until_durable(subject: str, url: str, timeout_s: float = 60.0) -> float:
    """The `perf_counter` moment at which the subject's table first shows every row finished,
    read every millisecond on a connection of this process (huey writes nothing at an end: at
    once)."""
    import common

    sql = common.UNDONE.get(subject)
    if sql is None:
        return time.perf_counter()
    deadline = time.perf_counter() + timeout_s
    if url.startswith("sqlite:"):
        lite = sqlite3.connect(url.removeprefix("sqlite:///"))  # (`database` names a path)
        try:
            while lite.execute(sql).fetchone()[0] > 0 and time.perf_counter() < deadline:  # noqa: ASYNC110 (a bounded poll of another process's writes)
                await asyncio.sleep(0.001)
        finally:
            lite.close()
        return time.perf_counter()
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as pg:
        while time.perf_counter() < deadline:
            row = await (await pg.execute(sql)).fetchone()
            if row is None or row[0] == 0:
                break
            await asyncio.sleep(0.001)
    return time.perf_counter()


class PgProxy:
    """A TCP proxy in front of PostgreSQL that counts the statements clients send.

    A statement is a simple-protocol Query ('Q') or an extended-protocol Execute ('E'); BEGIN
    and COMMIT count like any other. The proxy answers SSL and GSS encryption requests with
    'N' so that it can read the protocol.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.statements = 0
        self.connections = 0
        self.listen_port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.listen_port = self._server.sockets[0].getsockname()[1]

    def url(self, url: str) -> str:
        """`url` with its host and port replaced by this proxy's."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.listen_port}"))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            sreader, swriter = await asyncio.open_connection(self.host, self.port)
        except OSError:
            cwriter.close()
            return
        self._writers |= {cwriter, swriter}

        async def upstream() -> None:
            while True:
                head = await creader.readexactly(8)
                length, code = struct.unpack("!ii", head)
                if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest: say no
                    cwriter.write(b"N")
                    await cwriter.drain()
                    continue
                swriter.write(head + await creader.readexactly(length - 8))
                break
            while True:
                kind = await creader.readexactly(1)
                raw_length = await creader.readexactly(4)
                (length,) = struct.unpack("!i", raw_length)
                body = await creader.readexactly(length - 4)
                if kind in (b"Q", b"E"):
                    self.statements += 1
                swriter.write(kind + raw_length + body)
                await swriter.drain()

        async def downstream() -> None:
            while chunk := await sreader.read(65_536):
                cwriter.write(chunk)
                await cwriter.drain()

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            for writer in (cwriter, swriter):
                self._writers.discard(writer)
                with contextlib.suppress(Exception):
                    writer.close()


async def run_wire(case: Case, places: Places, log: Path) -> dict[str, Any]:
    """Statements sent per job, counted by PgProxy: a push (W1 one by one, 500 pushes) and
    a job run by one worker process (W2, 2,000 rows queued beforehand without the proxy)."""
    result: dict[str, Any] = {}
    with places.database("pg") as one, places.database("pg") as two:
        proxy = PgProxy(*_host_port(one))
        await proxy.start()
        argv = [case.python, str(BENCH / case.script), "w1_one", "--url", proxy.url(one)]
        pushed = await asyncio.to_thread(
            run_script, [*argv, "--jobs", "500", "--cap-s", "10"], log, 180
        )
        await proxy.stop()
        if "error" in pushed:
            return pushed
        result["push_statements_per_job"] = proxy.statements / pushed["jobs"]
        fill = [case.python, str(BENCH / case.script), "fill", "--url", two, "--jobs", "2000"]
        filled = await asyncio.to_thread(run_script, fill, log, 300)
        if "error" in filled:
            return filled
        proxy = PgProxy(*_host_port(two))
        await proxy.start()
        argv = [case.python, str(BENCH / case.script), "w2", "--url", proxy.url(two)]
        ran = await asyncio.to_thread(
            run_script, [*argv, "--jobs", "2000", "--no-fill", "--cap-s", "10"], log, 180
        )
        await proxy.stop()
        if "error" in ran:
            return ran
        result["run_statements_per_job"] = proxy.statements / ran["jobs"]
        result["run_connections"] = proxy.connections
    return result


def _host_port(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432


async def run_idle(case: Case, url: str, s: Settings, places: Places, log: Path) -> dict[str, Any]:
    """A worker process (4 workers, poll_ms=1000) with nothing to do: statements it sends in
    `s.idle_s` seconds after a 3 s warm-up, and the claims it makes where it can count them."""
    proxy = None
    target = url
    if case.store == "pg":
        proxy = PgProxy(*_host_port(url))
        await proxy.start()
        target = proxy.url(url)
    err = open(log, "a")  # noqa: SIM115, ASYNC230 (the child writes to it; closed below)
    argv = [case.python, str(BENCH / case.script), case.action, "--url", target]
    argv += ["--workers", "4", "--poll-ms", "1000"]
    err.write("$ " + " ".join(argv) + "\n")
    err.flush()
    child = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err, cwd=ROOT
    )
    assert child.stdin is not None
    assert child.stdout is not None

    async def snap() -> tuple[float, int, int, int, int]:
        child.stdin.write(b"SNAP\n")  # type: ignore[union-attr]
        while True:
            line = await asyncio.wait_for(child.stdout.readline(), 30)  # type: ignore[union-attr]
            if not line:
                raise RuntimeError("the worker process ended")
            if line.startswith(b"SNAP"):
                _, claims, statements = line.split()
                xacts = places.xacts(url) if case.store == "pg" else -1
                wire = proxy.statements if proxy else -1
                return time.perf_counter(), int(claims), int(statements), wire, xacts

    try:
        line = await asyncio.wait_for(child.stdout.readline(), 120)
        if line.strip() != b"READY":
            return {"error": f"the worker said {line!r} instead of READY"}
        await asyncio.sleep(3.0)
        t0, c0, st0, w0, x0 = await snap()
        await asyncio.sleep(s.idle_s)
        t1, c1, st1, w1, x1 = await snap()
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
        err.close()
        if proxy:
            await proxy.stop()
    seconds = t1 - t0
    statements = (w1 - w0) if proxy else (st1 - st0 if st0 >= 0 else None)
    result: dict[str, Any] = {"seconds": seconds, "workers": 4, "poll_ms": 1000}
    if statements is not None:
        result["statements"] = statements
        result["statements_per_s"] = statements / seconds
        result["statements_per_worker_per_poll"] = statements / seconds * 1.0 / 4
    if c0 >= 0:
        result["claims"] = c1 - c0
        result["claims_per_s"] = (c1 - c0) / seconds
        result["claims_per_worker_per_poll"] = (c1 - c0) / seconds * 1.0 / 4
    if x0 >= 0:
        result["xacts_per_s_pg_stat"] = (x1 - x0) / seconds
    return result


def run_case(case: Case, rep: int, s: Settings, places: Places) -> dict[str, Any]:
    """One case; run again once if the PostgreSQL server restarted while it ran (the project's
    test suite restarts it), since that run measured the restart."""
    started = places.pg_started() if case.store == "pg" else ""
    try:
        result = _run_case(case, rep, s, places)
    except Exception as error:
        result = {"error": f"{type(error).__name__}: {error}"}
    if case.store == "pg" and places.pg_started() != started:
        print(f"  PostgreSQL restarted during {case.key}: running it again", flush=True)
        try:
            result = _run_case(case, rep, s, places)
        except Exception as error:
            result = {"error": f"{type(error).__name__}: {error}"}
        result["retried_after_restart"] = True
    return result


def _run_case(case: Case, rep: int, s: Settings, places: Places) -> dict[str, Any]:
    log = _log(case, rep)
    began = time.perf_counter()
    if case.workload == "wire":
        result = asyncio.run(run_wire(case, places, log))
    elif case.workload == "claim":
        with places.database(case.store) as one, places.database(case.store) as two:
            argv = [case.python, str(BENCH / case.script), case.action, "--url", one]
            argv += ["--url2", two, "--samples", str(s.claim_samples), "--dead", str(s.dead)]
            result = run_script(argv, log, 900)
    else:
        with places.database(case.store) as url:
            if case.workload == "w2_4proc":
                result = asyncio.run(run_procs(case, url, s, log))
            elif case.workload == "idle":
                result = asyncio.run(run_idle(case, url, s, places, log))
            else:
                timeout = 900 if s.cap_s <= 0 else s.cap_s * 3 + 300
                result = run_script(_argv(case, url, s), log, timeout)
    result["wall_s"] = round(time.perf_counter() - began, 2)
    return result


# ------------------------------------------------------------------------------ summaries


def summarise(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per store/workload/subject: the median over repetitions of every numeric figure."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        grouped.setdefault(record["key"], []).append(record)
    out: dict[str, dict[str, Any]] = {}
    for key, runs in grouped.items():
        good = [r["result"] for r in runs if "error" not in r["result"]]
        errors = [r["result"]["error"] for r in runs if "error" in r["result"]]
        entry: dict[str, Any] = {"runs": len(runs), "ok": len(good)}
        if errors:
            entry["errors"] = errors
        if good:
            for name in sorted({k for g in good for k, v in g.items() if _number(v)}):
                values = [g[name] for g in good if _number(g.get(name))]
                entry[name] = statistics.median(values)
            for name in ("empty", "dead"):
                if all(isinstance(g.get(name), dict) for g in good):
                    entry[name] = {
                        k: statistics.median(g[name][k] for g in good)
                        for k in good[0][name]
                        if _number(good[0][name][k])
                    }
            for name in ("explain", "analyze_rows_read", "explain_index_only"):
                if name in good[0]:
                    entry[name] = good[0][name]  # (the first run's: a plan, not a figure)
            entry["capped"] = any(g.get("capped") for g in good)
            if "rate" in entry:
                entry["rates"] = [g["rate"] for g in good]
        out[key] = entry
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass
class Target:
    id: str
    label: str
    need: str  # ">=" or "<="
    bound: float
    value: float | None
    formula: str
    unit: str = "×"

    @property
    def ok(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.bound if self.need == ">=" else self.value <= self.bound

    @property
    def score(self) -> float | None:
        """>= 1 passes: value/bound for a floor, bound/value for a ceiling."""
        if self.value is None or self.value == 0:
            return None
        return self.value / self.bound if self.need == ">=" else self.bound / self.value


def targets(summary: dict[str, dict[str, Any]]) -> list[Target]:
    def get(key: str, name: str) -> float | None:
        value = summary.get(key, {}).get(name)
        return float(value) if _number(value) else None

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    lite_one = get("sqlite/w1_one/nilo", "rate")
    maria_one = ratio(get("mariadb/w1_one/nilo", "rate"), get("mariadb/w1_one/raw", "rate"))
    maria_paired = get("mariadb/w1_one/nilo_paired", "ratio")
    maria_w2 = get("mariadb/w2_1x4/nilo", "rate")
    w3_nilo = get("pg/w3_xproc/nilo", "p50_ms")
    lite_done = get("sqlite/w3_xproc/nilo", "done_p50_ms")
    out = [
        Target(
            "w1_one", "W1 one by one, one producer, PG", ">=", 0.9,
            get("pg/w1_one/nilo_paired", "ratio"),
            "nilo ÷ raw INSERT (autocommit) on 1 connection, alternated push by push in one "
            "process (in separate runs: "
            f"{_fmt(ratio(get('pg/w1_one/nilo', 'rate'), get('pg/w1_one/raw', 'rate')), 2)} ×)",
        ),
        Target(
            "w1_one_sync", "W1 one by one, one producer, PG, against sync psycopg", ">=", 0.8,
            get("pg/w1_one/nilo_paired", "ratio_sync"),
            "nilo ÷ raw INSERT with psycopg's sync connection (autocommit, one connection), "
            "alternated push by push in one process",
        ),
        Target(
            "w1_one_sqlite", "W1 one by one, SQLite", ">=", 1.0,
            get("sqlite/w1_one/nilo_paired", "ratio"),
            "nilo ÷ huey, both WAL and synchronous=FULL, alternated push by push in one process "
            f"(in separate runs: {_fmt(ratio(lite_one, get('sqlite/w1_one/huey', 'rate')), 2)} ×; "
            "nilo ÷ a raw INSERT with FULL: "
            f"{_fmt(ratio(lite_one, get('sqlite/w1_one/raw', 'rate')), 2)} ×)",
        ),
        Target(
            "w1_pool16", "W1 16 concurrent producers on a pool, PG", ">=", 0.8,
            ratio(get("pg/w1_pool16/nilo", "rate"), get("pg/w1_pool16/raw", "rate")),
            "nilo (pool of 4) ÷ raw INSERT (autocommit) on 4 connections",
        ),
        Target(
            "w1_bulk", "W1 bulk, PG", ">=", 1.0,
            ratio(get("pg/w1_bulk/nilo", "rate"), get("pg/w1_bulk/pgqueuer", "rate")),
            "nilo push_many ÷ pgqueuer enqueue(lists), batches of 1,000",
        ),
        Target(
            "w2_pg", "W2, 1 process × 4, PG", ">=", 3.0,
            ratio(get("pg/w2_1x4/nilo", "rate"), get("pg/w2_1x4/pgqueuer", "rate")),
            "nilo ÷ pgqueuer with its defaults",
        ),
        Target(
            "w2_sqlite", "W2, SQLite", ">=", 3.0,
            ratio(get("sqlite/w2_1x4/nilo", "rate"), get("sqlite/w2_1x4/huey", "rate")),
            "nilo ÷ huey (4 worker threads)",
        ),
        Target(
            "w2_pg_raw", "W2 (durably done), 1 process × 4, PG, against raw SQL", ">=", 0.4,
            ratio(get("pg/w2_1x4/nilo", "rate"), get("pg/w2_1x4/raw_claim100", "rate")),
            "nilo ÷ raw claim 100 a statement on 4 connections",
        ),
        Target(
            "w2_sqlite_raw", "W2 (durably done), SQLite, against raw SQL", ">=", 0.1,
            ratio(get("sqlite/w2_1x4/nilo", "rate"), get("sqlite/w2_1x4/raw_claim100", "rate")),
            "nilo ÷ raw claim 100 a statement on one connection",
        ),
        Target(
            "w3_done_pg", "push → done, lone job across processes, PG, p50", "<=", 2.0,
            ratio(get("pg/w3_xproc/nilo", "done_p50_ms"), w3_nilo),
            "push → end durable ÷ push → run starts (p50 "
            f"{_fmt(get('pg/w3_xproc/nilo', 'done_p50_ms'), 2)} ms)",
        ),
        Target(
            "w3_done_sqlite", "push → done, lone job across processes, SQLite, p50", "<=", 2.0,
            ratio(lite_done, get("sqlite/w3_xproc/nilo", "p50_ms")),
            "push → end durable ÷ push → run starts (p50 "
            f"{_fmt(lite_done, 2)} ms)",
        ),
        Target(
            "w3_xproc", "W3 across processes, PG, p50", "<=", 0.6,
            get("pg/w3_xproc/nilo_paired", "ratio"),
            "nilo p50 ÷ pgqueuer p50, alternated sample by sample (in separate runs: "
            f"{_fmt(ratio(w3_nilo, get('pg/w3_xproc/pgqueuer', 'p50_ms')), 2)} ×)",
        ),
        Target(
            "w3_xproc_sqlite", "W3 across processes, SQLite, p50", "<=", 5.0,
            get("sqlite/w3_xproc/nilo", "p50_ms"),
            "nilo p50 (huey's: "
            f"{_fmt(get('sqlite/w3_xproc/huey', 'p50_ms'), 1)} ms)", "ms",
        ),
        Target(
            "w3_xproc_sqlite_p99", "W3 across processes, SQLite, p99", "<=", 20.0,
            get("sqlite/w3_xproc/nilo", "p99_ms"), "nilo p99", "ms",
        ),
        Target(
            "w3_inproc_pg", "W3 in one process, p50, PG", "<=", 0.5,
            get("pg/w3_inproc/nilo", "p50_ms"), "nilo p50", "ms",
        ),
        Target(
            "w3_inproc_sqlite", "W3 in one process, p50, SQLite", "<=", 0.5,
            get("sqlite/w3_inproc/nilo", "p50_ms"), "nilo p50", "ms",
        ),
        Target(
            "claim_pg", "claim on 1,000,000 finished rows, PG", "<=", 1.2,
            get("pg/claim/nilo", "ratio"), "median claim with 1M dead rows ÷ on an empty table",
        ),
        Target(
            "claim_sqlite", "claim on 1,000,000 finished rows, SQLite", "<=", 1.2,
            get("sqlite/claim/nilo", "ratio"), "median claim with 1M dead rows ÷ on an empty table",
        ),
        Target(
            "w1_one_mariadb", "W1 one by one, one producer, MariaDB", ">=", 0.8,
            maria_paired if maria_paired is not None else maria_one,
            "nilo ÷ raw INSERT (autocommit) through asyncmy on 1 connection, "
            + ("alternated push by push in one process (in separate runs: "
               f"{_fmt(maria_one, 2)} ×)" if maria_paired is not None
               else "in separate runs (`nilo_paired`, alternated, did not run)"),
        ),
        Target(
            "w2_mariadb", "W2, 1 process × 4, MariaDB, against PG", ">=", 0.5,
            ratio(maria_w2, get("pg/w2_1x4/nilo", "rate")),
            "nilo on MariaDB ÷ nilo on PostgreSQL, this run (nilo ÷ raw claim 100 on MariaDB: "
            f"{_fmt(ratio(maria_w2, get('mariadb/w2_1x4/raw_claim100', 'rate')), 2)} ×)",
        ),
        Target(
            "claim_mariadb", "claim on 1,000,000 finished rows, MariaDB", "<=", 1.2,
            get("mariadb/claim/nilo", "ratio"),
            "median claim with 1M dead rows ÷ on an empty table",
        ),
        Target(
            "idle_pg", "idle, PG", "<=", 1.0,
            get("pg/idle/nilo", "claims_per_worker_per_poll"),
            "claims per worker per poll_ms (4 workers, poll_ms=1000)", "claims",
        ),
        Target(
            "idle_sqlite", "idle, SQLite", "<=", 1.0,
            get("sqlite/idle/nilo", "claims_per_worker_per_poll"),
            "claims per worker per poll_ms (4 workers, poll_ms=1000)", "claims",
        ),
    ]  # fmt: skip
    if not any(key.startswith("mariadb/") for key in summary):
        out = [t for t in out if not t.id.endswith("_mariadb")]  # (an optional store)
    return out


# ------------------------------------------------------------------------------- the report


def _fmt(value: Any, digits: int = 0) -> str:
    if not _number(value):
        return "—"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def _our_loop() -> str:
    """The event loop nilo-job's and raw SQL's scripts run on (`common.event_loop("auto")`)."""
    sys.path.insert(0, str(BENCH))
    import common

    return common.event_loop("auto")[1]


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        info["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
    with contextlib.suppress(Exception):
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "nilo_job"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        info["nilo_job_commit"] = head + (" (nilo_job/ has uncommitted changes)" if dirty else "")
    return info


def write_report(data: dict[str, Any], path: Path, chart: Path | None) -> None:
    meta, summary = data["meta"], data["summary"]
    lines = [
        "# nilo-job benchmark results",
        "",
        "Generated by `bench/run.py`; do not edit by hand. How to run it and what each workload",
        "measures: `docs/bench.md`. Raw numbers for every repetition: `bench/results.json`.",
        "",
        f"- date: {meta['date']}",
        f"- command: `{meta['command']}`",
        f"- machine: {meta['machine'].get('nproc')} cores ({meta['machine'].get('cpu', '?')}), "
        f"load average at start {' '.join(meta['machine'].get('loadavg_start', []))}",
        f"- PostgreSQL: {meta.get('postgres', '?')}; fsync={meta.get('pg_fsync', '?')}, "
        f"synchronous_commit={meta.get('pg_synchronous_commit', '?')}",
        f"- SQLite {meta['machine']['sqlite']} (nilo-job and huey: WAL, synchronous=FULL)",
        *(
            [
                f"- MariaDB {meta['mariadb'].get('version', '?')}; innodb_flush_log_at_trx_commit="
                f"{meta['mariadb'].get('innodb_flush_log_at_trx_commit', '?')}, log_bin="
                f"{meta['mariadb'].get('log_bin', '?')} (nilo-job and raw SQL on asyncmy "
                f"{meta['mariadb'].get('asyncmy', '?')})"
            ]
            if meta.get("mariadb")
            else []
        ),
        f"- Python {meta['machine']['python']} (nilo-job, raw SQL); peers' venv: Python "
        f"{meta.get('peers_python', '?')}",
        f"- event loop: nilo-job and raw SQL on {meta.get('loop', 'asyncio')} (uvloop when it is "
        "installed, as `nilo-job worker --loop auto` and uvicorn pick it; "
        "`NILO_BENCH_LOOP=asyncio` for asyncio's own); pgqueuer and oban on uvloop too, as "
        "their command lines run when it is installed (pgqueuer depends on it); procrastinate "
        "on asyncio's own",
        f"- nilo-job at {meta['machine'].get('nilo_job_commit', '?')}; the run used a copy of "
        f"`nilo_job/` taken at its start (sources hash {meta.get('nilo_job_snapshot', '?')})",
        "- peers: "
        + (
            ", ".join(f"{k} {v}" for k, v in sorted(meta["peers"].items()) if k != "matplotlib")
            or "none"
        ),
        f"- {meta['jobs']:,} jobs a run, median of {meta['repeat']} runs (a fresh database for "
        "every run); idle and the wire counts are measured once"
        + (
            f"; throughput loops stop after {meta['cap_s']:g} s, and the rate is then over the "
            "jobs done by then (marked ⏱)"
            if meta["cap_s"]
            else ""
        ),
        "",
    ]
    for peer, why in sorted(meta.get("missing", {}).items()):
        lines.append(f"- **{peer} did not run**: {why}")
    lines += [
        "",
        "## Targets",
        "",
        "| target | measured | bound | | how |",
        "|---|---|---|---|---|",
    ]
    for t in data["targets"]:
        mark = {True: "✓", False: "✗", None: "n/a"}[t["ok"]]
        shown = "—" if t["value"] is None else f"{t['value']:.2f} {t['unit']}"
        lines.append(
            f"| {t['label']} | {shown} | {t['need']} {t['bound']:g} {t['unit']} | {mark} | "
            f"{t['formula']} |"
        )
    if chart is not None:
        lines += ["", f"![ratios against targets]({chart.name})", ""]
    order = ("nilo", "raw", "raw_tx", "nilo_paired", "raw_claim1", "raw_claim100", *PEERS)
    labels = {
        "nilo_paired": "nilo, alternated push by push in one process with its baseline "
        "(PostgreSQL and MariaDB: raw SQL; SQLite: huey)",
        "raw": "raw SQL",
        "raw_tx": "raw SQL, BEGIN…COMMIT",
        "raw_claim1": "raw SQL, claim 1",
        "raw_claim100": "raw SQL, claim 100",
    }
    for store in ("pg", "sqlite", "mariadb"):
        store_name = {"pg": "PostgreSQL", "sqlite": "SQLite", "mariadb": "MariaDB"}[store]
        for workload in (w for g in GROUPS.values() for w in g):
            keys = [
                f"{store}/{workload}/{s}" for s in order if f"{store}/{workload}/{s}" in summary
            ]
            if not keys:
                continue
            lines += ["", f"### {store_name}: {TITLES[workload]}", ""]
            nilo = summary.get(f"{store}/{workload}/nilo", {})
            if workload == "claim":
                lines += ["| table | p50 ms | p95 ms | p99 ms |", "|---|---|---|---|"]
                for name, label in (
                    ("empty", "100 due rows"),
                    ("dead", "100 due + 1,000,000 dead"),
                ):
                    part = nilo.get(name, {})
                    p50, p95, p99 = (_fmt(part.get(f"p{n}_ms"), 3) for n in (50, 95, 99))
                    lines.append(f"| {label} | {p50} | {p95} | {p99} |")
                lines.append(f"\nratio of the medians (dead ÷ empty): {_fmt(nilo.get('ratio'), 2)}")
                if nilo.get("explain"):
                    verdict = (
                        "every arm an index range or ref, no full scan"
                        if nilo.get("explain_index_only")
                        else "**not** an index range or ref in every arm"
                    )
                    lines += [
                        "",
                        f"The claim's SELECT on the table with 1,000,000 dead rows: {verdict} "
                        "(`EXPLAIN`; the entries each arm read, from `ANALYZE FORMAT=JSON`: "
                        + ", ".join(
                            f"{arm.get('key')} {_fmt(arm.get('r_rows'))}"
                            for arm in nilo.get("analyze_rows_read", [])
                        )
                        + ").",
                        "",
                        "| " + " | ".join(nilo["explain"][0]) + " |",
                        "|" + "---|" * len(nilo["explain"][0]),
                    ]
                    for row in nilo["explain"]:
                        shown = ("NULL" if v is None else str(v) for v in row.values())
                        lines.append("| " + " | ".join(shown) + " |")
                lines += _errors(summary, keys)
                continue
            if workload == "wire":
                lines += [
                    "| subject | per push (W1 one by one) | per job run (W2, one process) |",
                    "|---|---|---|",
                    "| raw SQL (by construction) | 1 (autocommit) or 3 (BEGIN…COMMIT) | 6 claiming "
                    "1, 0.06 claiming 100 (claim, then delete, each in BEGIN…COMMIT) |",
                ]
                for key in keys:
                    e = summary[key]
                    lines.append(
                        f"| {_subject(key, labels)} | {_fmt(e.get('push_statements_per_job'), 2)} "
                        f"| {_fmt(e.get('run_statements_per_job'), 2)} |"
                    )
                lines += _errors(summary, keys)
                continue
            if workload == "idle":
                lines += [
                    "| subject | statements/s | claims/s | per worker per poll | "
                    "pg_stat xacts/s (approx.) |",
                    "|---|---|---|---|---|",
                ]
                for key in keys:
                    e = summary[key]
                    per = e.get("claims_per_worker_per_poll")
                    per_note = "claims" if per is not None else "statements"
                    per = per if per is not None else e.get("statements_per_worker_per_poll")
                    lines.append(
                        f"| {_subject(key, labels)} | {_fmt(e.get('statements_per_s'), 2)} | "
                        f"{_fmt(e.get('claims_per_s'), 2)} | {_fmt(per, 2)} ({per_note}) | "
                        f"{_fmt(e.get('xacts_per_s_pg_stat'), 2)} |"
                    )
                lines += _errors(summary, keys)
                continue
            if workload.startswith("w3"):
                lines += [
                    "| subject | p50 ms | p95 ms | p99 ms | p50 ÷ nilo's |",
                    "|---|---|---|---|---|",
                ]
                w3_labels = {**labels, "raw": "raw SQL: the push's INSERT + durable commit alone"}
                for key in keys:
                    e = summary[key]
                    if key.endswith("/nilo_paired"):
                        continue  # said below the table
                    lines.append(
                        f"| {_subject(key, w3_labels)} | {_fmt(e.get('p50_ms'), 2)} | "
                        f"{_fmt(e.get('p95_ms'), 2)} | {_fmt(e.get('p99_ms'), 2)} | "
                        f"{_fmt(_div(e.get('p50_ms'), nilo.get('p50_ms')), 2)} |"
                    )
                if _number(nilo.get("done_p50_ms")):
                    lines.append(
                        f"\nnilo, push → end durable (a lone job, its end written): p50 "
                        f"{_fmt(nilo.get('done_p50_ms'), 2)} ms, p95 "
                        f"{_fmt(nilo.get('done_p95_ms'), 2)} ms, p99 "
                        f"{_fmt(nilo.get('done_p99_ms'), 2)} ms."
                    )
                paired = summary.get(f"{store}/{workload}/nilo_paired", {})
                if _number(paired.get("ratio")):
                    lines.append(
                        f"\nAlternated sample by sample with pgqueuer, each worker in a process "
                        f"of its own (`w3_paired`, the target's figure): nilo p50 "
                        f"{_fmt(paired.get('p50_ms'), 2)} ms, p99 {_fmt(paired.get('p99_ms'), 2)}"
                        f" ms; pgqueuer p50 {_fmt(paired.get('pgqueuer_p50_ms'), 2)} ms, p99 "
                        f"{_fmt(paired.get('pgqueuer_p99_ms'), 2)} ms; nilo ÷ pgqueuer "
                        f"{_fmt(paired.get('ratio'), 2)} (median of the runs' ratios)."
                    )
                lines += _errors(summary, keys)
                continue
            lines += [
                "| subject | jobs/s (median) | each run | nilo ÷ this |",
                "|---|---|---|---|",
            ]
            for key in keys:
                e = summary[key]
                runs = ", ".join(_fmt(r) for r in e.get("rates", []))
                cap = " ⏱" if e.get("capped") else ""
                lines.append(
                    f"| {_subject(key, labels)} | {_fmt(e.get('rate'))}{cap} | {runs} | "
                    f"{_fmt(_div(nilo.get('rate'), e.get('rate')), 2)} |"
                )
            paired = summary.get(f"{store}/{workload}/nilo_paired", {})
            if _number(paired.get("ratio")) and store == "sqlite":
                lines.append(
                    f"\nAlternated push by push with huey in one process (`w1_paired`, the "
                    f"target's figure): nilo {_fmt(paired.get('rate'))} jobs/s, huey "
                    f"{_fmt(paired.get('huey_rate'))} jobs/s; nilo ÷ huey "
                    f"{_fmt(paired.get('ratio'), 2)} (median of the runs' ratios)."
                )
            elif _number(paired.get("ratio")) and store == "mariadb":
                lines.append(
                    f"\nAlternated push by push in one process (`w1_paired`, the target's "
                    f"figure): nilo {_fmt(paired.get('rate'))} jobs/s, raw SQL "
                    f"{_fmt(paired.get('raw_rate'))} jobs/s (asyncmy); nilo ÷ raw "
                    f"{_fmt(paired.get('ratio'), 2)} (median of the runs' ratios)."
                )
            elif _number(paired.get("ratio")):
                lines.append(
                    f"\nAlternated push by push in one process (`w1_paired`, the target's "
                    f"figure): nilo {_fmt(paired.get('rate'))} jobs/s, raw SQL "
                    f"{_fmt(paired.get('raw_rate'))} jobs/s (psycopg async), raw SQL "
                    f"{_fmt(paired.get('raw_sync_rate'))} jobs/s (psycopg sync); nilo ÷ raw "
                    f"async {_fmt(paired.get('ratio'), 2)}, nilo ÷ raw sync "
                    f"{_fmt(paired.get('ratio_sync'), 2)} (medians of the runs' ratios)."
                )
            lines += _errors(summary, keys)
    lines += ["", "## Notes", ""]
    lines += [f"- {note}" for note in data.get("notes", [])]
    path.write_text("\n".join(line for line in lines) + "\n")


def _subject(key: str, labels: dict[str, str]) -> str:
    subject = key.rsplit("/", 1)[1]
    return f"**{subject}**" if subject == "nilo" else labels.get(subject, subject)


def _div(a: Any, b: Any) -> float | None:
    return a / b if _number(a) and _number(b) and b else None


def _errors(summary: dict[str, dict[str, Any]], keys: list[str]) -> list[str]:
    out = []
    for key in keys:
        for error in summary[key].get("errors", []):
            out.append(f"\n- {key}: failed: `{error[:300]}`")
    return out


NOTES = [
    "Ratios compare figures from this one run: the machine is shared and noisy, so only "
    "same-run ratios mean anything; the absolute figures move from run to run.",
    "Every run of every subject gets a fresh database (PostgreSQL, MariaDB) or file (SQLite); the "
    "subjects' order is rotated between repetitions so that drift hits all of them alike.",
    "raw SQL: psycopg 3 async connections (the driver nilo-job uses), the same table shape as "
    "nilo_jobs, no NOTIFY. `raw` sends the lone INSERT in autocommit (one round trip; the server "
    "commits it); `raw, BEGIN…COMMIT` wraps it in an explicit transaction (three round trips).",
    "W2 stops the clock when the subject's table shows every job finished (its end durable), "
    "read every millisecond on a connection of the benchmark's own; `run rate` beside it stops "
    "at the last run, counted inside the no-op run itself. huey writes nothing at an end (it "
    "deleted the task when it took it): its two clocks are one. raw claim-100 counts a batch "
    "once its DELETE has committed. W2 on 4 processes: the clock starts when all 4 workers are "
    "connected and idle.",
    "pgqueuer claims 10 at a time and runs them all at once (its defaults); procrastinate "
    "and nilo-job run 4 at once; oban's queue limit is 4; huey runs 4 threads.",
    "W3 across processes: the producer reads time.time_ns() before the push, the worker as its "
    "run starts (one host, one clock). On SQLite the worker is woken by a datagram to a socket "
    "it keeps beside the database file; on PostgreSQL by NOTIFY.",
    "Idle, PostgreSQL: the worker connects through a counting proxy (statements = Query and "
    "Execute messages), exact; pg_stat_database's xact counts are flushed by backends about "
    "once a second and are shown for reference only. SQLite: statements counted by a "
    "sqlite3 trace callback. Claims (nilo-job) come from `jobs.observe`.",
    "Statements per job: the subject talks to PostgreSQL through a counting proxy (Query and "
    "Execute messages, BEGIN and COMMIT included); W2's rows are queued without the proxy, and "
    "a peer that buffers its completion writes (pgqueuer) may not have flushed the last batch "
    "when the clock stops. Deterministic where the timings are not: the first thing to look at.",
    "Claim cost: two databases at once, one with 100 due rows, the other with the same 100 due "
    "rows plus 1,000,000 dead rows (VACUUM ANALYZE / ANALYZE after loading); claims alternate "
    "between them, each claim's rows are released again before the next.",
    "MariaDB (`--stores mariadb`): nilo-job and raw SQL both on asyncmy, in autocommit, with the "
    "store's session (READ COMMITTED); the raw table has nilo_jobs' MariaDB columns and indexes "
    "(each leads with the state, as there are no partial indexes). Commits are as durable as "
    "the server's innodb_flush_log_at_trx_commit makes them, for claims and ends too (no "
    "session setting like PostgreSQL's synchronous_commit). W3 across processes: the worker is "
    "woken by a datagram to a socket in a folder of the run's own (`XDG_RUNTIME_DIR`). Claim "
    "cost: the dead rows come from the Sequence engine (`seq_1_to_N`), then ANALYZE TABLE; the "
    "claim's plan on the big table is recorded.",
]


def write_chart(data: dict[str, Any], env: PeerEnv, out: Path) -> Path | None:
    if not env.chart:
        return None
    data_file = out.with_suffix(".chart.json")
    data_file.write_text(json.dumps(data))
    done = subprocess.run(
        [str(PEERS_PY), str(BENCH / "chart.py"), str(data_file), str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    data_file.unlink()
    if done.returncode != 0:
        print("chart failed:", done.stderr[-1_000:], file=sys.stderr)
        return None
    return out


# ------------------------------------------------------------------------------------- main


def snapshot_nilo_job(into: Path) -> str:
    """Copy `nilo_job/` as it is now and put the copy first on PYTHONPATH for every subprocess,
    so that the whole run measures one version even while the package is being edited.
    Answers a short hash of the copied sources, for the report."""
    shutil.copytree(
        ROOT / "nilo_job", into / "nilo_job", ignore=shutil.ignore_patterns("__pycache__")
    )
    digest = hashlib.sha256()
    for path in sorted((into / "nilo_job").rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(into)).encode())
            digest.update(path.read_bytes())
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(into), os.environ.get("PYTHONPATH", "")])
    )
    return digest.hexdigest()[:12]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, 1 repetition")
    parser.add_argument("--only", default="", help="W1,W2,W3,idle,claim or workload ids")
    parser.add_argument("--stores", default="pg,sqlite")
    parser.add_argument("--subjects", default="", help="e.g. nilo,raw,pgqueuer (default: all)")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--repeat", type=int)
    parser.add_argument("--cap-s", type=float, help="stop a throughput loop after this long")
    parser.add_argument("--samples", type=int, help="W3 samples per run")
    parser.add_argument("--idle-s", type=float, default=10.0, help="the idle window, seconds")
    parser.add_argument(
        "--pg", default=os.environ.get("NILO_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
    )
    parser.add_argument(
        "--mariadb",
        default=os.environ.get("NILO_BENCH_MARIADB", "mariadb://root@127.0.0.1:3306"),
        help="the MariaDB server for --stores mariadb (a user that may create databases)",
    )
    parser.add_argument("--out", default=str(BENCH), help="where results.* and RESULTS.md go")
    args = parser.parse_args()

    jobs = args.jobs or (2_000 if args.quick else 10_000)
    repeat = args.repeat or (1 if args.quick else 3)
    settings = Settings(
        jobs=jobs,
        samples=args.samples or (60 if args.quick else 200),
        cap_s=args.cap_s if args.cap_s is not None else 8.0,
        idle_s=args.idle_s,
        claim_samples=100 if args.quick else 300,
        dead=1_000_000,
    )
    wanted_workloads: set[str] = set()
    for item in filter(None, (x.strip() for x in args.only.split(","))):
        wanted_workloads.update(GROUPS.get(item, GROUPS.get(item.upper(), (item,))))
    stores = set(args.stores.split(","))
    subjects = set(filter(None, args.subjects.split(",")))
    cases = [
        c
        for c in all_cases()
        if c.store in stores
        and (not wanted_workloads or c.workload in wanted_workloads)
        and (not subjects or c.subject in subjects)
    ]
    env = ensure_peers()  # the chart needs the peers' venv (matplotlib) even without peers
    skipped = [c for c in cases if c.subject in env.missing]
    cases = [c for c in cases if c.subject not in env.missing]

    places = Places(
        args.pg.rstrip("/"),
        Path(tempfile.mkdtemp(prefix="nilo-bench-")),
        mariadb_base=args.mariadb.rstrip("/"),
    )
    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join([".venv/bin/python", "bench/run.py", *sys.argv[1:]]),
        "machine": machine(),
        "jobs": jobs,
        "repeat": repeat,
        "cap_s": settings.cap_s,
        "settings": settings.__dict__,
        "peers": env.versions,
        "peers_python": _peers_python_version(env),
        "missing": env.missing,
        "loop": _our_loop(),
    }
    if "pg" in stores:
        try:
            with places.pg_admin() as conn:
                meta["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
                meta["pg_fsync"] = conn.execute("SHOW fsync").fetchone()[0]
                meta["pg_synchronous_commit"] = conn.execute("SHOW synchronous_commit").fetchone()[
                    0
                ]
        except Exception as error:
            print(f"PostgreSQL at {args.pg} cannot be reached ({error}): not measured", flush=True)
            cases = [c for c in cases if c.store != "pg"]
    if "mariadb" in stores:
        try:
            meta["mariadb"] = places.mariadb_show("innodb_flush_log_at_trx_commit", "log_bin")
            from importlib.metadata import version

            meta["mariadb"]["asyncmy"] = version("asyncmy")
        except Exception as error:
            print(f"MariaDB at {args.mariadb} cannot be used ({error}): not measured", flush=True)
            cases = [c for c in cases if c.store != "mariadb"]
        # The store's wake-up sockets go in the runtime folder: one of the run's own, so that
        # none is left behind (the subject scripts leave with os._exit).
        runtime = places.tmp / "run"
        runtime.mkdir(mode=0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    LOGS.mkdir(parents=True, exist_ok=True)
    for old in LOGS.glob("*.log"):
        old.unlink()
    meta["nilo_job_snapshot"] = snapshot_nilo_job(places.tmp / "snapshot")

    plan: list[tuple[int, Case]] = []
    for rep in range(repeat):
        by_workload: dict[tuple[str, str], list[Case]] = {}
        for case in cases:
            if rep > 0 and (case.workload in ONCE or (case.store, case.workload) in ONCE):
                continue
            by_workload.setdefault((case.store, case.workload), []).append(case)
        for group in by_workload.values():
            shift = rep % len(group)
            plan += [(rep, c) for c in group[shift:] + group[:shift]]
    print(f"{len(plan)} runs; logs in {LOGS}", flush=True)
    records: list[dict[str, Any]] = []
    began = time.perf_counter()
    try:
        for n, (rep, case) in enumerate(plan, 1):
            result = run_case(case, rep, settings, places)
            records.append({"key": case.key, "rep": rep, "result": result})
            shown = (
                f"error: {result['error'][:200]}"
                if "error" in result
                else ", ".join(
                    f"{k}={v:,.3f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in result.items()
                    if k in SHOWN
                )
            )
            print(
                f"[{n}/{len(plan)} {time.perf_counter() - began:6.0f}s] rep {rep + 1} "
                f"{case.key}: {shown} ({result.get('wall_s', 0):.1f} s)",
                flush=True,
            )
    except KeyboardInterrupt:
        print("interrupted: writing what was measured", flush=True)
    finally:
        shutil.rmtree(places.tmp, ignore_errors=True)
    meta["seconds"] = round(time.perf_counter() - began)
    with contextlib.suppress(OSError):
        meta["machine"]["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    summary = summarise(records)
    found = targets(summary)
    notes = list(NOTES)
    for case in skipped:
        notes.append(f"{case.key} skipped: {env.missing[case.subject]}")
    data = {
        "meta": meta,
        "summary": summary,
        "targets": [{**t.__dict__, "ok": t.ok, "score": t.score} for t in found],
        "records": records,
        "notes": notes,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    chart = write_chart(data, env, out / "results.png")
    write_report(data, out / "RESULTS.md", chart)
    print(f"wrote {out / 'RESULTS.md'} in {meta['seconds']} s", flush=True)
    for t in found:
        mark = {True: "ok  ", False: "MISS", None: "n/a "}[t.ok]
        shown = "—" if t.value is None else f"{t.value:.3f}"
        print(f"  {mark} {t.label}: {shown} (need {t.need} {t.bound:g} {t.unit})")
    return 0


SHOWN = (
    "rate", "p50_ms", "p99_ms", "ratio", "statements_per_s", "claims_per_s", "capped",
    "push_statements_per_job", "run_statements_per_job",
)  # fmt: skip
"""The figures of a result that the progress line shows."""


def _peers_python_version(env: PeerEnv) -> str | None:
    if env.python is None or not Path(env.python).exists():
        return None
    version = _python_version(env.python)
    return None if version is None else f"{version[0]}.{version[1]}"


if __name__ == "__main__":
    sys.exit(main())
