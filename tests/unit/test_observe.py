"""Observers see every push, claim, run and end: what metrics and tracing are built on."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterator, Sequence

import pytest

import nilo_job as job


class Boom(Exception):
    pass


@dataclasses.dataclass
class Flaky:
    nilo_job = "flaky"
    retry = job.Retry(times=1)

    fail: bool

    def run(self) -> None:
        if self.fail:
            raise Boom("no")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []
        self.ended_once = asyncio.Event()
        self.ends = 0
        self.waiters: dict[int, asyncio.Event] = {}

    @contextlib.contextmanager
    def pushing(self, kind: str) -> Iterator[None]:
        self.events.append(("push", kind))
        yield

    def pushed(self, kind: str, row_id: int | None) -> None:
        self.events.append(("pushed", kind, row_id))

    def claimed(
        self, rows: Sequence[job.store.contract.Claimed], now_us: int, seconds: float
    ) -> None:
        assert seconds >= 0
        if rows:
            self.events.append(("claimed", len(rows)))

    @contextlib.contextmanager
    def running(self, kind: str, tick: job.Tick) -> Iterator[None]:
        self.events.append(("run", kind, tick.attempts))
        yield

    def ended(self, kind: str, outcome: str, error: str | None, seconds: float) -> None:
        assert seconds >= 0
        self.events.append(("end", kind, outcome, error))
        self.ended_once.set()
        self.ends += 1
        for count, event in list(self.waiters.items()):
            if self.ends >= count:
                event.set()

    async def until_ends(self, count: int) -> None:
        event = self.waiters.setdefault(count, asyncio.Event())
        if self.ends >= count:
            return
        await asyncio.wait_for(event.wait(), 30)


async def test_an_observer_sees_pushes_runs_and_ends_in_order(store: job.Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Flaky], store=store)
    seen = Recorder()
    jobs.observe(seen)
    await jobs.push(Flaky(fail=False), at=t)
    await jobs.push(Flaky(fail=True), at=t + 1)
    assert await jobs.drain_at(t + 1) == 3
    assert seen.events == [
        ("push", "flaky"),
        ("pushed", "flaky", 1),
        ("push", "flaky"),
        ("pushed", "flaky", 2),
        ("claimed", 1),
        ("run", "flaky", 1),
        ("end", "flaky", "done", None),
        ("claimed", 1),
        ("run", "flaky", 1),
        ("end", "flaky", "retrying", "Boom"),
        ("claimed", 1),
        ("run", "flaky", 2),
        ("end", "flaky", "dead", "Boom"),
    ]


async def test_serve_reports_its_claims(store: job.Store) -> None:
    jobs = job.Jobs(kinds=[Flaky], store=store, poll_ms=10)
    seen = Recorder()
    jobs.observe(seen)
    await jobs.push(Flaky(fail=False))
    async with jobs.serving():
        await asyncio.wait_for(seen.ended_once.wait(), 30)
    assert ("claimed", 1) in seen.events
    assert ("end", "flaky", "done", None) in seen.events


def test_an_observer_without_the_methods_is_refused() -> None:
    jobs = job.Jobs(kinds=[Flaky], store=job.Memory())
    with pytest.raises(job.Refusal, match="pushing, pushed, claimed, running and ended"):
        jobs.observe(object())  # type: ignore[arg-type]


@dataclasses.dataclass
class Quick:
    nilo_job = "quick"
    retry = job.Retry.NONE

    n: int

    async def run(self) -> None:
        if self.n == 150:
            await asyncio.Event().wait()  # never ends by itself: serve is stopped meanwhile


async def test_rows_claimed_ahead_of_free_workers_are_queued_again_when_serve_stops() -> None:
    jobs = job.Jobs(kinds=[Quick], store=job.Memory(), workers=2, poll_ms=10)
    seen = Recorder()
    jobs.observe(seen)
    await jobs.push_many([Quick(n) for n in range(300)])
    async with jobs.serving(grace_ms=0):
        await seen.until_ends(140)
    claims = [event[1] for event in seen.events if event[0] == "claimed"]
    assert max(claims) > 2  # fast runs are claimed in batches larger than the free workers
    stats = await jobs.stats()
    assert stats.running == 0  # nothing claimed ahead is left running
    done = sum(1 for event in seen.events if event[:3] == ("end", "quick", "done"))
    assert stats.queued == 300 - done
