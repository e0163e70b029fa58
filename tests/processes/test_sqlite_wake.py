"""Wake-ups between processes on one SQLite file, with real worker processes: a push from this
process starts in a worker process at once rather than at its poll; a worker that died and left
its socket, many workers, a socket whose buffer is full, and a lost signal (which costs at most
the poll, never a row). Every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.store._wake import Signals, folder_of
from tests.helpers import workers

LONG_POLL_MS = 600_000  # a row that starts within a tenth of it was woken, not polled

pytestmark = pytest.mark.procs


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        "NILO_TEST_DB": str(tmp_path / "q.db"),
        "NILO_TEST_STORE": f"sqlite:///{tmp_path / 'q.db'}",
        "NILO_TEST_OUT": str(tmp_path),
        "NILO_TEST_POLL_MS": str(LONG_POLL_MS),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def start(env: dict[str, str], poll_ms: int = LONG_POLL_MS) -> subprocess.Popen[bytes]:
    return workers.start(env, "--workers", "2", poll_ms=poll_ms)


def stop(proc: subprocess.Popen[bytes]) -> str:
    return workers.stop(proc)[1]


def sockets(env: dict[str, str]) -> list[str]:
    folder = folder_of(env["NILO_TEST_DB"])
    assert folder is not None
    return sorted(p.name for p in folder.glob("*.sock")) if folder.exists() else []


async def until(what: str, check: object, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what}")
        await asyncio.sleep(0.01)


async def started(tmp_path: Path, n: int, seconds: float) -> float:
    """How long after now the stamp `n` was written (s), waiting at most `seconds`."""
    began = time.monotonic()
    await until(f"stamp {n}", lambda: (tmp_path / f"stamp-{n}").exists(), seconds)
    return time.monotonic() - began


async def test_a_push_from_another_process_starts_at_once_not_at_the_next_poll(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    worker = start(env)
    try:
        await until("the worker's socket", lambda: len(sockets(env)) == 1)
        await asyncio.sleep(0.2)  # its first claim (at start) has found nothing
        took = []
        for n in range(10):
            await queue.push(procs_kinds.Stamp(n=n))
            took.append(await started(tmp_path, n, LONG_POLL_MS / 1_000 / 10))
        assert max(took) < 5.0, took  # woken: the poll is ten minutes
    finally:
        out = stop(worker)
    assert "Traceback" not in out, out
    assert sockets(env) == []  # a worker that stops takes its socket with it


async def test_a_worker_that_died_leaves_a_socket_the_next_push_removes(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    dead = start(env)
    await until("the first worker's socket", lambda: len(sockets(env)) == 1)
    (left,) = sockets(env)
    dead.send_signal(signal.SIGKILL)
    dead.communicate(timeout=30)
    assert sockets(env) == [left]  # SIGKILL: nothing removed it
    alive = start(env)
    try:
        await until("the second worker's socket", lambda: len(sockets(env)) == 2)
        await asyncio.sleep(0.2)
        await queue.push(procs_kinds.Stamp(n=1))
        assert await started(tmp_path, 1, 60) < 5.0  # the living worker is woken
        assert left not in sockets(env)  # the push found it refused, and removed it
        assert len(sockets(env)) == 1
    finally:
        out = stop(alive)
    assert "Traceback" not in out, out


async def test_every_worker_process_is_woken(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    procs = [start(env) for _ in range(3)]
    try:
        await until("three sockets", lambda: len(sockets(env)) == 3)
        await asyncio.sleep(0.3)
        # More rows at once than one process has workers: the others must take part, woken.
        await queue.push_many([procs_kinds.Record(n) for n in range(30)])
        await until(
            "every row done", lambda: len(list(tmp_path.glob("runs-*.log"))) >= 1, seconds=60
        )
        deadline = time.monotonic() + 60
        while (await queue.stats())[:2] != (0, 0):
            assert time.monotonic() < deadline, await queue.stats()
            await asyncio.sleep(0.02)
    finally:
        outputs = [stop(proc) for proc in procs]
    assert all("Traceback" not in out for out in outputs), outputs
    assert await queue.count(job.Where(kind="record", state="done")) == 30


def test_a_full_socket_never_blocks_or_fails_a_push(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    folder = folder_of(db)
    assert folder is not None
    folder.mkdir()
    # A process that serves this file but never reads its socket (frozen, say).
    deaf = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    deaf.bind(str(folder / "1-deaf.sock"))
    signals = Signals(folder)
    try:
        began = time.monotonic()
        for n in range(20_000):  # far more than any socket buffer holds
            signals.send(n)
        assert time.monotonic() - began < 10.0
        assert (folder / "1-deaf.sock").exists()  # full is not dead: it is kept
        got = deaf.recv(64)
        assert got == b"0"
    finally:
        signals.close()
        deaf.close()


async def test_a_lost_signal_costs_at_most_the_poll(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    from tests.helpers import procs_kinds

    worker = start(env, poll_ms=300)
    try:
        await until("the worker's socket", lambda: len(sockets(env)) == 1)
        folder = folder_of(env["NILO_TEST_DB"])
        assert folder is not None
        for name in sockets(env):
            (folder / name).unlink()  # every signal to it is now lost
        await queue.push(procs_kinds.Stamp(n=7))
        assert await started(tmp_path, 7, 30) < 5.0  # found at its poll all the same
    finally:
        out = stop(worker)
    assert "Traceback" not in out, out


async def test_a_memory_database_has_no_folder_and_push_still_works(tmp_path: Path) -> None:
    assert folder_of(":memory:") is None
    Signals(None).send(1)  # nothing to tell, nothing raised
    assert folder_of(str(tmp_path / "a.db")) == Path(f"{tmp_path}/a.db.wake")


async def test_push_in_then_wake_reaches_a_worker_in_another_process(
    env: dict[str, str], queue: job.Jobs, tmp_path: Path
) -> None:
    import sqlite3

    from tests.helpers import procs_kinds

    worker = start(env)
    try:
        await until("the worker's socket", lambda: len(sockets(env)) == 1)
        await asyncio.sleep(0.2)
        conn = sqlite3.connect(env["NILO_TEST_DB"])
        try:
            await queue.push_in(conn, procs_kinds.Stamp(n=5))
            conn.commit()
        finally:
            conn.close()
        queue.wake()  # the commit was ours: tell the worker processes
        assert await started(tmp_path, 5, LONG_POLL_MS / 1_000 / 10) < 5.0
    finally:
        out = stop(worker)
    assert "Traceback" not in out, out


async def test_a_worker_that_binds_after_a_push_found_no_folder_claims_twice(
    tmp_path: Path,
) -> None:
    from nilo_job.store._wake import MISSING_S, listen

    db = str(tmp_path / "q.db")
    folder = folder_of(db)
    assert folder is not None
    signals = Signals(folder)
    signals.send(1)  # nobody serves the file: no folder, and no look again for MISSING_S
    loop = asyncio.get_running_loop()
    wakes: list[tuple[float, int | None]] = []
    second = asyncio.Event()

    def wake(run_at: int | None) -> None:
        wakes.append((loop.time(), run_at))
        if len(wakes) == 2:
            second.set()

    listening = asyncio.create_task(listen(folder, wake))
    try:
        async with asyncio.timeout(5):
            while not wakes:  # noqa: ASYNC110
                await asyncio.sleep(0)
        signals.send(2)  # the socket is there, but this pusher does not look yet
        assert signals._seen is None
        async with asyncio.timeout(5):
            await second.wait()
        # Bound, it claims at once; and again MISSING_S later, for a row whose push came
        # meanwhile from a pusher that had just found no folder (and so sent nothing).
        assert [run_at for _at, run_at in wakes] == [None, None]
        assert wakes[1][0] - wakes[0][0] >= MISSING_S * 0.9
        signals.send(3)  # MISSING_S later: it looks, finds the folder and lists it
        assert signals._seen is not None
    finally:
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening
        signals.close()


def test_a_socket_bound_just_after_a_listing_still_gets_the_next_signal(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    folder = folder_of(db)
    assert folder is not None
    folder.mkdir()
    first = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    first.bind(str(folder / "1-a.sock"))
    signals = Signals(folder)
    later = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        signals.send(1)  # lists the folder: one socket
        # Bound in the same instant, perhaps with the same coarse timestamp on the folder.
        later.bind(str(folder / "2-b.sock"))
        signals.send(2)
        later.settimeout(5)
        assert later.recv(64) == b"2"
        first.settimeout(5)
        assert first.recv(64) == b"1"
        assert first.recv(64) == b"2"
    finally:
        signals.close()
        first.close()
        later.close()
