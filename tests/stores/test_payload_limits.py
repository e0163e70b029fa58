"""Bounded payloads, on Memory, SQLite and PostgreSQL: a payload over the store's `max_payload`
is refused at every push (push, push_many, push_in, the sync API, a schedule's tick payload) by
one sentence, with nothing written; the limit is inclusive, settable and range-checked; and a
list (`find`, `dead_ones`, the dashboard) reads only the start of each payload, while `row`
reads it whole."""

from __future__ import annotations

import contextlib
import dataclasses
import html
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import nilo_job as job
from nilo_job.store.contract import LISTED_CHARS, MAX_PAYLOAD, Store
from tests.helpers.dashboard import client


@dataclasses.dataclass
class Note:
    nilo_job = "note"
    retry = job.Retry.NONE

    text: str = ""

    def run(self) -> None:
        pass


@dataclasses.dataclass
class Doomed:
    nilo_job = "doomed"
    retry = job.Retry.NONE

    text: str = ""

    def run(self) -> None:
        raise LookupError("no such mailbox")


@dataclasses.dataclass
class Digest:
    nilo_job = "digest"
    retry = job.Retry.NONE
    schedule = job.every(60_000)
    overlap = job.Overlap.SKIP
    missed = job.Missed.DROP

    header: str = "x" * 50

    def run(self) -> None:
        pass


OVERHEAD = len(b'{"text":""}')
MEMORY_DEFAULT = 4_096


def note(size: int) -> Note:
    """A Note whose JSON is exactly `size` bytes."""
    value = Note("x" * (size - OVERHEAD))
    assert len(f'{{"text":"{value.text}"}}'.encode()) == size
    return value


def raise_with(store: Store) -> str:
    """How a refusal says to raise the limit of `store`."""
    if isinstance(store, job.Memory):
        return "job.Memory(max_payload=...) takes up to 1,000,000,000 bytes"
    return "job.Table(..., max_payload=...) takes up to 1,000,000,000 bytes"


def refusal(call: str, size: int, limit: int, store: Store) -> str:
    """The sentence a push over the limit is refused with."""
    return (
        f"{call}: this Note payload is {size:,} bytes of JSON, over the store's max_payload of "
        f"{limit:,} bytes; nothing was pushed. Push a reference to large data (a file's path, "
        f"an object's key) instead, or raise the limit: {raise_with(store)}"
    )


def table_place(tmp_path: Path) -> str:
    """The URL of a SQLite file holding an empty table, made without an event loop."""
    path = tmp_path / "q.db"
    table = job.Table(f"sqlite:///{path}")
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executescript(table.ddl)  # type: ignore[attr-defined]
    return f"sqlite:///{path}"


@pytest.fixture(params=["memory", "sqlite", "postgres", "mariadb"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the test's stores are: "memory", or the URL of an empty table."""
    if request.param == "memory":
        return "memory"
    if request.param in ("postgres", "mariadb"):
        name = "pg_url" if request.param == "postgres" else "mariadb_url"
        url: str = request.getfixturevalue(name)
        return url
    return table_place(tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def table_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty table, on SQLite and on PostgreSQL (push_in needs a database)."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return table_place(tmp_path)


def make(place: str, max_payload: int | None = None) -> Store:
    """A store at `place`, with `max_payload` when given (else its default)."""
    options = {} if max_payload is None else {"max_payload": max_payload}
    if place == "memory":
        return job.Memory(bytes=1 << 30, **options)
    return job.Table(place, **options)


@pytest.fixture
async def stores(place: str) -> AsyncIterator[Callable[..., Store]]:
    """`make` at the test's place; the stores it made are closed after the test."""
    made: list[Store] = []

    def maker(max_payload: int | None = None) -> Store:
        store = make(place, max_payload)
        made.append(store)
        return store

    try:
        yield maker
    finally:
        for store in made:
            await store.close()


async def rows_in(jobs: job.Jobs) -> int:
    return await jobs.count(job.Where())


# ---------------------------------------------------------------------------- at push


async def test_the_default_limit_takes_its_own_size_and_refuses_one_byte_more(
    stores: Callable[..., Store],
) -> None:
    store = stores()
    limit = MEMORY_DEFAULT if isinstance(store, job.Memory) else MAX_PAYLOAD
    assert (getattr(store, "max_payload", None), MAX_PAYLOAD) == (limit, 1_048_576)
    jobs = job.Jobs(kinds=[Note], store=store)
    first = await jobs.push(note(limit))
    assert isinstance(first, int)
    with pytest.raises(job.PayloadTooLarge) as refused:
        await jobs.push(note(limit + 1))
    assert str(refused.value) == refusal("push", limit + 1, limit, store)
    assert isinstance(refused.value, job.Refusal)
    assert isinstance(refused.value, job.JobError)
    assert await rows_in(jobs) == 1
    assert await jobs.stats() == (1, 0, 0)
    row = await jobs.row(first)
    assert row is not None
    assert row.payload == {"text": "x" * (limit - OVERHEAD)}


async def test_push_many_with_one_payload_over_the_limit_writes_none_of_them(
    stores: Callable[..., Store],
) -> None:
    store = stores(max_payload=100)
    jobs = job.Jobs(kinds=[Note], store=store)
    with pytest.raises(job.PayloadTooLarge) as refused:
        await jobs.push_many([note(100), note(101), note(50)])
    # The value is named by its place in the list, and the refusal keeps its class.
    assert str(refused.value) == refusal("push_many: item 2 of 3 (values[1])", 101, 100, store)
    assert isinstance(refused.value, job.Refusal)
    assert await rows_in(jobs) == 0
    ids = await jobs.push_many([note(100), note(50)])
    assert len(ids) == 2
    assert await rows_in(jobs) == 2


async def test_a_max_payload_of_your_own_is_the_limit_on_every_store(
    stores: Callable[..., Store],
) -> None:
    # Above Memory's default and below the tables': each store keeps the number it was given.
    store = stores(max_payload=5_000)
    assert getattr(store, "max_payload", None) == 5_000
    jobs = job.Jobs(kinds=[Note], store=store)
    assert isinstance(await jobs.push(note(5_000)), int)
    with pytest.raises(job.PayloadTooLarge) as refused:
        await jobs.push(note(5_001))
    assert str(refused.value) == refusal("push", 5_001, 5_000, store)
    assert await rows_in(jobs) == 1


async def test_push_in_over_the_limit_is_refused_and_writes_nothing_in_the_transaction(
    table_url: str,
) -> None:
    table = job.Table(table_url, max_payload=100)
    jobs = job.Jobs(kinds=[Note], store=table)
    try:
        if table_url.startswith("sqlite:"):
            conn = sqlite3.connect(table_url.removeprefix("sqlite:///"))
            try:
                conn.execute("BEGIN")
                with pytest.raises(job.PayloadTooLarge) as refused:
                    await jobs.push_in(conn, note(101))
                assert str(refused.value) == refusal("push_in", 101, 100, table)
                with pytest.raises(job.PayloadTooLarge) as refused:
                    jobs.sync.push_in(conn, note(101))
                assert str(refused.value) == refusal("push_in", 101, 100, table)
                assert isinstance(await jobs.push_in(conn, note(100)), int)
                conn.commit()
            finally:
                conn.close()
        else:
            import psycopg

            connecting = psycopg.AsyncConnection.connect(table_url)
            async with await connecting as aconn, aconn.transaction():
                with pytest.raises(job.PayloadTooLarge) as refused:
                    await jobs.push_in(aconn, note(101))
                assert str(refused.value) == refusal("push_in", 101, 100, table)
                assert isinstance(await jobs.push_in(aconn, note(100)), int)
            with psycopg.connect(table_url) as conn, conn.transaction():
                with pytest.raises(job.PayloadTooLarge) as refused:
                    jobs.sync.push_in(conn, note(101))
                assert str(refused.value) == refusal("push_in", 101, 100, table)
        assert await rows_in(jobs) == 1
    finally:
        await table.close()


def test_the_sync_api_refuses_a_payload_over_the_limit(place: str) -> None:
    store = make(place, max_payload=100)
    jobs = job.Jobs(kinds=[Note], store=store)
    try:
        with pytest.raises(job.PayloadTooLarge) as refused:
            jobs.sync.push(note(101))
        assert str(refused.value) == refusal("push", 101, 100, store)
        assert isinstance(jobs.sync.push(note(100)), int)
        assert jobs.sync.stats() == (1, 0, 0)
    finally:
        jobs.sync.close()


def test_a_schedule_whose_tick_payload_is_over_the_limit_is_refused_as_the_queue_is_built(
    place: str,
) -> None:
    store = make(place, max_payload=20)
    with pytest.raises(job.PayloadTooLarge) as refused:
        job.Jobs(kinds=[Digest], store=store)
    assert str(refused.value) == (
        "job.Jobs(kinds=[...]): the scheduled kind Digest's tick payload (every field at its "
        "default) is 63 bytes of JSON, over the store's max_payload of 20 bytes; nothing was "
        f"pushed. Give its fields smaller defaults, or raise the limit: {raise_with(store)}"
    )
    assert isinstance(job.Jobs(kinds=[Digest], store=make(place, max_payload=63)), job.Jobs)


@pytest.mark.parametrize("value", [0, -1, True, 1.5, 1_000_000_001])
def test_a_max_payload_out_of_its_range_is_refused_by_name(place: str, value: object) -> None:
    said = "job.Memory(max_payload=" if place == "memory" else "job.Table(..., max_payload="
    with pytest.raises(job.Refusal) as refused:
        make(place, max_payload=value)  # type: ignore[arg-type]
    text = str(refused.value)
    assert text.startswith(f"{said}{value!r}) ")
    assert text.endswith(
        "max_payload must be a positive number of bytes from 1 to 1,000,000,000 (the longest "
        "text SQLite keeps)"
    )
    assert isinstance(make(place, max_payload=1_000_000_000), object)


# ---------------------------------------------------------------------------- in lists

TEXT = "é" * 1_000_000  # two bytes a character: a payload of 2,000,011 bytes, 1,000,011 characters
START = ('{"text":"' + TEXT)[:LISTED_CHARS]


def chars(payload: bytes) -> int:
    return len(payload.decode("utf-8", "replace"))


async def test_a_list_reads_only_the_start_of_each_payload_and_a_row_reads_it_whole(
    stores: Callable[..., Store], t: int
) -> None:
    store = stores(max_payload=3_000_000)
    jobs = job.Jobs(kinds=[Note, Doomed], store=store)
    big = await jobs.push(Note(TEXT), at=t)
    small = await jobs.push(Note("hi"), at=t)
    assert big is not None
    assert small is not None

    found = {row.id: row for row in (await jobs.find(job.Where(state="queued"))).rows}
    assert (found[big].payload, found[big].payload_cut) == (START, True)
    assert len(found[big].payload) == 4_096
    assert (found[small].payload, found[small].payload_cut) == ({"text": "hi"}, False)
    everywhere = {row.id: row for row in (await jobs.find(job.Where())).rows}
    assert (everywhere[big].payload, everywhere[big].payload_cut) == (START, True)
    # What the store itself answered the list: the start, never the 2 MB.
    views = await store.find(job.Where(state="queued"), None, 10)
    assert max(chars(view.payload) for view in views) == LISTED_CHARS + 1

    whole = await jobs.row(big)
    assert whole is not None
    assert (whole.payload, whole.payload_cut) == ({"text": TEXT}, False)

    doomed = await jobs.push(Doomed(TEXT), at=t)
    assert await jobs.drain_at(t) == 3
    (dead,) = await jobs.dead_ones()
    assert (dead.id, dead.error, dead.payload, dead.payload_cut) == (
        doomed, "LookupError", START, True
    )  # fmt: skip
    (stored,) = await store.dead_ones(10)
    assert chars(stored.payload) == LISTED_CHARS + 1
    (listed,) = (await jobs.find(job.Where(state="dead"))).rows
    assert (listed.payload, listed.payload_cut) == (START, True)


async def test_a_payload_exactly_as_long_as_a_list_shows_is_not_cut(
    stores: Callable[..., Store],
) -> None:
    jobs = job.Jobs(kinds=[Note], store=stores(max_payload=10_000))
    exact = await jobs.push(Note("é" * (LISTED_CHARS - OVERHEAD)))
    (row,) = (await jobs.find(job.Where(state="queued"))).rows
    assert (row.id, row.payload, row.payload_cut) == (
        exact, {"text": "é" * (LISTED_CHARS - OVERHEAD)}, False
    )  # fmt: skip


def spy(store: Store, name: str, seen: list[int]) -> None:
    """Record how many characters of each payload the store's list call `name` answers."""
    call: Callable[..., Awaitable[list[Any]]] = getattr(store, name)

    async def spied(*args: object) -> list[Any]:
        answer = await call(*args)
        seen.extend(chars(view.payload) for view in answer)
        return answer

    setattr(store, name, spied)


async def test_the_dashboard_lists_read_only_the_start_of_each_payload(
    stores: Callable[..., Store], t: int
) -> None:
    from nilo_job.dashboard import dashboard_app

    store = stores(max_payload=3_000_000)
    jobs = job.Jobs(kinds=[Note], store=store)
    big = await jobs.push(Note(TEXT), at=t)
    seen: list[int] = []
    spy(store, "find", seen)
    spy(store, "dead_ones", seen)
    async with client(dashboard_app(jobs, payloads=True)) as http:
        overview = await http.get("/")
        rows = await http.get("/rows", params={"state": "queued"})
    assert (overview.status_code, rows.status_code) == (200, 200)
    assert seen
    assert max(seen) == LISTED_CHARS + 1
    for page in (overview.text, rows.text):
        found = re.search(rf'<tr id="row-{big}">.*?<td class="payload">(.*?)</td>', page)
        assert found is not None
        shown = html.unescape(re.sub(r"<[^>]+>", "", found.group(1)))
        assert shown.startswith('{"text":"éé')
        assert shown.endswith("é…")
        assert len(shown) <= 161
