"""The queue of the concurrency limit's process tests (`nilo-job worker
tests.helpers.limited_kinds:jobs`): one kind that allows two runs at once, whose runs write a line
as they start and as they end.

The store, the output folder and the poll come from the environment, so the test and its worker
processes share them.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import nilo_job as job

STORE = os.environ.get("NILO_TEST_STORE", "sqlite:///:memory:")
OUT = Path(os.environ.get("NILO_TEST_OUT", "."))
POLL_MS = int(os.environ.get("NILO_TEST_POLL_MS", "20"))

LOG = "paced.log"
"""The file in the output folder where every run of every process writes its lines."""


@dataclass
class Paced:
    """Two at once across every process: writes "start n pid t", runs 30 ms, writes "end n pid
    t" (`t`: `time.monotonic_ns()`, one clock for every process of the host)."""

    nilo_job = "paced"
    retry = job.Retry.NONE
    concurrency = 2

    n: int

    async def run(self) -> None:
        note("start", self.n)
        await asyncio.sleep(0.03)
        note("end", self.n)


def note(what: str, n: int) -> None:
    """Append one line to `LOG` in one write (O_APPEND: lines of processes never mix)."""
    line = f"{what} {n} {os.getpid()} {time.monotonic_ns()}\n".encode()
    fd = os.open(OUT / LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


jobs = job.Jobs(kinds=[Paced], store=job.Table(STORE), poll_ms=POLL_MS)
