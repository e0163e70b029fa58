"""A PostgreSQL server that accepts the connection and never answers: every call fails within
the connect timeout (the URL's `connect_timeout`, or 10 s), with `StoreUnavailable` naming the
server, and the command line says so in one sentence. Nothing here needs a real server: the
silent one is a socket that listens and never reads."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import nilo_job as job
from nilo_job.store.postgres.bounds import CONNECT_TIMEOUT_S


@pytest.fixture
def silent() -> Iterator[int]:
    """The port of a server that accepts TCP connections (the kernel does) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


@dataclass
class Note:
    nilo_job = "note"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


def queue(url: str) -> job.Jobs:
    return job.Jobs(kinds=[Note], store=job.Table(url))


async def test_every_call_fails_within_the_default_connect_timeout(silent: int) -> None:
    url = f"postgresql://postgres@127.0.0.1:{silent}/app"
    jobs = queue(url)
    began = time.monotonic()
    with pytest.raises(job.StoreUnavailable) as failed:
        await jobs.stats()
    took = time.monotonic() - began
    assert took < CONNECT_TIMEOUT_S + 5, took
    assert str(failed.value).startswith(f"cannot reach PostgreSQL at 127.0.0.1:{silent}/app: ")
    await jobs.store.close()


@pytest.mark.parametrize("call", ["push", "stats", "serve", "ready"])
async def test_a_url_s_own_connect_timeout_bounds_every_call(silent: int, call: str) -> None:
    jobs = queue(f"postgresql://postgres@127.0.0.1:{silent}/app?connect_timeout=2")
    calls = {"push": lambda: jobs.push(Note()), "stats": jobs.stats, "serve": jobs.serve}
    began = time.monotonic()
    try:
        if call == "ready":
            assert await jobs.ready() is False
        else:
            with pytest.raises(job.StoreUnavailable, match=rf"127\.0\.0\.1:{silent}/app"):
                await calls[call]()
    finally:
        await jobs.store.close()
    assert time.monotonic() - began < 2 + 5


def test_the_command_line_says_it_in_one_sentence_within_the_bound(silent: int) -> None:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "nilo_job", "stats",
         f"postgresql://postgres@127.0.0.1:{silent}/app?connect_timeout=2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert time.monotonic() - began < 2 + 10
    assert done.returncode == 1
    assert done.stderr.startswith(f"Error: cannot reach PostgreSQL at 127.0.0.1:{silent}/app: ")
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
