"""Kinds run by real worker processes (`nilo-job worker tests.helpers.procs_kinds:jobs`).

The database file and the output folder come from the environment, so the test and its worker
processes share them.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import nilo_job as job

DB = os.environ.get("NILO_TEST_DB", ":memory:")
STORE = os.environ.get("NILO_TEST_STORE") or f"sqlite:///{DB}"
OUT = Path(os.environ.get("NILO_TEST_OUT", "."))
TIMEOUT_MS = int(os.environ.get("NILO_TEST_TIMEOUT_MS", "60000"))
POLL_MS = int(os.environ.get("NILO_TEST_POLL_MS", "50"))
ANSWER_MS = os.environ.get("NILO_TEST_ANSWER_MS")  # PostgreSQL's bound on a call, when given


@dataclass
class Record:
    """Appends its number and attempt to a file of this process's own."""

    nilo_job = "record"
    retry = job.Retry(times=2)

    n: int

    async def run(self, tick: job.Tick) -> None:
        with (OUT / f"runs-{os.getpid()}.log").open("a") as out:
            out.write(f"{self.n} {tick.id} {tick.attempts}\n")


@dataclass
class Work:
    """Takes a few milliseconds, then records its number, attempt and process."""

    nilo_job = "work"
    retry = job.Retry(times=5, backoff=job.Fixed(ms=10))

    n: int

    async def run(self, tick: job.Tick) -> None:
        await asyncio.sleep(0.004)
        with (OUT / f"work-{os.getpid()}.log").open("a") as out:
            out.write(f"{self.n} {tick.attempts}\n")


@dataclass
class Stamp:
    """Records the moment it started, to measure push-to-start across processes."""

    nilo_job = "stamp"
    retry = job.Retry.NONE

    n: int

    async def run(self) -> None:
        (OUT / f"stamp-{self.n}").write_text(str(job.now_us()))


@dataclass
class Hang:
    """Says it started, then hangs in a worker process (NILO_TEST_HANG=1); returns elsewhere."""

    nilo_job = "hang"
    retry = job.Retry(times=3)

    n: int

    async def run(self, tick: job.Tick) -> None:
        (OUT / f"started-{tick.id}-{tick.attempts}").write_text(str(os.getpid()))
        if os.environ.get("NILO_TEST_HANG") == "1":
            await asyncio.sleep(3_600)
        (OUT / f"finished-{tick.id}-{tick.attempts}").write_text(str(os.getpid()))


@dataclass
class HangInThread:
    """Hang's sync twin: its run holds a thread of the worker process (NILO_TEST_HANG=1)."""

    nilo_job = "hang-in-thread"
    retry = job.Retry(times=3)

    n: int

    def run(self, tick: job.Tick) -> None:
        (OUT / f"started-{tick.id}-{tick.attempts}").write_text(str(os.getpid()))
        if os.environ.get("NILO_TEST_HANG") == "1":
            time.sleep(3_600)  # a daemon thread: the process exits without it
        (OUT / f"finished-{tick.id}-{tick.attempts}").write_text(str(os.getpid()))


@dataclass
class Brief:
    """Takes a little while in a worker process, so a SIGTERM lands while it runs."""

    nilo_job = "brief"
    retry = job.Retry.NONE

    n: int

    async def run(self, tick: job.Tick) -> None:
        (OUT / f"started-{tick.id}-{tick.attempts}").write_text(str(os.getpid()))
        await asyncio.sleep(0.5)
        (OUT / f"finished-{tick.id}-{tick.attempts}").write_text(str(os.getpid()))


@dataclass
class Meet:
    """Says it started, then waits (up to 30 s) until `of` rows of its kind have started, in
    whichever processes: `of` such rows can only all finish if they run at the same time."""

    nilo_job = "meet"
    retry = job.Retry.NONE

    n: int
    of: int

    async def run(self) -> None:
        (OUT / f"meet-{self.n}-{os.getpid()}").write_text("")
        deadline = time.monotonic() + 30
        while len(list(OUT.glob("meet-*"))) < self.of:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(list(OUT.glob('meet-*')))} of {self.of} met")
            await asyncio.sleep(0.01)


@dataclass
class Gate:
    """Says it started, then waits (up to 30 s) until the file `open` appears: a long run whose
    end the test decides."""

    nilo_job = "gate"
    retry = job.Retry.NONE

    n: int

    async def run(self) -> None:
        (OUT / f"gate-{self.n}-{os.getpid()}").write_text("")
        deadline = time.monotonic() + 30
        while not (OUT / "open").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the gate was never opened")
            await asyncio.sleep(0.01)


def met(out: Path) -> dict[int, int]:
    """How many Meet rows started in each process (by pid)."""
    found: dict[int, int] = {}
    for path in out.glob("meet-*"):
        pid = int(path.name.split("-")[2])
        found[pid] = found.get(pid, 0) + 1
    return found


jobs = job.Jobs(
    kinds=[Record, Work, Stamp, Hang, HangInThread, Brief, Meet, Gate],
    store=job.Table(STORE, **({} if ANSWER_MS is None else {"answer_ms": int(ANSWER_MS)})),
    poll_ms=POLL_MS,
    timeout_ms=TIMEOUT_MS,
)
