"""A row retaken after its lease ran out: the claim answers which worker held it (on both of a
store's claim paths, with and without a concurrency limit), the run's log says so as a WARNING
naming the kind, the row, the attempt and that worker, and `Metrics` counts it.

On Memory, SQLite and PostgreSQL, on a `drain_at` clock, and once under serve.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

import nilo_job as job
from nilo_job.metrics import Metrics
from nilo_job.store.contract import Store

S = 1_000_000  # a second, in µs


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry(times=3, backoff=job.Fixed(ms=1_000))

    to: str

    def run(self) -> None:
        pass


@dataclass
class Export:
    nilo_job = "export"
    retry = job.Retry.NONE
    concurrency = 2

    def run(self) -> None:
        pass


@pytest.mark.parametrize("limits", [None, {"mail": 5}], ids=["plain", "limited"])
async def test_the_claim_says_which_worker_held_a_retaken_row(
    store: Store, t: int, limits: dict[str, int] | None
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    first = await jobs.push(Mail(to="ada"), at=t)
    second = await jobs.push(Mail(to="bob"), at=t)
    taken = await store.claim(["mail"], t, t + S, 1, "host-a:11", limits=limits)
    assert [(row.id, row.attempts, row.retaken_from) for row in taken] == [(first, 1, None)]
    taken = await store.claim(["mail"], t + 2 * S, t + 3 * S, 5, "host-b:22", limits=limits)
    assert [(row.id, row.attempts, row.retaken_from) for row in taken] == [
        (first, 2, "host-a:11"),
        (second, 1, None),
    ]


async def test_a_retaken_row_is_a_warning_and_counted(
    store: Store, t: int, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = job.Jobs(kinds=[Mail, Export], store=store)
    metrics = Metrics(jobs)
    row_id = await jobs.push(Mail(to="ada"), at=t)
    await jobs.push(Export(), at=t)
    assert [row.id for row in await store.claim(["mail"], t, t + S, 1, "host-a:11")] == [row_id]
    with caplog.at_level(logging.WARNING, logger="nilo_job"):
        assert await jobs.drain_at(t + 2 * S) == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        f"mail row {row_id} was retaken after its lease ran out: attempt 2 begins; worker "
        "host-a:11 held attempt 1"
    ]
    record = warnings[0]
    assert (record.kind, record.row, record.attempt, record.worker) == (  # type: ignore[attr-defined]
        "mail",
        row_id,
        2,
        "host-a:11",
    )
    retaken = metrics.registry.get_sample_value
    assert retaken("nilo_job_retaken_total", {"kind": "mail"}) == 1
    assert retaken("nilo_job_retaken_total", {"kind": "export"}) is None


async def test_a_row_under_a_live_lease_is_not_retaken(
    store: Store, t: int, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    metrics = Metrics(jobs)
    await jobs.push(Mail(to="ada"), at=t)
    await store.claim(["mail"], t, t + 5 * S, 1, "host-a:11")
    with caplog.at_level(logging.WARNING, logger="nilo_job"):
        assert await jobs.drain_at(t + 2 * S) == 0
    assert [r for r in caplog.records if r.levelno == logging.WARNING] == []
    assert metrics.registry.get_sample_value("nilo_job_retaken_total", {"kind": "mail"}) is None


@dataclass
class WelcomeMail:
    nilo_job = "welcome-mail"
    aliases = ("send-welcome",)
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


@dataclass
class SendWelcome:
    nilo_job = "send-welcome"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


async def test_a_retaken_row_of_an_old_name_is_told_under_the_kinds_name(
    store: Store, t: int, caplog: pytest.LogCaptureFixture
) -> None:
    row_id = await job.Jobs(kinds=[SendWelcome], store=store).push(SendWelcome(), at=t)
    await store.claim(["send-welcome"], t, t + S, 1, "host-a:11")
    jobs = job.Jobs(kinds=[WelcomeMail], store=store)
    metrics = Metrics(jobs)
    with caplog.at_level(logging.WARNING, logger="nilo_job"):
        assert await jobs.drain_at(t + 2 * S) == 1
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"welcome-mail row {row_id} was retaken after its lease ran out: attempt 2 begins; "
        "worker host-a:11 held attempt 1"
    ]
    assert (
        metrics.registry.get_sample_value("nilo_job_retaken_total", {"kind": "welcome-mail"}) == 1
    )


ran: list[str] = []


@dataclass
class Ping:
    nilo_job = "ping"
    retry = job.Retry.NONE

    def run(self) -> None:
        ran.append("ping")


async def test_serve_says_and_counts_a_retaken_row(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    ran.clear()
    jobs = job.Jobs(kinds=[Ping], store=store, poll_ms=20)
    metrics = Metrics(jobs)
    now = job.now_us()
    row_id = await jobs.push(Ping(), at=now - 3 * S)
    await store.claim(["ping"], now - 2 * S, now - S, 1, "host-a:11")  # its lease ran out
    with caplog.at_level(logging.WARNING, logger="nilo_job"):
        task = asyncio.create_task(jobs.serve())
        try:
            async with asyncio.timeout(10):
                while not ran:  # noqa: ASYNC110 (a run in a thread: a bounded poll)
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"ping row {row_id} was retaken after its lease ran out: attempt 2 begins; worker "
        "host-a:11 held attempt 1"
    ]
    assert metrics.registry.get_sample_value("nilo_job_retaken_total", {"kind": "ping"}) == 1
