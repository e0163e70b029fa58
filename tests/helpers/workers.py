"""Real `nilo-job worker tests.helpers.procs_kinds:jobs` processes for the tests that need them:
start one, stop it, and the same queue opened in the test's own process.

The database and the output folder come from the environment (`procs_kinds` reads it), which
the test sets before it starts a worker.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from types import ModuleType

import nilo_job as job
from tests.helpers import ROOT

PROCS_KINDS = "tests.helpers.procs_kinds"


def start(env: dict[str, str], *args: str, poll_ms: int | None = None) -> subprocess.Popen[bytes]:
    """A worker process serving `tests.helpers.procs_kinds:jobs` with `env`, and `poll_ms` if
    given. It runs in the repository's folder, so it imports `tests.helpers` as pytest does."""
    extra = {} if poll_ms is None else {"NILO_TEST_POLL_MS": str(poll_ms)}
    return subprocess.Popen(
        [sys.executable, "-m", "nilo_job", "worker", f"{PROCS_KINDS}:jobs", *args],
        cwd=ROOT,
        env={**os.environ, **env, **extra},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def stop(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """SIGTERM (unless it has ended), then its exit code and everything it printed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out.decode()


def fresh_procs_kinds() -> ModuleType:
    """`tests.helpers.procs_kinds` imported afresh, for the environment the test set (it reads the
    database and the output folder at import). `from tests.helpers import procs_kinds` in the test
    then finds this one."""
    forget_procs_kinds()
    return importlib.import_module(PROCS_KINDS)


def forget_procs_kinds() -> None:
    """Drop `tests.helpers.procs_kinds` (the module and the package's name for it), so the next
    test imports it for its own environment."""
    sys.modules.pop(PROCS_KINDS, None)
    package = sys.modules.get("tests.helpers")
    if package is not None and hasattr(package, "procs_kinds"):
        delattr(package, "procs_kinds")


async def procs_queue() -> AsyncIterator[job.Jobs]:
    """`procs_kinds.jobs`, imported afresh for the environment the test set, its table made."""
    procs_kinds = fresh_procs_kinds()
    await procs_kinds.jobs.store.create_missing()
    yield procs_kinds.jobs
    await procs_kinds.jobs.store.close()
    forget_procs_kinds()
