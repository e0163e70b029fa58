"""Fixtures shared by the unit and contract tests.

`store` runs a test once on each store that ships: `job.Memory` and the SQLite `job.Table`. Every
behaviour of the queue is a promise of the contract, so each test that takes `store` is a contract
test of both. `t` is a fixed moment a second after the test started, in microseconds since the
epoch: rows pushed without `at=` are due by then, and `drain_at(t + …)` moves the clock exactly.
"""

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.store.contract import Store

HERE = Path(__file__).resolve().parent

# The helper modules beside the tests (kinds_ok, kinds_broken) import by their plain names, whatever
# pytest's import mode.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh, empty store of each kind that ships."""
    if request.param == "memory":
        yield job.Memory(bytes=1 << 20)
        return
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    await table.create_missing()
    try:
        yield table
    finally:
        await table.close()


@pytest.fixture
async def table(tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh SQLite store, for what only a database can do (push_in, check)."""
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    await table.create_missing()
    try:
        yield table
    finally:
        await table.close()


@pytest.fixture
def t() -> int:
    """A fixed clock reading, a second after now, in microseconds since the epoch."""
    return job.now_us() + 1_000_000
