"""A queue under `heartbeat_ms` for real worker processes
(`nilo-job worker tests.helpers.heartbeat_kinds:jobs`): one kind whose timeout is an hour, so a
row retaken within seconds was retaken by heartbeat, not by its timeout.

The store's URL and the output folder come from the environment (`NILO_TEST_STORE`,
`NILO_TEST_OUT`), which the test shares with its worker processes; a run hangs in a process
started with `NILO_TEST_HANG=1`.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

import nilo_job as job

STORE = os.environ.get("NILO_TEST_STORE", "sqlite:///:memory:")
OUT = Path(os.environ.get("NILO_TEST_OUT", "."))
HEARTBEAT_MS = 200


@dataclass
class Long:
    """Says it started, hangs where `NILO_TEST_HANG=1`, else says it finished."""

    nilo_job = "long"
    retry = job.Retry(times=3)
    timeout_ms = 3_600_000  # an hour: the lease without heartbeat_ms

    n: int

    async def run(self, tick: job.Tick) -> None:
        (OUT / f"started-{tick.id}-{tick.attempts}").write_text(str(os.getpid()))
        if os.environ.get("NILO_TEST_HANG") == "1":
            await asyncio.sleep(3_600)
        (OUT / f"finished-{tick.id}-{tick.attempts}").write_text(str(os.getpid()))


jobs = job.Jobs(kinds=[Long], store=job.Table(STORE), heartbeat_ms=HEARTBEAT_MS, poll_ms=50)
