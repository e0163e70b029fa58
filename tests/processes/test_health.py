"""`nilo-job worker --health-port` as a probe sees it, on SQLite and PostgreSQL: /livez, /readyz
(503 with its reason while the store is down, 200 again after), /metrics; `nilo-job ready`'s
exit status and sentence; and the one line a stopped worker ends with.

The SQLite store is made unusable for real by renaming its table under the worker (what
`jobs.ready()` reads is then missing); PostgreSQL is made silent by the tests' TCP proxy
(`tests.helpers.proxy`), paused and resumed. Every wait polls an endpoint until a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import nilo_job as job
from nilo_job.cli._health import Health
from tests.helpers import ROOT
from tests.helpers.proxy import Proxy
from tests.helpers.workers import PROCS_KINDS, start, stop

pytestmark = pytest.mark.procs

NOT_READY = b"not ready: the store cannot be reached or has no usable table\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def probe(port: int, path: str) -> httpx.Response | None:
    """GET `path` of the worker's probes; None when nothing answers yet."""
    try:
        async with httpx.AsyncClient(timeout=15) as client:
            return await client.get(f"http://127.0.0.1:{port}{path}")
    except httpx.TransportError:
        return None


async def until_answer(
    port: int, path: str, status: int, body: bytes | None = None, seconds: float = 30.0
) -> httpx.Response:
    """Poll `path` until it answers `status` (and `body`, if given), for at most `seconds`."""
    deadline = time.monotonic() + seconds
    last = None
    while True:
        last = await probe(port, path)
        if last is not None and last.status_code == status and body in (None, last.content):
            return last
        if time.monotonic() > deadline:
            said = None if last is None else (last.status_code, last.content)
            raise AssertionError(f"{path} never answered {status} in {seconds} s: {said}")
        await asyncio.sleep(0.05)


def nilo_lines(out: str) -> list[str]:
    """The worker's own log lines (psycopg's pool logs too, on its own thread)."""
    return [line for line in out.splitlines() if " nilo_job: " in line]


def ready(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`nilo-job ready` of the workers' queue, as an exec probe runs it."""
    return subprocess.run(
        [sys.executable, "-m", "nilo_job", "ready", f"{PROCS_KINDS}:jobs"],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _probes_of_a_running_worker(port: int) -> None:
    live = await until_answer(port, "/livez", 200)
    assert live.content == b"ok\n"
    assert live.headers["content-type"] == "text/plain; charset=utf-8"
    await until_answer(port, "/readyz", 200, b"ready\n")
    metrics = await until_answer(port, "/metrics", 200)
    assert metrics.headers["content-type"].startswith("text/plain; version=")
    assert "nilo_job_store_up 1.0" in metrics.text
    assert 'nilo_job_rows{kind="work",state="queued"} 0.0' in metrics.text
    unknown = await probe(port, "/nope")
    assert unknown is not None
    assert (unknown.status_code, unknown.content) == (
        404,
        b"not found: the paths are /livez, /readyz and /metrics\n",
    )


# ------------------------------------------------------------------------------------ SQLite


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {"NILO_TEST_DB": str(tmp_path / "q.db"), "NILO_TEST_OUT": str(tmp_path)}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


async def test_sqlite_probes_answer_and_readyz_follows_the_store(
    queue: job.Jobs, env: dict[str, str]
) -> None:
    port = free_port()
    proc = start(env, "--health-port", str(port))
    try:
        await _probes_of_a_running_worker(port)
        assert ready(env).returncode == 0

        # The table goes away under the worker: the store answers that it has no usable table.
        with contextlib.closing(sqlite3.connect(env["NILO_TEST_DB"], timeout=30)) as db:
            db.execute("ALTER TABLE nilo_jobs RENAME TO nilo_jobs_away")
        await until_answer(port, "/readyz", 503, NOT_READY)
        assert (await until_answer(port, "/livez", 200)).content == b"ok\n"  # the loop turns
        probed = ready(env)
        assert probed.returncode == 1
        assert probed.stdout == ""
        assert probed.stderr.startswith(
            f"Error: {PROCS_KINDS}:jobs is not ready: there is no nilo_jobs table in "
        ), probed.stderr
        assert probed.stderr.count("\n") == 1  # one sentence

        with contextlib.closing(sqlite3.connect(env["NILO_TEST_DB"], timeout=30)) as db:
            db.execute("ALTER TABLE nilo_jobs_away RENAME TO nilo_jobs")
        await until_answer(port, "/readyz", 200, b"ready\n")
        assert ready(env).returncode == 0
    finally:
        code, out = stop(proc)
    assert code == 0, out
    assert nilo_lines(out)[-1].endswith(" INFO nilo_job: stopped: no row was running"), out
    assert "Traceback" not in out, out


async def test_a_port_in_use_is_one_sentence(queue: job.Jobs, env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start(env, "--health-port", str(port), "--health-host", "127.0.0.1")
        proc.wait(timeout=60)
        code, out = stop(proc)
    assert code == 1, out
    last = out.rstrip().splitlines()[-1]
    # The sentence the docs quote (for 0.0.0.0:8081), word for word.
    for doc in ("cli.md", "kubernetes.md"):
        quoted = re.search(
            r"`(Error: --health-port 8081: [^`]*)`", (ROOT / "docs" / doc).read_text()
        )
        assert quoted is not None, doc
        said = quoted[1].replace("0.0.0.0", "127.0.0.1").replace("8081", str(port))
        assert last == said, (doc, last)
    assert "Traceback" not in out, out


# -------------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    running = Proxy().start()
    yield running
    running.close()


@pytest.fixture
def pg_queue(
    pg_url: str, proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    values = {
        "NILO_TEST_STORE": proxy.url(pg_url),
        "NILO_TEST_OUT": str(tmp_path),
        "NILO_TEST_ANSWER_MS": "1000",  # a silent server is said within a second
        "NILO_TEST_POLL_MS": "200",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


async def test_postgres_probes_answer_and_readyz_follows_the_store(
    pg_queue: dict[str, str], proxy: Proxy
) -> None:
    env = pg_queue
    port = free_port()
    proc = start(env, "--health-port", str(port))
    try:
        await _probes_of_a_running_worker(port)
        assert ready(env).returncode == 0

        proxy.pause()  # the server stops answering, TCP stays open
        try:
            # Not ready, in one of the two sentences: a call on an open connection is cut at
            # the store's bound; a new connection waits to connect past the probe's own bound.
            silent = b"not ready: the store did not answer within 2 s\n"
            answer = await until_answer(port, "/readyz", 503)
            assert answer.content in (NOT_READY, silent), answer.content
            assert (await until_answer(port, "/livez", 200)).content == b"ok\n"
            probed = ready(env)
            assert probed.returncode == 1
            assert probed.stderr.startswith(f"Error: {PROCS_KINDS}:jobs is not ready: "), (
                probed.stderr
            )
            assert probed.stderr.count("\n") == 1
        finally:
            proxy.resume()
        await until_answer(port, "/readyz", 200, b"ready\n")
        assert ready(env).returncode == 0
    finally:
        code, out = stop(proc)
    assert code == 0, out
    assert nilo_lines(out)[-1].endswith(" INFO nilo_job: stopped: no row was running"), out
    assert "Traceback" not in out, out


# ------------------------------------------------------------------ in this process, on Memory


@dataclasses.dataclass
class Idle:
    nilo_job = "idle"
    retry = job.Retry.NONE

    async def run(self) -> None:
        pass


async def _health(jobs: job.Jobs) -> tuple[Health, int]:
    health = Health(jobs, 1.0)
    health.measure()
    where = await health.start("127.0.0.1", 0)
    return health, int(where.rsplit(":", 1)[1])


async def test_readyz_says_serve_has_not_started_and_then_is_ready() -> None:
    jobs = job.Jobs(kinds=[Idle], store=job.Memory())
    health, port = await _health(jobs)
    try:
        answer = await probe(port, "/readyz")
        assert answer is not None
        assert (answer.status_code, answer.content) == (
            503,
            b"not ready: serve has not started yet\n",
        )
        async with jobs.serving(grace_ms=1_000):
            await until_answer(port, "/readyz", 200, b"ready\n")
        answer = await probe(port, "/readyz")
        assert answer is not None
        assert (answer.status_code, answer.content) == (503, b"not ready: serve has ended\n")
        async with httpx.AsyncClient() as client:
            head = await client.head(f"http://127.0.0.1:{port}/livez")
            post = await client.post(f"http://127.0.0.1:{port}/livez")
        assert (head.status_code, head.content) == (200, b"")
        assert (post.status_code, post.content) == (405, b"only GET and HEAD are answered\n")
    finally:
        await health.close()


async def test_metrics_is_a_404_with_its_reason_without_prometheus_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "nilo_job.metrics", None)  # an ImportError, as uninstalled
    health, port = await _health(job.Jobs(kinds=[Idle], store=job.Memory()))
    try:
        answer = await probe(port, "/metrics")
        assert answer is not None
        assert (answer.status_code, answer.content) == (
            404,
            b"prometheus-client is not installed: pip install 'nilo-job[metrics]'\n",
        )
    finally:
        await health.close()


async def test_metrics_of_a_queue_its_module_measures_already_is_a_404_saying_so() -> None:
    from nilo_job.metrics import Metrics

    jobs = job.Jobs(kinds=[Idle], store=job.Memory())
    Metrics(jobs)
    health, port = await _health(jobs)
    try:
        answer = await probe(port, "/metrics")
        assert answer is not None
        assert (answer.status_code, answer.content) == (
            404,
            b"/metrics is not served here: this job.Jobs is measured already: build one "
            b"Metrics per queue and share it\n",
        )
    finally:
        await health.close()
