"""Pushing: when a row is due, unique keys, the `within` window, payloads that round-trip (and
those refused before anything is written), Memory's bounds, and push_in through your transaction.
"""

import asyncio
import enum
import sqlite3
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest

import nilo_job as job
from nilo_job.store.contract import Store

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


notes: list[tuple[int, int]] = []
"""(row id, run_at) of every Note run, in order."""


@dataclass
class Note:
    nilo_job = "note"
    retry = job.Retry.NONE

    text: str = "hi"

    def run(self, tick: job.Tick) -> None:
        notes.append((tick.id, tick.run_at))


@pytest.fixture(autouse=True)
def _forget_runs() -> None:
    notes.clear()


@dataclass
class Other:
    nilo_job = "other"
    retry = job.Retry.NONE

    text: str = "hi"

    def run(self) -> None:
        pass


def queue(store: Store, *kinds: type) -> job.Jobs:
    return job.Jobs(kinds=list(kinds or (Note,)), store=store)


# ---------------------------------------------------------------------------------- when


async def test_at_in_microseconds_is_due_at_that_microsecond_and_not_before(
    store: Store, t: int
) -> None:
    jobs = queue(store)
    row = await jobs.push(Note(), at=t + 5_000)
    assert await jobs.drain_at(t + 4_999) == 0
    assert await jobs.drain_at(t + 5_000) == 1
    assert notes == [(row, t + 5_000)]


async def test_at_as_an_aware_datetime_is_the_same_instant_in_any_zone(
    store: Store, t: int
) -> None:
    jobs = queue(store)
    moment = EPOCH + timedelta(microseconds=t)
    jakarta = moment.astimezone(timezone(timedelta(hours=7)))
    first = await jobs.push(Note(), at=moment)
    second = await jobs.push(Note(), at=jakarta)
    assert await jobs.drain_at(t - 1) == 0
    assert await jobs.drain_at(t) == 2
    assert sorted(notes) == [(first, t), (second, t)]


async def test_a_naive_datetime_is_refused_and_nothing_is_written(store: Store) -> None:
    jobs = queue(store)
    with pytest.raises(job.Refusal, match="naive"):
        await jobs.push(Note(), at=datetime(2030, 1, 1))
    assert await jobs.stats() == (0, 0, 0)


async def test_after_ms_and_at_together_are_refused(store: Store, t: int) -> None:
    jobs = queue(store)
    with pytest.raises(job.Refusal, match="not both"):
        await jobs.push(Note(), after_ms=1_000, at=t)
    assert await jobs.stats() == (0, 0, 0)


@pytest.mark.parametrize("after_ms", [-1, 1.5, "10", True])
async def test_after_ms_that_is_not_a_count_of_milliseconds_is_refused(
    store: Store, after_ms: object
) -> None:
    jobs = queue(store)
    with pytest.raises(job.Refusal, match="after_ms"):
        await jobs.push(Note(), after_ms=after_ms)  # type: ignore[arg-type]
    assert await jobs.stats() == (0, 0, 0)


@pytest.mark.parametrize("at", [1.5, "2030-01-01", True])
async def test_at_that_is_not_microseconds_or_a_datetime_is_refused(
    store: Store, at: object
) -> None:
    jobs = queue(store)
    with pytest.raises(job.Refusal, match="at="):
        await jobs.push(Note(), at=at)  # type: ignore[arg-type]
    assert await jobs.stats() == (0, 0, 0)


async def test_after_ms_counts_from_the_push(store: Store) -> None:
    jobs = queue(store)
    before = job.now_us()
    await jobs.push(Note(), after_ms=10_000)
    after = job.now_us()
    assert await jobs.drain_at(before + 10_000_000 - 1) == 0
    assert await jobs.drain_at(after + 10_000_000) == 1
    ((_, run_at),) = notes
    assert before + 10_000_000 <= run_at <= after + 10_000_000


async def test_a_push_without_a_time_is_due_now(store: Store) -> None:
    jobs = queue(store)
    before = job.now_us()
    await jobs.push(Note())
    after = job.now_us()
    assert await jobs.drain_at(before - 1) == 0
    assert await jobs.drain_at(after) == 1


# -------------------------------------------------------------------------------- unique


async def test_a_second_push_of_a_queued_key_is_none(store: Store) -> None:
    jobs = queue(store)
    first = await jobs.push(Note(), unique="remind:7")
    assert isinstance(first, int)
    assert await jobs.push(Note(text="again"), unique="remind:7") is None
    assert await jobs.stats() == (1, 0, 0)
    assert isinstance(await jobs.push(Note(), unique="remind:8"), int)


async def test_a_key_is_held_while_its_row_runs(store: Store, t: int) -> None:
    answers: list[int | None] = []

    @dataclass
    class Once:
        nilo_job = "once"
        retry = job.Retry.NONE

        async def run(self, jobs: job.Jobs) -> None:
            answers.append(await jobs.push(Once(), unique="k", at=t))

    jobs = queue(store, Once)
    await jobs.push(Once(), unique="k")
    assert await jobs.drain_at(t) == 1
    assert answers == [None]
    assert await jobs.stats() == (0, 0, 0)
    assert isinstance(await jobs.push(Once(), unique="k"), int)


async def test_a_key_is_held_while_its_row_waits_for_a_retry(store: Store, t: int) -> None:
    @dataclass
    class Flaky:
        nilo_job = "flaky"
        retry = job.Retry(times=1, backoff=job.Fixed(ms=60_000))

        def run(self, tick: job.Tick) -> None:
            if tick.attempts == 1:
                raise ConnectionError("down")

    jobs = queue(store, Flaky)
    await jobs.push(Flaky(), unique="k", at=t)
    assert await jobs.drain_at(t) == 1
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.push(Flaky(), unique="k") is None
    assert await jobs.drain_at(t + 60_000_000) == 1
    assert await jobs.stats() == (0, 0, 0)
    assert isinstance(await jobs.push(Flaky(), unique="k"), int)


async def test_a_key_is_free_again_once_its_row_is_dead(store: Store, t: int) -> None:
    @dataclass
    class Doomed:
        nilo_job = "doomed"
        retry = job.Retry.NONE

        def run(self) -> None:
            raise RuntimeError("no")

    jobs = queue(store, Doomed)
    await jobs.push(Doomed(), unique="k")
    assert await jobs.drain_at(t) == 1
    assert await jobs.stats() == (0, 0, 1)
    assert isinstance(await jobs.push(Doomed(), unique="k"), int)
    assert await jobs.stats() == (1, 0, 1)


async def test_a_key_is_free_again_once_its_row_is_cancelled(store: Store) -> None:
    jobs = queue(store)
    row = await jobs.push(Note(), unique="k")
    assert row is not None
    assert await jobs.cancel(row) is True
    assert isinstance(await jobs.push(Note(), unique="k"), int)


async def test_different_kinds_may_share_a_key(store: Store) -> None:
    jobs = queue(store, Note, Other)
    assert isinstance(await jobs.push(Note(), unique="k"), int)
    assert isinstance(await jobs.push(Other(), unique="k"), int)
    assert await jobs.push(Other(), unique="k") is None
    assert await jobs.stats() == (2, 0, 0)


@pytest.mark.parametrize("key", ["k" * 64, "é" * 32, "€" * 21 + "x"])
async def test_a_key_of_64_bytes_is_taken(store: Store, key: str) -> None:
    assert len(key.encode()) == 64
    jobs = queue(store)
    assert isinstance(await jobs.push(Note(), unique=key), int)
    assert await jobs.push(Note(), unique=key) is None


@pytest.mark.parametrize("key", ["k" * 65, "é" * 33, "€" * 22])
async def test_a_key_over_64_bytes_is_refused_and_nothing_is_written(
    store: Store, key: str
) -> None:
    # "é" * 33 is 33 characters: the bound is in UTF-8 bytes.
    jobs = queue(store)
    with pytest.raises(job.Refusal, match=rf"{len(key.encode())} bytes"):
        await jobs.push(Note(), unique=key)
    assert await jobs.stats() == (0, 0, 0)


async def test_an_empty_key_is_refused(store: Store) -> None:
    jobs = queue(store)
    with pytest.raises(job.Refusal, match="unique"):
        await jobs.push(Note(), unique="")
    assert await jobs.stats() == (0, 0, 0)


# -------------------------------------------------------------------------------- within


async def test_within_answers_a_second_push_without_reaching_the_store(
    store: Store, t: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    push = store.push

    async def counting_push(rows):  # type: ignore[no-untyped-def]
        writes.append(len(rows))
        return await push(rows)

    monkeypatch.setattr(store, "push", counting_push)
    jobs = queue(store)
    space = job.MemorySpace(ttl_s=30)
    assert isinstance(await jobs.push(Note(), unique="k", within=space), int)
    assert await jobs.push(Note(), unique="k", within=space) is None
    assert writes == [1]
    assert await jobs.stats() == (1, 0, 0)
    # The row is done and its key gone from the table; the window still remembers it.
    assert await jobs.drain_at(t) == 1
    assert await jobs.stats() == (0, 0, 0)
    assert await jobs.push(Note(), unique="k", within=space) is None
    assert writes == [1]
    assert await jobs.stats() == (0, 0, 0)
    # Another key has a window of its own.
    assert isinstance(await jobs.push(Note(), unique="j", within=space), int)
    assert writes == [1, 1]


async def test_within_forgets_the_key_when_its_window_ends(store: Store) -> None:
    now = [1_000.0]
    space = job.MemorySpace(ttl_s=30, clock=lambda: now[0])
    jobs = queue(store)
    assert isinstance(await jobs.push(Note(), unique="k", within=space), int)
    assert await jobs.drain() == 1
    now[0] += 29.999
    assert await jobs.push(Note(), unique="k", within=space) is None
    now[0] = 1_030.0
    assert isinstance(await jobs.push(Note(), unique="k", within=space), int)


async def test_within_without_unique_is_refused(store: Store) -> None:
    jobs = queue(store)
    with pytest.raises(job.Refusal, match="unique"):
        await jobs.push(Note(), within=job.MemorySpace(ttl_s=30))
    assert await jobs.stats() == (0, 0, 0)


async def test_a_push_the_store_refuses_leaves_no_mark_in_the_window() -> None:
    note = len(b'{"text":"hi"}')
    jobs = job.Jobs(kinds=[Note], store=job.Memory(bytes=note))
    space = job.MemorySpace(ttl_s=30)
    assert isinstance(await jobs.push(Note()), int)
    with pytest.raises(job.QueueFull):
        await jobs.push(Note(), unique="k", within=space)
    assert await jobs.drain() == 1
    assert isinstance(await jobs.push(Note(), unique="k", within=space), int)


async def test_a_refused_push_leaves_no_mark_in_the_window(store: Store) -> None:
    jobs = queue(store)
    space = job.MemorySpace(ttl_s=30)
    with pytest.raises(job.Refusal):
        await jobs.push(Note(text=5), unique="k", within=space)  # type: ignore[arg-type]
    assert isinstance(await jobs.push(Note(), unique="k", within=space), int)


# ------------------------------------------------------------------------------- payload


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Address:
    street: str
    zip: str


@dataclass
class Everything:
    nilo_job = "everything"
    retry = job.Retry.NONE

    when: datetime
    day: date
    uid: uuid.UUID
    amount: Decimal
    blob: bytes
    color: Color
    level: Level
    maybe: int | None
    nothing: str | None
    items: list[int]
    pair: tuple[str, int]
    mapping: dict[str, float]
    address: Address
    addresses: list[Address]
    flag: bool
    ratio: float
    text: str
    big: int

    def run(self) -> None:
        received.append(self)


received: list[Everything] = []


async def test_a_payload_comes_back_to_run_equal_to_what_was_pushed(store: Store) -> None:
    received.clear()
    value = Everything(
        when=datetime(2030, 5, 6, 7, 8, 9, 123_456, tzinfo=timezone(timedelta(hours=7))),
        day=date(2030, 2, 28),
        uid=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        amount=Decimal("12.30"),
        blob=b"\x00\xffbytes\n",
        color=Color.BLUE,
        level=Level.HIGH,
        maybe=3,
        nothing=None,
        items=[1, 2, 3],
        pair=("a", 1),
        mapping={"ä": 1.5, "b": -0.25},
        address=Address("Jalan 1", "10110"),
        addresses=[Address("a", "1"), Address("b", "2")],
        flag=True,
        ratio=0.1,
        text='é☃ 😀 "quoted"\n',
        big=2**63 - 1,
    )
    jobs = queue(store, Everything)
    await jobs.push(value)
    assert await jobs.drain() == 1
    (got,) = received
    assert got == value
    assert got is not value
    assert type(got.uid) is uuid.UUID
    assert str(got.amount) == "12.30"
    assert got.when.utcoffset() == timedelta(hours=7)
    assert type(got.day) is date
    assert got.color is Color.BLUE
    assert got.level is Level.HIGH
    assert type(got.pair) is tuple
    assert type(got.address) is Address
    assert type(got.blob) is bytes


async def test_a_payload_is_copied_at_push(store: Store) -> None:
    @dataclass
    class Batch:
        nilo_job = "batch"
        retry = job.Retry.NONE

        ids: list[int]

        def run(self) -> None:
            seen.append(list(self.ids))

    seen: list[list[int]] = []
    jobs = queue(store, Batch)
    ids = [1, 2]
    await jobs.push(Batch(ids=ids))
    ids.append(3)
    assert await jobs.drain() == 1
    assert seen == [[1, 2]]


@dataclass
class Reading:
    nilo_job = "reading"
    retry = job.Retry.NONE

    value: float
    history: list[float] = field(default_factory=list)

    def run(self) -> None:
        pass


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
async def test_a_float_that_is_not_finite_is_refused_naming_the_field(
    store: Store, bad: float
) -> None:
    jobs = queue(store, Reading)
    with pytest.raises(job.Refusal, match="not finite") as caught:
        await jobs.push(Reading(value=bad))
    assert "Reading.value" in str(caught.value)
    with pytest.raises(job.Refusal, match="not finite") as caught:
        await jobs.push(Reading(value=1.0, history=[0.5, bad]))
    assert "Reading.history" in str(caught.value)
    assert await jobs.stats() == (0, 0, 0)


async def test_a_value_of_the_wrong_type_is_refused_naming_the_field(store: Store) -> None:
    @dataclass
    class SendWelcome:
        nilo_job = "send-welcome"
        retry = job.Retry.NONE

        user_id: int
        email: str

        def run(self) -> None:
            pass

    jobs = queue(store, SendWelcome)
    with pytest.raises(job.Refusal, match="nothing was pushed") as caught:
        await jobs.push(SendWelcome(user_id="7", email="a@b.c"))  # type: ignore[arg-type]
    assert "SendWelcome.user_id" in str(caught.value)
    assert "int" in str(caught.value)
    assert "str" in str(caught.value)
    with pytest.raises(job.Refusal) as caught:
        await jobs.push(SendWelcome(user_id=7, email=None))  # type: ignore[arg-type]
    assert "SendWelcome.email" in str(caught.value)
    assert await jobs.stats() == (0, 0, 0)


async def test_a_value_of_a_class_that_is_not_a_kind_is_refused(store: Store) -> None:
    jobs = queue(store)
    with pytest.raises(job.Refusal, match="Other is not a kind of this queue"):
        await jobs.push(Other())
    with pytest.raises(job.Refusal) as caught:
        await jobs.push({"text": "hi"})
    assert str(caught.value) == (
        "push takes a value of one of this queue's kinds (Note), not a dict: build it first, "
        "like push(Note(...)) with its fields"
    )
    with pytest.raises(job.Refusal) as caught:
        await jobs.push(Note)
    assert str(caught.value) == (
        "push takes a Note value, not the class itself: push(Note(...)) with its fields"
    )
    with pytest.raises(job.Refusal) as caught:
        await jobs.push_many([Note(text="a"), {"text": "b"}])
    assert "not a dict" in str(caught.value)
    assert await jobs.stats() == (0, 0, 0)


@dataclass
class Loose:
    nilo_job = "loose"
    retry = job.Retry.NONE

    extra: Any
    items: list[Any]
    by_name: dict[str, Any]

    def run(self) -> None:
        pass


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (Loose(object(), [], {}), "Loose.extra holds an object"),
        (Loose(1, [1, 2, object()], {}), "Loose.items[2] holds an object"),
        (Loose(1, [], {"a": [1, {"b": object()}]}), "Loose.by_name['a'][1]['b'] holds an object"),
        (Loose(1, [], {"a": Path("/x")}), "Loose.by_name['a'] holds a PosixPath"),
    ],
)
async def test_a_value_json_cannot_write_is_refused_naming_where_it_is(
    store: Store, value: Loose, path: str
) -> None:
    jobs = queue(store, Loose)
    with pytest.raises(job.Refusal) as caught:
        await jobs.push(value)
    assert str(caught.value).startswith(f"{path}, which cannot be written as JSON (")
    assert str(caught.value).endswith(
        "): give it a value JSON can carry (text, numbers, lists, dicts, or a dataclass of "
        "them), or convert it first; nothing was pushed"
    )
    assert await jobs.stats() == (0, 0, 0)


# -------------------------------------------------------------------------------- Memory


async def test_a_full_memory_raises_queue_full_and_writes_nothing() -> None:
    size = len(b'{"text":"hi"}')
    store = job.Memory(bytes=2 * size)
    jobs = queue(store)
    await jobs.push(Note())
    await jobs.push(Note())
    with pytest.raises(job.QueueFull) as caught:
        await jobs.push(Note())
    assert isinstance(caught.value, job.JobError)
    assert await jobs.stats() == (2, 0, 0)
    # A finished row gives its room back.
    assert await jobs.run_one() is True
    assert isinstance(await jobs.push(Note()), int)
    assert await jobs.stats() == (2, 0, 0)


async def test_a_payload_over_max_payload_raises_payload_too_large_and_writes_nothing() -> None:
    jobs = queue(job.Memory(bytes=1 << 20, max_payload=20))
    assert len(b'{"text":"xxxxxxxxx"}') == 20
    assert isinstance(await jobs.push(Note(text="x" * 9)), int)
    with pytest.raises(job.PayloadTooLarge) as caught:
        await jobs.push(Note(text="x" * 10))
    assert isinstance(caught.value, job.JobError)
    assert await jobs.stats() == (1, 0, 0)


async def test_memory_has_a_4_kib_max_payload_by_default() -> None:
    jobs = queue(job.Memory())
    overhead = len(b'{"text":""}')
    assert isinstance(await jobs.push(Note(text="x" * (4096 - overhead))), int)
    with pytest.raises(job.PayloadTooLarge):
        await jobs.push(Note(text="x" * (4097 - overhead)))


async def test_push_in_on_memory_is_refused() -> None:
    jobs = queue(job.Memory())
    with pytest.raises(job.Refusal, match=r"job\.Memory"):
        await jobs.push_in(object(), Note())
    assert await jobs.stats() == (0, 0, 0)


# ------------------------------------------------------------------------ SQLite push_in


async def test_push_in_with_within_is_refused_saying_why(table: Store, tmp_path: Path) -> None:
    jobs = queue(table)
    space = job.MemorySpace(ttl_s=30)
    conn = sqlite3.connect(tmp_path / "q.db")
    try:
        said = (
            "push_in cannot take within=...: the row commits or rolls back with your "
            "transaction, and a Space cannot roll back with it"
        )
        with pytest.raises(job.Refusal) as refused:
            await jobs.push_in(conn, Note(), unique="k", within=space)
        assert str(refused.value).startswith(said)
        with pytest.raises(job.Refusal) as refused:
            jobs.sync.push_in(conn, Note(), unique="k", within=space)
        assert str(refused.value).startswith(said)
        conn.commit()
    finally:
        conn.close()
    assert await jobs.stats() == (0, 0, 0)
    assert await space.get("within:note:k") is None


async def test_push_in_rolled_back_leaves_no_row(table: Store, tmp_path: Path, t: int) -> None:
    jobs = queue(table)
    conn = sqlite3.connect(tmp_path / "q.db")
    try:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)")
        conn.execute("INSERT INTO users (email) VALUES ('a@b.c')")
        row = await jobs.push_in(conn, Note())
        assert isinstance(row, int)
        conn.rollback()
    finally:
        conn.close()
    assert await jobs.stats() == (0, 0, 0)
    assert await jobs.drain_at(t) == 0
    assert notes == []
    assert await jobs.status(row) is None


async def test_push_in_committed_runs_once(table: Store, tmp_path: Path, t: int) -> None:
    jobs = queue(table)
    conn = sqlite3.connect(tmp_path / "q.db")
    try:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)")
        conn.execute("INSERT INTO users (email) VALUES ('a@b.c')")
        row = await jobs.push_in(conn, Note(), at=t)
        conn.commit()
    finally:
        conn.close()
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.drain_at(t) == 1
    assert await jobs.drain_at(t + 1_000_000) == 0
    assert notes == [(row, t)]


async def test_push_in_through_an_explicit_begin_in_autocommit_mode(
    table: Store, tmp_path: Path, t: int
) -> None:
    jobs = queue(table)
    conn = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    try:
        conn.execute("BEGIN")
        await jobs.push_in(conn, Note())
        conn.execute("ROLLBACK")
        conn.execute("BEGIN")
        await jobs.push_in(conn, Note())
        conn.execute("COMMIT")
    finally:
        conn.close()
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.drain_at(t) == 1


async def test_push_in_honours_unique(table: Store, tmp_path: Path) -> None:
    jobs = queue(table)
    await jobs.push(Note(), unique="k")
    conn = sqlite3.connect(tmp_path / "q.db")
    try:
        assert await jobs.push_in(conn, Note(), unique="k") is None
        assert isinstance(await jobs.push_in(conn, Note(), unique="j"), int)
        conn.commit()
    finally:
        conn.close()
    assert await jobs.stats() == (2, 0, 0)


async def test_push_in_with_a_connection_in_autocommit_and_no_transaction_is_refused(
    table: Store, tmp_path: Path
) -> None:
    jobs = queue(table)
    conn = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    try:
        with pytest.raises(job.Refusal, match="no open transaction"):
            await jobs.push_in(conn, Note())
    finally:
        conn.close()
    assert await jobs.stats() == (0, 0, 0)


async def test_push_in_on_a_connection_to_another_file_is_refused(
    table: Store, tmp_path: Path
) -> None:
    jobs = queue(table)
    conn = sqlite3.connect(tmp_path / "elsewhere.db")
    try:
        with pytest.raises(job.Refusal, match=r"elsewhere\.db") as caught:
            await jobs.push_in(conn, Note())
        assert "q.db" in str(caught.value)
    finally:
        conn.close()
    assert await jobs.stats() == (0, 0, 0)


async def test_push_in_on_something_else_lists_what_is_accepted(table: Store) -> None:
    jobs = queue(table)
    for tx in (object(), "sqlite:///q.db", None):
        with pytest.raises(job.Refusal) as caught:
            await jobs.push_in(tx, Note())
        message = str(caught.value)
        assert "sqlite3.Connection" in message
        assert "psycopg" in message
        assert "SQLAlchemy" in message
    assert await jobs.stats() == (0, 0, 0)


async def test_push_in_takes_no_within(table: Store, tmp_path: Path) -> None:
    jobs = queue(table)
    conn = sqlite3.connect(tmp_path / "q.db")
    try:
        with pytest.raises(TypeError, match="within"):
            await jobs.push_in(  # type: ignore[call-arg]
                conn, Note(), unique="k", within=job.MemorySpace(ttl_s=30)
            )
        conn.rollback()
    finally:
        conn.close()
    assert await jobs.stats() == (0, 0, 0)


async def test_push_in_refuses_bad_options_before_writing(table: Store, tmp_path: Path) -> None:
    jobs = queue(table)
    conn = sqlite3.connect(tmp_path / "q.db")
    try:
        with pytest.raises(job.Refusal, match="not both"):
            await jobs.push_in(conn, Note(), after_ms=1, at=1)
        with pytest.raises(job.Refusal, match="65 bytes"):
            await jobs.push_in(conn, Note(), unique="k" * 65)
        assert conn.in_transaction is False
    finally:
        conn.close()
    assert await jobs.stats() == (0, 0, 0)


# ------------------------------------------------------------------------------- edges


async def test_ten_pushes_of_one_key_at_once_make_one_row(store: Store) -> None:
    jobs = queue(store)
    answers = await asyncio.gather(*(jobs.push(Note(), unique="k") for _ in range(10)))
    assert sum(isinstance(answer, int) for answer in answers) == 1
    assert answers.count(None) == 9
    assert await jobs.stats() == (1, 0, 0)


@pytest.mark.parametrize("when", [{"at": 2**63}, {"at": -(2**63) - 1}, {"after_ms": 2**62}])
async def test_a_time_no_store_can_hold_is_refused_and_nothing_is_written(
    store: Store, when: dict[str, int]
) -> None:
    jobs = queue(store)
    with pytest.raises(job.Refusal):
        await jobs.push(Note(), **when)  # type: ignore[arg-type]
    assert await jobs.stats() == (0, 0, 0)


class Ping(msgspec.Struct):
    nilo_job: ClassVar[str] = "ping"
    retry: ClassVar[job.Retry] = job.Retry.NONE

    host: str
    ports: list[int]

    def run(self) -> None:
        pings.append(self)


pings: list[Ping] = []


async def test_a_msgspec_struct_payload_round_trips(store: Store) -> None:
    pings.clear()
    jobs = queue(store, Ping)
    await jobs.push(Ping(host="example.org", ports=[80, 443]))
    assert await jobs.drain() == 1
    assert pings == [Ping(host="example.org", ports=[80, 443])]


async def test_a_push_to_a_table_never_created_is_store_unavailable(tmp_path: Path) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/fresh.db")
    try:
        jobs = queue(table)
        with pytest.raises(job.StoreUnavailable, match="there is no SQLite database at "):
            await jobs.push(Note())
        conn = sqlite3.connect(tmp_path / "fresh.db")  # the file, without the table
        try:
            with pytest.raises(job.StoreUnavailable, match="create_missing"):
                await jobs.push_in(conn, Note())
        finally:
            conn.close()
    finally:
        await table.close()
