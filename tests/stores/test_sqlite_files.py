"""The files of a SQLite queue and who may open them: the database, its WAL and shared memory
made for their user alone (0600) and the wake-up folder too (0700), whatever the umask; a folder
made beforehand for a group is used as it is."""

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

import nilo_job as job


@dataclass
class Note:
    nilo_job = "note"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


async def _sockets_in(folder: Path) -> list[str]:
    """The sockets in `folder`, once serve has bound its own (a poll, bounded)."""
    for _ in range(200):
        found = sorted(p.name for p in folder.glob("*.sock")) if folder.is_dir() else []
        if found:
            return found
        await asyncio.sleep(0.01)
    return []


async def test_the_database_its_wal_its_shared_memory_and_the_wake_folder_are_private(
    tmp_path: Path,
) -> None:
    old = os.umask(0o002)  # a umask that would leave them writable by the group
    try:
        table = job.Table(f"sqlite:///{tmp_path}/app.db")
        await table.create_missing()
        jobs = job.Jobs(kinds=[Note], store=table)
        async with jobs.serving():
            await jobs.push(Note())
            assert await _sockets_in(tmp_path / "app.db.wake")
            modes = {p.name: p.stat().st_mode & 0o7777 for p in tmp_path.iterdir()}
        await table.close()
    finally:
        os.umask(old)
    assert modes == {
        "app.db": 0o600,
        "app.db-wal": 0o600,
        "app.db-shm": 0o600,
        "app.db.wake": 0o700,
    }


async def test_a_wake_folder_made_for_a_group_is_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/app.db")
    await table.create_missing()
    folder = tmp_path / "app.db.wake"
    folder.mkdir()
    folder.chmod(0o2770)  # as the docs say: mkdir -m 2770 app.db.wake
    jobs = job.Jobs(kinds=[Note], store=table)
    with caplog.at_level(logging.INFO, logger="nilo_job"):
        async with jobs.serving():
            sockets = await _sockets_in(folder)
    await table.close()
    assert len(sockets) == 1
    assert sockets[0].startswith(f"{os.getpid()}-")
    assert not [r for r in caplog.records if "wake-ups" in r.getMessage()]
    assert folder.stat().st_mode & 0o7777 == 0o2770  # left as it was made
