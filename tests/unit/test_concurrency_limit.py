"""A kind's concurrency limit (`concurrency = N`): never more than N of its rows running under a
live lease at once, whoever claims them; an expired lease frees its place; kinds without a limit
in the same claim are untouched; serve leaves the rest queued and takes them as runs end; the
setting's refusals.

Every test but serve's runs on a `drain_at` clock or claims through the store directly, on
Memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

import pytest

import nilo_job as job
from nilo_job.store.contract import Store
from tests.helpers import ROOT

S = 1_000_000  # a second, in µs


@dataclass
class Export:
    """A partner allows two exports at once."""

    nilo_job = "export"
    retry = job.Retry.NONE
    concurrency = 2

    n: int

    def run(self) -> None:
        ran.append(("export", self.n))


@dataclass
class Mail:
    """A kind without a limit."""

    nilo_job = "mail"
    retry = job.Retry.NONE

    n: int

    def run(self) -> None:
        ran.append(("mail", self.n))


ran: list[tuple[str, int]] = []


@pytest.fixture(autouse=True)
def _forget_runs() -> None:
    ran.clear()


LIMITS = {"export": 2}


async def test_a_claim_takes_a_limited_kind_only_up_to_its_limit_and_the_others_in_full(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Export, Mail], store=store)
    exports = [await jobs.push(Export(n), at=t - 10 + n) for n in range(5)]
    mails = [await jobs.push(Mail(n), at=t - 20 + n) for n in range(3)]
    kinds = ["export", "mail"]

    first = await store.claim(kinds, t, t + 60 * S, 10, "w:1", limits=LIMITS)
    assert [row.id for row in first] == [*mails, *exports[:2]]  # in run_at order
    # Two exports hold live leases: another claim, from any worker, takes none of the three left.
    assert await store.claim(kinds, t + S, t + 61 * S, 10, "w:2", limits=LIMITS) == []
    assert await jobs.stats() == (3, 5, 0)


async def test_a_claim_leaves_room_for_what_the_limit_allows_less_what_runs(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Export], store=store)
    exports = [await jobs.push(Export(n), at=t - 10 + n) for n in range(4)]
    (held,) = await store.claim(["export"], t, t + 60 * S, 1, "w:1", limits=LIMITS)
    assert held.id == exports[0]
    # One runs: room for one more, however many are asked for.
    second = await store.claim(["export"], t, t + 60 * S, 10, "w:2", limits=LIMITS)
    assert [row.id for row in second] == [exports[1]]
    assert await store.claim(["export"], t, t + 60 * S, 10, "w:3", limits=LIMITS) == []


async def test_drain_runs_none_of_a_kind_whose_limit_is_held_elsewhere_and_the_others_all(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Export, Mail], store=store)
    for n in range(4):
        await jobs.push(Export(n), at=t - 10)
    for n in range(2):
        await jobs.push(Mail(n), at=t - 5)
    # Two exports run elsewhere (another process's workers), leased for a minute.
    held = await store.claim(["export"], t, t + 60 * S, 2, "w:1", limits=LIMITS)
    assert len(held) == 2

    assert await jobs.drain_at(t + S) == 2
    assert ran == [("mail", 0), ("mail", 1)]
    assert await jobs.stats() == (2, 2, 0)
    assert await jobs.run_one_at(t + 2 * S) is False


async def test_an_expired_lease_frees_its_place(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Export], store=store)
    ids = [await jobs.push(Export(n), at=t - 10 + n) for n in range(4)]
    # Two workers took a row each: the first died, its lease ends at t + 1 s; the other's lease
    # ends at t + 2 s.
    (first,) = await store.claim(["export"], t, t + S, 1, "w:1", limits=LIMITS)
    (second,) = await store.claim(["export"], t, t + 2 * S, 1, "w:2", limits=LIMITS)
    assert [first.id, second.id] == ids[:2]

    assert await jobs.drain_at(t + S - 1) == 0  # both leases live: the limit is held
    # At t + 1 s the first lease has run out: that row is not counted, and is claimed again
    # (the earliest due); the drain runs one row at a time beside the one that still runs.
    assert await jobs.drain_at(t + S) == 3
    assert ran == [("export", 0), ("export", 2), ("export", 3)]
    assert await jobs.stats() == (0, 1, 0)  # the second still runs under its lease


async def test_kinds_without_a_limit_in_the_same_claim_take_the_whole_limit(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Export, Mail], store=store)
    for n in range(3):
        await jobs.push(Export(n), at=t - 10)
    mails = [await jobs.push(Mail(n), at=t - 5 + n) for n in range(6)]
    await store.claim(["export"], t, t + 60 * S, 2, "w:1", limits=LIMITS)  # the limit is held

    taken = await store.claim(["export", "mail"], t, t + 60 * S, 4, "w:2", limits=LIMITS)
    assert [row.id for row in taken] == mails[:4]
    taken = await store.claim(["export", "mail"], t, t + 60 * S, 4, "w:2", limits=LIMITS)
    assert [row.id for row in taken] == mails[4:]


async def test_serve_runs_at_most_the_limit_at_once_and_the_rest_as_runs_end(
    store: Store,
) -> None:
    started: list[int] = []
    finished: list[int] = []
    running = most = 0
    go = asyncio.Event()
    two_started = asyncio.Event()
    all_finished = asyncio.Event()

    @dataclass
    class Slow:
        nilo_job = "slow-export"
        retry = job.Retry.NONE
        concurrency = 2

        n: int

        async def run(self) -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            started.append(self.n)
            if len(started) == 2:
                two_started.set()
            try:
                await go.wait()
            finally:
                running -= 1
            finished.append(self.n)
            if len(finished) == 7:
                all_finished.set()

    # A poll of a minute: the rows the limit keeps queued must be claimed as runs end here.
    jobs = job.Jobs(kinds=[Slow], store=store, workers=5, poll_ms=60_000)
    await jobs.push_many([Slow(n) for n in range(6)])
    async with jobs.serving():
        await asyncio.wait_for(two_started.wait(), 10)
        assert await jobs.stats() == (4, 2, 0)
        # Three workers are idle, and a push is not handed to one: a claim must count it.
        await jobs.push(Slow(6))
        assert await jobs.stats() == (5, 2, 0)
        go.set()
        await asyncio.wait_for(all_finished.wait(), 10)
    assert most == 2
    assert sorted(started) == list(range(7))


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (0, "is below 1"),
        (True, "is a bool, not a number"),
        (100_001, "is more than 100,000"),
        ("2", "is a str, not a number"),
    ],
)
def test_a_concurrency_out_of_its_range_is_refused_naming_the_kind_and_the_range(
    value: object, why: str
) -> None:
    @dataclass
    class Report:
        nilo_job = "report"
        retry = job.Retry.NONE
        concurrency = value

        def run(self) -> None: ...

    with pytest.raises(job.Refusal) as caught:
        job.Jobs(kinds=[Report], store=job.Memory())
    assert str(caught.value) == (
        f"Report.concurrency = {value!r} {why}: concurrency must be a count of runs at once from "
        "1 to 100,000 (across every process on the store)"
    )


def test_a_concurrency_within_its_range_is_the_kinds() -> None:
    @dataclass
    class Report:
        nilo_job = "report"
        retry = job.Retry.NONE
        concurrency = 100_000

        def run(self) -> None: ...

    jobs = job.Jobs(kinds=[Report, Mail], store=job.Memory())
    assert [(kind.name, kind.concurrency) for kind in jobs.kinds] == [
        ("report", 100_000),
        ("mail", None),
    ]


class ExportPartner:
    """A partner whose exports wait until the test lets them end, counting those at once."""

    def __init__(self) -> None:
        self.started: asyncio.Queue[int] = asyncio.Queue()
        self.go: dict[int, asyncio.Event] = {}
        self.at_once = self.most = 0

    async def export(self, report_id: int) -> None:
        self.at_once += 1
        self.most = max(self.most, self.at_once)
        self.go[report_id] = asyncio.Event()
        self.started.put_nowait(report_id)
        try:
            await self.go[report_id].wait()
        finally:
            self.at_once -= 1


async def test_the_references_example_runs_two_exports_at_once_and_no_more(
    store: Store,
) -> None:
    text = (ROOT / "docs" / "reference.md").read_text()
    (sample,) = (
        block
        for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
        if "concurrency = 2" in block
    )
    scope: dict[str, object] = {"job": job, "dataclass": dataclass, "Partner": ExportPartner}
    exec(sample, scope)
    export = scope["Export"]
    assert isinstance(export, type)

    @dataclass
    class Deps:
        partner: ExportPartner

    partner = ExportPartner()
    jobs = job.Jobs(kinds=[export], store=store, deps=Deps(partner), workers=5, poll_ms=60_000)
    ids = [await jobs.push(export(report_id=n)) for n in range(5)]
    async with jobs.serving():
        first = {await asyncio.wait_for(partner.started.get(), 10) for _ in range(2)}
        # Two run; a claim now (the test's own drain) finds no room for a third.
        assert await asyncio.wait_for(jobs.drain(), 10) == 0
        assert partner.at_once == 2
        for n in sorted(first):
            partner.go[n].set()
        rest = {await asyncio.wait_for(partner.started.get(), 10) for _ in range(2)}
        assert await asyncio.wait_for(jobs.drain(), 10) == 0
        for n in sorted(rest):
            partner.go[n].set()
        last = await asyncio.wait_for(partner.started.get(), 10)
        partner.go[last].set()
    # Leaving `serving` lets the last run finish and writes its end.
    assert [getattr(await jobs.row(row_id), "state", None) for row_id in ids] == ["done"] * 5
    assert first | rest | {last} == set(range(5))
    assert partner.most == 2
