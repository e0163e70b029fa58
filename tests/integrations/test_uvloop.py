"""`nilo-job worker` runs on uvloop when it is installed (`pip install 'nilo-job[fast]'`), says
which loop runs, and runs asyncio's own with `--loop asyncio` or `NILO_JOB_LOOP=asyncio`.

Real worker processes run `tests.integrations.test_uvloop:jobs`, this module's queue on a SQLite
file they share with the test; its one kind writes down the class of the loop it runs on. Without
uvloop the tests that need it skip with the reason, except in CI (CI=true), where that is a
failure.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import nilo_job as job
from tests.helpers import ROOT

TARGET = "tests.integrations.test_uvloop:jobs"
DB = os.environ.get("NILO_TEST_UVLOOP_DB", ":memory:")
OUT = Path(os.environ.get("NILO_TEST_OUT", "."))


@dataclass
class Which:
    """Writes down the module and name of the running loop's class."""

    nilo_job = "which"
    retry = job.Retry.NONE

    async def run(self) -> None:
        loop = type(asyncio.get_running_loop())
        (OUT / "loop").write_text(f"{loop.__module__}.{loop.__qualname__}")


jobs = job.Jobs(kinds=[Which], store=job.Table(f"sqlite:///{DB}"), poll_ms=50)


def _needs_uvloop() -> None:
    if importlib.util.find_spec("uvloop") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs uvloop: pip install 'nilo-job[fast]'")
        pytest.skip("uvloop is not installed (pip install 'nilo-job[fast]')")


def _start(args: tuple[str, ...], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "nilo_job", "worker", TARGET, *args],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _without_uvloop(tmp_path: Path) -> dict[str, str]:
    """An environment where `import uvloop` fails, as where it was never installed."""
    hidden = tmp_path / "hidden"
    (hidden / "uvloop").mkdir(parents=True)
    (hidden / "uvloop" / "__init__.py").write_text("raise ImportError('no uvloop here')\n")
    return {"PYTHONPATH": os.pathsep.join([str(hidden), os.environ.get("PYTHONPATH", "")])}


async def _loop_of_a_worker(tmp_path: Path, *args: str, **env: str) -> tuple[str, str]:
    """Start a worker with `args` and `env`, run one row there; the loop's class and the log."""
    db = tmp_path / "q.db"
    table = job.Table(f"sqlite:///{db}")
    await table.create_missing()
    queue = job.Jobs(kinds=[Which], store=table)
    await queue.push(Which())
    await table.close()
    proc = _start(args, {"NILO_TEST_UVLOOP_DB": str(db), "NILO_TEST_OUT": str(tmp_path), **env})
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "loop").exists() or not (tmp_path / "loop").read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    output = out.decode()
    assert proc.returncode == 0, output
    assert (tmp_path / "loop").exists(), output
    return (tmp_path / "loop").read_text(), output


async def test_the_worker_runs_on_uvloop_when_it_is_installed(tmp_path: Path) -> None:
    _needs_uvloop()
    uvloop = importlib.import_module("uvloop")
    loop, output = await _loop_of_a_worker(tmp_path, NILO_JOB_LOOP="")
    assert loop == "uvloop.Loop"
    assert f"event loop: uvloop {uvloop.__version__}" in output, output


@pytest.mark.parametrize(
    ("args", "env"), [(("--loop", "asyncio"), {}), ((), {"NILO_JOB_LOOP": "asyncio"})]
)
async def test_the_worker_runs_on_asyncio_own_loop_when_told(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str]
) -> None:
    loop, output = await _loop_of_a_worker(tmp_path, *args, **env)
    assert loop == "asyncio.unix_events._UnixSelectorEventLoop"
    assert "event loop: asyncio's own (--loop asyncio)" in output, output
    assert "Traceback" not in output, output


async def test_without_uvloop_the_worker_says_so_and_runs_asyncio_own(tmp_path: Path) -> None:
    env = _without_uvloop(tmp_path)
    loop, output = await _loop_of_a_worker(tmp_path, NILO_JOB_LOOP="", **env)
    assert loop == "asyncio.unix_events._UnixSelectorEventLoop"
    assert (
        "event loop: asyncio's own (uvloop is not installed: pip install 'nilo-job[fast]')"
    ) in output, output


def test_loop_uvloop_without_uvloop_is_refused_with_a_sentence(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "nilo_job", "worker", TARGET, "--loop", "uvloop"],
        cwd=ROOT,
        env={**os.environ, **_without_uvloop(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "Error: --loop uvloop: uvloop is not installed: pip install 'nilo-job[fast]'"
    )
