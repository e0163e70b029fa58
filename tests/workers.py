"""Real `nilo-job worker procs_kinds:jobs` processes for the tests that need them: start one,
stop it, and the same queue opened in the test's own process.

The database and the output folder come from the environment (`procs_kinds` reads it), which
the test sets before it starts a worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import nilo_job as job

HERE = Path(__file__).resolve().parent


def start(env: dict[str, str], *args: str, poll_ms: int | None = None) -> subprocess.Popen[bytes]:
    """A worker process serving `procs_kinds:jobs` with `env`, and `poll_ms` if given."""
    extra = {} if poll_ms is None else {"NILO_TEST_POLL_MS": str(poll_ms)}
    return subprocess.Popen(
        [sys.executable, "-m", "nilo_job", "worker", "procs_kinds:jobs", *args],
        cwd=HERE,
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


async def procs_queue() -> AsyncIterator[job.Jobs]:
    """`procs_kinds.jobs`, imported afresh for the environment the test set, its table made."""
    sys.modules.pop("procs_kinds", None)
    import procs_kinds

    await procs_kinds.jobs.store.create_missing()
    yield procs_kinds.jobs
    await procs_kinds.jobs.store.close()
    sys.modules.pop("procs_kinds", None)
