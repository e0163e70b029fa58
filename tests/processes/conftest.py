"""Fixtures of the tests that start real `nilo-job worker` processes.

Each test module gives `env`: the environment its worker processes share with it (the database,
the output folder, the poll), already set in this process too.
"""

from collections.abc import AsyncIterator

import pytest

import nilo_job as job
from tests.helpers.workers import procs_queue


@pytest.fixture
async def queue(env: dict[str, str]) -> AsyncIterator[job.Jobs]:
    """The queue the worker processes serve (`tests.helpers.procs_kinds.jobs`), opened in this
    process for `env`, its table made."""
    async for jobs in procs_queue():
        yield jobs
