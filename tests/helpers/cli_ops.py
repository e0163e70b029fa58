"""What the operator-command tests share: `nilo-job` run in this process through click's runner,
and the rows they start from, in the queue of `tests.helpers.cli_ops_queue`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner, Result

import nilo_job as job
from nilo_job.cli import main
from tests.helpers import cli_ops_queue
from tests.helpers.cli_ops_queue import Mail, Note, make

T = 1_700_000_000_000_000  # 2023-11-14 22:13:20 UTC, in microseconds
QUEUE_FILE = Path(cli_ops_queue.__file__)
RAISE_LINE = (
    QUEUE_FILE.read_text().splitlines().index('            raise Rejected(f"550 {self.to}")') + 1
)
"""The line of the queue's file that raises Rejected: its tracebacks name it."""


def nilo_job(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def fill(url: str) -> None:
    """Rows 1 and 2 dead (at T and T + 1 s), row 3 queued."""

    async def go() -> None:
        jobs = make(url)
        try:
            await jobs.store.create_missing()
            assert await jobs.push(Mail("a@example.com", fail=True), at=T) == 1
            assert await jobs.push(Mail("b@example.com", fail=True), at=T + 1_000_000) == 2
            assert await jobs.push(Mail("c@example.com"), at=T + 3_600_000_000) == 3
            assert await jobs.drain_at(T) == 1
            assert await jobs.drain_at(T + 1_000_000) == 1
            assert await jobs.stats() == (1, 0, 2)
        finally:
            await jobs.store.close()

    asyncio.run(go())


def rows_of(url: str) -> dict[int, job.Row]:
    """Rows 1 and 2 dead, 3 and 5 queued (5 holding the key welcome-d), 4 done with a result."""
    fill(url)

    async def go() -> dict[int, job.Row]:
        jobs = make(url)
        try:
            assert await jobs.push(Note("hi"), at=T + 2_000_000) == 4
            assert await jobs.drain_at(T + 2_000_000) == 1
            later = T + 7_200_000_000
            assert await jobs.push(Mail("d@example.com"), at=later, unique="welcome-d") == 5
            found = {}
            for row_id in range(1, 6):
                row = await jobs.row(row_id)
                assert row is not None
                found[row_id] = row
            return found
        finally:
            await jobs.store.close()

    return asyncio.run(go())
