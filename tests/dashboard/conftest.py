"""Fixtures of the dashboard's tests."""

import pytest

import nilo_job as job
from tests.helpers.dashboard import Mail


@pytest.fixture
async def dead_one() -> tuple[job.Jobs, int]:
    """A queue on Memory with one dead row."""
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    row = await jobs.push(Mail(to="bad@example.com"))
    assert await jobs.drain() == 1
    return jobs, row
