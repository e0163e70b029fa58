"""serve's stop ends with one INFO line saying what finished within the grace period, what went
back to the table, and that it stopped, on every store.

serve runs in a task the test cancels: once to begin the stop, and a second time to end the
grace period at once (what a second SIGTERM does), so that no test waits for a grace to pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading

import pytest

import nilo_job as job
from nilo_job.store.contract import Store
from tests.helpers.serving import until, until_idle

_started: set[str] = set()
_counted: list[str] = []  # each Finishes run that started
_finish = asyncio.Event()  # replaced per test (a test's own loop)
_thread_may_end = threading.Event()


@dataclasses.dataclass
class Finishes:
    """Runs until the test lets it finish (after the stop began)."""

    nilo_job = "finishes"
    retry = job.Retry.NONE

    async def run(self) -> None:
        _started.add("finishes")
        _counted.append("finishes")
        await _finish.wait()


@dataclasses.dataclass
class Hangs:
    """Runs until it is cancelled: cut short past the grace period, its row queued again."""

    nilo_job = "hangs"
    retry = job.Retry.NONE

    async def run(self) -> None:
        _started.add("hangs")
        await asyncio.Event().wait()


@dataclasses.dataclass
class Blocks:
    """A sync run whose thread goes on past the stop: its row stays running under its lease."""

    nilo_job = "blocks"
    retry = job.Retry.NONE

    def run(self) -> None:
        _started.add("blocks")
        _thread_may_end.wait(30)


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "nilo_job" and r.levelno >= logging.INFO]


async def test_a_stop_says_what_finished_what_went_back_and_that_it_stopped(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    global _finish
    _started.clear()
    _finish = asyncio.Event()
    _thread_may_end.clear()
    caplog.set_level(logging.INFO, logger="nilo_job")
    jobs = job.Jobs(kinds=[Finishes, Hangs, Blocks], store=store, workers=3, poll_ms=60_000)
    await jobs.push_many([Finishes(), Hangs(), Blocks()])
    serving = asyncio.create_task(jobs.serve(grace_ms=60_000))
    try:
        await until("the three runs to start", lambda: len(_started) == 3)
        serving.cancel()  # the stop begins: the grace period
        await until("the stop to begin", lambda: jobs._server.stopping)
        _finish.set()  # one run finishes within the grace period
        async with asyncio.timeout(10):  # its end written
            while await jobs.count(job.Where(kind="finishes", state="running")):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        serving.cancel()  # a second stop: the grace period ends now
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(10):
                await serving
    finally:
        _thread_may_end.set()
        serving.cancel()
    lines = _lines(caplog)
    assert lines[-1].levelno == logging.INFO
    assert lines[-1].getMessage() == (
        "stopped: 1 run finished within the grace period, 1 row queued again, "
        "1 row left running until its lease (a sync run's thread)"
    )
    assert sum(r.getMessage().startswith("stopped:") for r in lines) == 1
    # The WARNING about the runs cut short is still said, before it.
    assert lines[-2].levelno == logging.WARNING
    assert lines[-2].getMessage().startswith("cancelled 2 runs past the grace period (60000 ms)")


async def test_a_stop_with_nothing_running_says_so(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nilo_job")
    jobs = job.Jobs(kinds=[Finishes], store=store, workers=2, poll_ms=60_000)
    serving = asyncio.create_task(jobs.serve(grace_ms=5_000))
    await until_idle(jobs)
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        async with asyncio.timeout(10):
            await serving
    lines = _lines(caplog)
    assert (lines[-1].levelno, lines[-1].getMessage()) == (
        logging.INFO,
        "stopped: no row was running",
    )


async def test_runs_that_finish_within_the_grace_are_counted(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    global _finish
    _started.clear()
    _finish = asyncio.Event()
    _counted.clear()
    caplog.set_level(logging.INFO, logger="nilo_job")
    jobs = job.Jobs(kinds=[Finishes], store=store, workers=2, poll_ms=60_000)
    await jobs.push_many([Finishes(), Finishes()])
    serving = asyncio.create_task(jobs.serve(grace_ms=60_000))
    try:
        await until("both runs to start", lambda: len(_counted) == 2)
        serving.cancel()
        await until("the stop to begin", lambda: jobs._server.stopping)
        _finish.set()
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(10):
                await serving
    finally:
        serving.cancel()
    lines = _lines(caplog)
    assert lines[-1].getMessage() == "stopped: 2 runs finished within the grace period"
    assert await jobs.stats() == (0, 0, 0)
