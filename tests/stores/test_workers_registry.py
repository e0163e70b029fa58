"""The worker registry and leases kept by heartbeat, asked of each store directly and through
serve: an entry registered, beaten, shown lost after three of its beats, unregistered, forgotten
an hour after its last beat; a beat renewing the leases of the rows its process holds in one
statement whatever their number; `job.Jobs(heartbeat_ms=...)`'s lease; a process that cannot
reach the store for longer than the window has its rows run again elsewhere, and says so.

Times are handed to the store (`now_us`), so a lost entry needs no waiting.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

import nilo_job as job
from nilo_job._base.clock import Clock
from nilo_job._worker.beat import BEAT_MS, FORGET_US, LOST_BEATS, Beat, is_alive
from nilo_job.store.contract import NewRow, Store, WorkerEntry

T = 1_800_000_000_000_000
P = b'{"n":1}'
R = TypeVar("R")


async def wait_for(read: Callable[[], Awaitable[R | None]], timeout_s: float) -> R:
    """What `read()` answers once it answers something truthy, asking every 10 ms, for at most
    `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while not (found := await read()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {read.__name__}")
        await asyncio.sleep(0.01)
    return found


def entry(name: str = "h:1:1", started_at: int = T, beat_ms: int = 1_000) -> WorkerEntry:
    return WorkerEntry(
        id=name, host="h", pid=1, version="9.9.9", kinds=("a", "b"), workers=4,
        beat_ms=beat_ms, started_at=started_at, beat_at=started_at,
    )  # fmt: skip


async def test_an_entry_is_registered_beaten_and_unregistered(store: Store) -> None:
    await store.create_missing()
    await store.register(entry())
    assert await store.workers() == [entry()]

    assert await store.beat("h:1:1", T + 1_000_000, [7, 3], None, "h:1", 0) is True
    (beaten,) = await store.workers()
    assert (beaten.beat_at, beaten.running) == (T + 1_000_000, (7, 3))
    assert (beaten.kinds, beaten.workers, beaten.version, beaten.beat_ms) == (
        ("a", "b"), 4, "9.9.9", 1_000,
    )  # fmt: skip

    await store.unregister("h:1:1")
    assert await store.workers() == []
    await store.unregister("h:1:1")  # nothing to delete: no error
    # A beat of an entry that is gone says so: its process records itself again.
    assert await store.beat("h:1:1", T + 2_000_000, [], None, "h:1", 0) is False


async def test_a_failed_leave_says_the_entry_shows_as_lost_only_when_the_store_took_one(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    await store.create_missing()
    caplog.set_level(logging.WARNING, logger="nilo_job")
    register, beat, unregister = store.register, store.beat, store.unregister

    async def away(*_args: object) -> Any:
        raise job.StoreUnavailable("the store is away")

    store.unregister = away  # type: ignore[method-assign]
    try:
        taken = Beat(store, Clock(), BEAT_MS, None, list)
        await taken.register(["k"], 1)
        await taken.unregister()
        store.register = store.beat = away  # type: ignore[method-assign]
        never = Beat(store, Clock(), BEAT_MS, None, list)
        await never.register(["k"], 1)
        await never.once()
        await never.unregister()
        # An entry the store took, then forgot (a beat finds none), and could not take again.
        store.register = register  # type: ignore[method-assign]
        forgotten = Beat(store, Clock(), BEAT_MS, None, list)
        await forgotten.register(["k"], 1)
        store.register = away  # type: ignore[method-assign]

        async def not_found(*_args: object) -> bool:
            return False

        store.beat = not_found  # type: ignore[method-assign]
        await forgotten.once()
        await forgotten.unregister()
    finally:
        store.register, store.beat, store.unregister = register, beat, unregister  # type: ignore[method-assign]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("leaving")]
    failed = "leaving the worker registry failed with StoreUnavailable: the store is away; "
    assert said == [
        failed + "the entry shows as lost until it is forgotten",
        failed + "the store holds no entry of this process's that it took, so likely none shows",
        failed + "the store holds no entry of this process's that it took, so likely none shows",
    ]


async def test_an_entry_is_lost_once_it_missed_three_of_its_beats(store: Store) -> None:
    await store.create_missing()
    await store.register(entry(beat_ms=1_000))
    await store.beat("h:1:1", T + 5_000_000, [], None, "h:1", 0)
    (found,) = await store.workers()
    assert LOST_BEATS == 3
    assert is_alive(found, T + 5_000_000 + 3_000_000)  # three beats late: still alive
    assert not is_alive(found, T + 5_000_000 + 3_000_001)  # past three beats: lost


async def test_a_beat_forgets_entries_lost_for_an_hour_but_never_its_own(store: Store) -> None:
    await store.create_missing()
    await store.register(entry("old:1:1", T))
    await store.register(entry("recent:2:1", T + 10_000_000))
    await store.register(entry("me:3:1", T))
    now = T + FORGET_US + 5_000_000  # "old" beat an hour and 5 s ago, "recent" 55 min ago
    assert await store.beat("me:3:1", now, [], None, "me:3", now - FORGET_US) is True
    assert [e.id for e in await store.workers()] == ["me:3:1", "recent:2:1"]


async def test_registering_again_keeps_the_entry_and_takes_its_new_beat(store: Store) -> None:
    await store.create_missing()
    await store.register(entry())
    await store.register(
        WorkerEntry(
            id="h:1:1", host="h", pid=1, version="9.9.9", kinds=("a", "b"), workers=4,
            beat_ms=1_000, started_at=T, beat_at=T + 9, running=(5,),
        )
    )  # fmt: skip
    (found,) = await store.workers()
    assert (found.started_at, found.beat_at, found.running) == (T, T + 9, (5,))


async def test_a_beat_renews_the_leases_of_its_own_running_rows_only(store: Store) -> None:
    await store.create_missing()
    ids = await store.push([NewRow("a", P, T) for _ in range(4)])
    mine = await store.claim(["a"], T, T + 3_000_000, 2, "h:1")
    theirs = await store.claim(["a"], T, T + 3_000_000, 1, "other:2")
    await store.register(entry())
    queued = ids[3]
    assert queued is not None
    held = [row.id for row in mine] + [theirs[0].id, queued]

    assert await store.beat("h:1:1", T + 1_000_000, held, T + 4_000_000, "h:1", 0)
    leases = {i: (await store.row(i)).lease_until for i in held}  # type: ignore[union-attr]
    assert leases == {
        mine[0].id: T + 4_000_000, mine[1].id: T + 4_000_000,  # renewed
        theirs[0].id: T + 3_000_000,  # another process's claim: untouched
        queued: None,  # not running: untouched
    }  # fmt: skip
    # Never shortened: a renewal to an earlier time leaves the lease as it is.
    assert await store.beat("h:1:1", T + 1_500_000, held, T + 3_500_000, "h:1", 0)
    assert (await store.row(mine[0].id)).lease_until == T + 4_000_000  # type: ignore[union-attr]
    # A renewed lease holds: at T + 3.5 s the other worker's row is retaken, ours are not.
    again = await store.claim(["a"], T + 3_500_000, T + 9_000_000, 10, "third:3")
    assert [row.id for row in again] == [theirs[0].id, queued]
    # Without `renew_until` (no heartbeat_ms) nothing is renewed.
    assert await store.beat("h:1:1", T + 2_000_000, held, None, "h:1", 0)
    assert (await store.row(mine[0].id)).lease_until == T + 4_000_000  # type: ignore[union-attr]


# ------------------------------------------------------------- one statement per beat, counted


def _count_sqlite(store: Any, said: list[str]) -> Callable[[], Any]:
    """Record every statement the SQLite store's connections run into `said`."""

    def trace(conn: Any) -> None:
        conn.set_trace_callback(said.append)

    async def both() -> None:
        await store._db.call(trace, work=True)
        await store._db.call(trace)

    return both


def _uncommented(statement: str) -> str:
    """A traced statement without its leading comment lines."""
    lines = [line for line in statement.splitlines() if not line.startswith("--")]
    return "\n".join(lines).strip()


@pytest.mark.parametrize("rows", [1, 50])
async def test_a_beat_renews_any_number_of_rows_in_one_statement_on_sqlite(
    tmp_path: Path, rows: int
) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    await table.create_missing()
    try:
        await table.push([NewRow("a", P, T) for _ in range(rows)])
        held = [row.id for row in await table.claim(["a"], T, T + 3_000_000, rows, "h:1")]
        await table.register(entry())
        said: list[str] = []
        await _count_sqlite(table, said)()
        assert await table.beat("h:1:1", T + 1_000_000, held, T + 4_000_000, "h:1", 0)
        said = [_uncommented(s) for s in said]
        renewals = [s for s in said if s.startswith("UPDATE nilo_jobs SET lease_until")]
        assert len(renewals) == 1  # one statement, whatever the number of rows
        statements = [s for s in said if not s.startswith(("BEGIN", "COMMIT"))]
        assert len(statements) == 3  # the renewal, the forgetting, the entry's own beat
        leases = [(await table.row(i)).lease_until for i in held]  # type: ignore[union-attr]
        assert leases == [T + 4_000_000] * rows
    finally:
        await table.close()


@pytest.mark.parametrize("rows", [1, 50])
async def test_a_beat_renews_any_number_of_rows_in_one_statement_on_postgres(
    pg_url: str, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = job.Table(pg_url)
    try:
        await table.push([NewRow("a", P, T) for _ in range(rows)])
        held = [row.id for row in await table.claim(["a"], T, T + 3_000_000, rows, "h:1")]
        await table.register(entry())
        sent: list[str] = []
        execute = psycopg.AsyncConnection.execute

        async def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(str(query))
            return await execute(self, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.AsyncConnection, "execute", counted)
        assert await table.beat("h:1:1", T + 1_000_000, held, T + 4_000_000, "h:1", 0)
        monkeypatch.undo()
        assert len(sent) == 1  # the renewal, the forgetting and the beat: one statement
        assert "UPDATE nilo_jobs SET lease_until" in sent[0]
        leases = [(await table.row(i)).lease_until for i in held]  # type: ignore[union-attr]
        assert leases == [T + 4_000_000] * rows
    finally:
        await table.close()


# ------------------------------------------------------------------------ the queue's setting


@dataclass
class Slow:
    nilo_job = "slow"
    retry = job.Retry(times=3)
    timeout_ms = 3_600_000

    n: int

    async def run(self) -> None:
        await asyncio.Event().wait()  # until cancelled


def test_heartbeat_ms_makes_the_lease_three_beats_whatever_the_timeouts() -> None:
    assert job.Jobs(kinds=[Slow], store=job.Memory()).lease_ms == 3_601_000  # as without it
    assert job.Jobs(kinds=[Slow], store=job.Memory(), heartbeat_ms=200).lease_ms == 600


@pytest.mark.parametrize("value", [99, 3_600_001, 0, "200", True, None.__class__])
def test_heartbeat_ms_out_of_its_range_is_refused_by_name(value: object) -> None:
    with pytest.raises(job.Refusal) as refused:
        job.Jobs(kinds=[Slow], store=job.Memory(), heartbeat_ms=value)  # type: ignore[arg-type]
    assert "job.Jobs(heartbeat_ms=" in str(refused.value)
    assert "heartbeat_ms must be whole milliseconds from 100 to 3,600,000" in str(refused.value)


async def test_serve_registers_beats_with_its_running_rows_and_leaves_on_a_clean_stop(
    store: Store,
) -> None:
    await store.create_missing()
    jobs = job.Jobs(kinds=[Slow], store=store, heartbeat_ms=100, workers=2)
    async with jobs.serving(grace_ms=0):
        row_id = await jobs.push(Slow(1))

        async def beaten() -> WorkerEntry | None:
            found = await store.workers()
            return found[0] if found and found[0].running == (row_id,) else None

        found = await wait_for(beaten, timeout_s=10)
        assert (found.host, found.pid) == (socket.gethostname(), os.getpid())
        assert (found.kinds, found.workers, found.beat_ms) == (("slow",), 2, 100)
        assert is_alive(found, job.now_us())
        # Its lease is renewed at each beat: still three beats ahead, long after the claim.
        row = await jobs.row(row_id)
        assert row is not None
        assert row.lease_until is not None
        before = row.lease_until

        async def renewed() -> int | None:
            row = await jobs.row(row_id)
            assert row is not None
            assert row.attempts == 1  # renewed, never retaken
            assert row.lease_until is not None
            return row.lease_until if row.lease_until > before else None

        await wait_for(renewed, timeout_s=10)
    assert await store.workers() == []


async def test_without_heartbeat_ms_serve_beats_every_five_seconds_and_renews_nothing(
    store: Store,
) -> None:
    await store.create_missing()
    jobs = job.Jobs(kinds=[Slow], store=store)
    async with jobs.serving(grace_ms=0):
        (found,) = await wait_for(store.workers, timeout_s=10)
        assert found.beat_ms == BEAT_MS == 5_000
        row_id = await jobs.push(Slow(1))
        row = await wait_for(lambda: _running(jobs, row_id), timeout_s=10)
        assert row.lease_until is not None
        assert row.started_at is not None
        # The lease its claim took (the longest timeout plus a second), not three beats.
        assert 3_601_000_000 <= row.lease_until - row.started_at < 3_602_000_000


async def _running(jobs: job.Jobs, row_id: int) -> job.Row | None:
    row = await jobs.row(row_id)
    return row if row is not None and row.state == "running" else None


@dataclass
class Held:
    """A run that waits for the test to let it go, then ends done."""

    nilo_job = "held"
    retry = job.Retry(times=3)
    timeout_ms = 3_600_000

    n: int

    async def run(self) -> None:
        runs.append(os.getpid())
        await release.wait()


runs: list[int] = []
release = asyncio.Event()


def said_past_lease(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The WARNINGs that this process could not beat for about its lease."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith("this process could not beat")
    ]


def rows_said(row_id: int) -> str:
    """What the WARNING says of the one row `row_id` the process holds."""
    return (
        f"of the 1 row this process holds ({row_id}), any whose lease runs out before a beat "
        "renews it may be taken and run again by another worker (an end this process writes "
        "after that is refused as a lost lease)"
    )


async def test_a_process_whose_event_loop_stood_still_past_the_lease_says_so_not_the_store(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A process that could not beat because its own event loop stood still (blocked here, as
    by a sync call in a run; a SIGSTOP does the same) says that, not that the store could not
    be reached, and what it means for the rows it holds; its next beat is answered."""
    global release
    release = asyncio.Event()
    await store.create_missing()
    jobs = job.Jobs(kinds=[Held], store=store, heartbeat_ms=100, poll_ms=50)
    caplog.set_level(logging.INFO, logger="nilo_job")
    async with jobs.serving(grace_ms=0):
        row_id = await jobs.push(Held(1))

        async def beaten() -> WorkerEntry | None:
            found = await _entry_of(store, os.getpid())
            return found if found is not None and found.running == (row_id,) else None

        await wait_for(beaten, timeout_s=10)
        time.sleep(1.0)  # noqa: ASYNC251 (the event loop blocked for over the 300 ms lease)

        async def beating_again() -> str | None:
            return next(
                (m for r in caplog.records if (m := r.getMessage()).startswith("beating again")),
                None,
            )

        again = await wait_for(beating_again, timeout_s=10)
        release.set()
    (said,) = said_past_lease(caplog)
    found = re.fullmatch(
        r"this process could not beat for (\d+\.\d) s and the lease is 300 ms: its event loop "
        r"ran (\d+\.\d) s late \(the process was paused, or its event loop was blocked\); "
        + re.escape(rows_said(row_id)),
        said,
    )
    assert found is not None, said
    assert 1.0 <= float(found[1]) < 5.0  # the block, and a beat at most before it
    assert 0.8 <= float(found[2]) <= float(found[1])  # the block, less the step it began in
    assert re.fullmatch(r"beating again after \d+\.\d s without a beat answered", again), again


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A table two queues in this test share: a SQLite file, or a PostgreSQL database."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path}/shared.db"


async def test_a_process_cut_off_from_the_store_past_the_window_has_its_rows_run_again(
    shared_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A serving process whose beats fail for longer than three beats loses its rows to
    another process, which runs them again (at least once still holds); the first process
    says so, and its late end is refused as a lost lease."""
    global release
    release = asyncio.Event()
    runs.clear()
    cut, other = job.Table(shared_url), job.Table(shared_url)
    await cut.create_missing()
    cut_jobs = job.Jobs(kinds=[Held], store=cut, heartbeat_ms=100, poll_ms=50)
    other_jobs = job.Jobs(kinds=[Held], store=other, heartbeat_ms=100, poll_ms=50)
    caplog.set_level(logging.INFO, logger="nilo_job")
    try:
        async with cut_jobs.serving(grace_ms=5_000):
            row_id = await cut_jobs.push(Held(1))
            await wait_for(lambda: _running(cut_jobs, row_id), timeout_s=10)

            async def unreachable(*args: object) -> bool:
                raise job.StoreUnavailable("the store cannot be reached (the test cut it off)")

            # Cut off: neither its beats nor its claims reach the store (a process that could
            # still claim would take its own row back, and give it back while its run goes on).
            cut.beat = unreachable  # type: ignore[method-assign]
            cut.claim = unreachable  # type: ignore[method-assign]
            async with other_jobs.serving(grace_ms=0):

                async def run_twice() -> bool:
                    return len(runs) == 2

                await wait_for(run_twice, timeout_s=10)  # taken again after 3 beats, not an hour
                row = await other_jobs.row(row_id)
                assert row is not None
                assert row.attempts == 2
                (said,) = said_past_lease(caplog)
                assert re.fullmatch(
                    r"this process could not beat for \d+\.\d s and the lease is 300 ms: the "
                    r"store could not be reached \(the beat failed with StoreUnavailable\); "
                    + re.escape(rows_said(row_id)),
                    said,
                ), said
                release.set()  # both runs end: the first's end is refused, the second's kept

                async def done() -> job.Row | None:
                    row = await other_jobs.row(row_id)
                    return row if row is not None and row.state == "done" else None

                done_row = await wait_for(done, timeout_s=10)
                assert done_row.attempts == 2
            assert any("lease ran out" in r.getMessage() for r in caplog.records)
    finally:
        await cut.close()
        await other.close()


async def test_the_metrics_count_the_live_workers_of_each_kind(store: Store) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from nilo_job.metrics import Metrics

    await store.create_missing()
    jobs = job.Jobs(kinds=[Slow, Held], store=store, heartbeat_ms=100)
    metrics = Metrics(jobs)

    async def alive() -> dict[str, float]:
        text, _type = await metrics.exposition()
        return {
            sample.labels["kind"]: sample.value
            for family in text_string_to_metric_families(text.decode())
            for sample in family.samples
            if sample.name == "nilo_job_workers_alive"
        }

    assert await alive() == {"held": 0.0, "slow": 0.0}
    # Another process serving "slow" alone, and a lost one (its last beat an hour ago).
    await store.register(entry("other:2:1", job.now_us(), beat_ms=60_000))
    await store.register(entry("gone:3:1", job.now_us() - 3_600_000_000))
    async with jobs.serving(grace_ms=0, kinds=["slow"]):
        await wait_for(lambda: _entry_of(store, os.getpid()), timeout_s=10)
        # "a" and "b" are the other entry's kinds; "slow" is this process's.
        assert await alive() == {"held": 0.0, "slow": 1.0, "a": 1.0, "b": 1.0}
    assert await alive() == {"held": 0.0, "slow": 0.0, "a": 1.0, "b": 1.0}


async def _entry_of(store: Store, pid: int) -> WorkerEntry | None:
    return next((e for e in await store.workers() if e.pid == pid), None)


async def test_the_dashboard_overview_shows_the_workers_alive_or_lost_with_their_rows(
    store: Store,
) -> None:
    import re

    from nilo_job.dashboard import dashboard_app
    from tests.helpers.dashboard import client

    await store.create_missing()
    jobs = job.Jobs(kinds=[Slow], store=store, heartbeat_ms=100)
    async with client(dashboard_app(jobs)) as http:
        empty = (await http.get("/")).text
    assert '<p class="empty" id="none-workers">No worker process is registered.</p>' in empty

    now = job.now_us()
    await store.register(entry("web-1:7:1", now))
    await store.beat("web-1:7:1", now, [41, 42], None, "web-1:7", 0)
    await store.register(entry("web-2:8:1", now - 10_000_000))  # 10 beats ago: lost
    async with client(dashboard_app(jobs)) as http:
        answer = await http.get("/")
    assert answer.status_code == 200
    section = re.search(r'<section id="workers">(.*?)</section>', answer.text, re.S)
    assert section is not None
    states = re.findall(r'<tr data-worker="([^"]+)" data-state="(\w+)">', section.group(1))
    assert sorted(states) == [("web-1:7:1", "alive"), ("web-2:8:1", "lost")]
    assert '<a href="/rows/41">41</a>, <a href="/rows/42">42</a>' in section.group(1)


async def test_an_entry_deleted_while_its_process_serves_comes_back_at_its_next_beat(
    store: Store,
) -> None:
    await store.create_missing()
    jobs = job.Jobs(kinds=[Slow], store=store, heartbeat_ms=100)
    async with jobs.serving(grace_ms=0):
        first = await wait_for(lambda: _entry_of(store, os.getpid()), timeout_s=10)
        await store.unregister(first.id)  # by hand, or forgotten after a long outage
        assert await store.workers() == []
        again = await wait_for(lambda: _entry_of(store, os.getpid()), timeout_s=10)
        assert (again.id, again.started_at) == (first.id, first.started_at)
        assert again.beat_at > first.beat_at
    assert await store.workers() == []


async def test_a_process_whose_database_stops_answering_past_the_window_has_its_rows_run_again(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A real partition (a proxy of the tests' own holds every byte of the cut-off process's
    flows): its beat goes unanswered, it says which rows may run again as their leases run out,
    another process runs them again, and once the network heals its own end is refused."""
    from tests.helpers.proxy import Proxy

    global release
    release = asyncio.Event()
    runs.clear()
    proxy = Proxy().start()
    cut, other = job.Table(proxy.url(pg_url)), job.Table(pg_url)
    cut_jobs = job.Jobs(kinds=[Held], store=cut, heartbeat_ms=200, poll_ms=50)
    other_jobs = job.Jobs(kinds=[Held], store=other, heartbeat_ms=200, poll_ms=50)
    caplog.set_level(logging.INFO, logger="nilo_job")
    try:
        async with cut_jobs.serving(grace_ms=30_000):
            row_id = await other_jobs.push(Held(1))

            async def beating() -> WorkerEntry | None:
                found = await other.workers()
                return found[0] if found and found[0].running == (row_id,) else None

            await wait_for(beating, timeout_s=10)
            proxy.pause()  # the cut-off process's database stops answering
            async with other_jobs.serving(grace_ms=0):

                async def run_twice() -> bool:
                    return len(runs) == 2

                await wait_for(run_twice, timeout_s=10)  # within the window, not an hour
                (said,) = said_past_lease(caplog)
                assert re.fullmatch(
                    r"this process could not beat for \d+\.\d s and the lease is 600 ms: the "
                    r"store could not be reached \(the last beat is still unanswered\); "
                    + re.escape(rows_said(row_id)),
                    said,
                ), said
                proxy.resume()
                release.set()

                async def done() -> job.Row | None:
                    row = await other_jobs.row(row_id)
                    return row if row is not None and row.state == "done" else None

                assert (await wait_for(done, timeout_s=30)).attempts == 2

                async def refused() -> bool:
                    return any("lease ran out" in r.getMessage() for r in caplog.records)

                await wait_for(refused, timeout_s=30)  # the first run's late end
    finally:
        proxy.resume()
        await cut.close()
        await other.close()
        proxy.close()
