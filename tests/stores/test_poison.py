"""Nothing stops the queue: a failure whose text a store cannot keep, a row some other program
wrote, a payload too deep to read, an option a driver would choke on. Each bad row ends on its
own, with a named error, and every other row runs; each bad input is refused the same way on
every store, before anything is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import decimal
import functools
import os
import sqlite3
import threading
from dataclasses import dataclass
from typing import Any

import pytest

import nilo_job as job
from nilo_job._worker.outcome import ESCAPED
from nilo_job.store.contract import NewRow, Store

# ------------------------------------------------------------------ failures no store can keep


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def failure(code: str) -> BaseException:
    """The exception each test row raises."""
    return {
        "surrogate": FileNotFoundError(os.fsdecode(b"caf\xe9.txt")),
        "nul": ValueError("a\x00b"),
        "both": ValueError("\x00" + os.fsdecode(b"\xff")),
        "key": KeyError("\x00" + os.fsdecode(b"\xff")),  # its str is the key's repr: escaped
        "huge": ValueError("x" * 1_000_000),
        "unprintable": Unprintable(),
        "bytes": OSError(b"\xff\xfe"),
        "accent": ValueError("café au lait"),
    }[code]


@dataclass
class Fails:
    nilo_job = "fails"
    retry = job.Retry.NONE

    code: str

    def run(self) -> None:
        failing.set()
        raise failure(self.code)


failing = threading.Event()


@dataclass
class FailsTwice:
    nilo_job = "fails-twice"
    retry = job.Retry(times=1)

    code: str

    def run(self) -> None:
        raise failure(self.code)


@dataclass
class Fine:
    nilo_job = "fine"
    retry = job.Retry.NONE

    n: int

    def run(self) -> None:
        fine.append(self.n)
        ran_fine.set()


fine: list[int] = []
ran_fine = threading.Event()

CODES = ["surrogate", "nul", "both", "key", "huge", "unprintable", "bytes"]
EXPECTED = {
    "surrogate": ("FileNotFoundError", "caf\\udce9.txt" + ESCAPED),
    "nul": ("ValueError", "a\\x00b" + ESCAPED),
    "both": ("ValueError", "\\x00\\udcff" + ESCAPED),
    "key": ("KeyError", "'\\x00\\udcff'"),
    "huge": ("ValueError", "x" * 1_999 + "…"),
    "unprintable": ("Unprintable", "<Unprintable: its message could not be read>"),
    "bytes": ("OSError", "b'\\xff\\xfe'"),
}


@pytest.mark.parametrize("kind", [Fails, FailsTwice])
async def test_a_failure_whose_text_no_store_can_keep_still_ends_its_row(
    store: Store, t: int, kind: type
) -> None:
    jobs = job.Jobs(kinds=[Fails, FailsTwice, Fine], store=store)
    fine.clear()
    ids = {code: await jobs.push(kind(code)) for code in CODES}
    await jobs.push(Fine(1))
    runs = 2 if kind is FailsTwice else 1
    assert await jobs.drain_at(t) == len(CODES) * runs + 1  # never stopped by a bad end
    assert fine == [1]
    assert await jobs.stats() == (0, 0, len(CODES))
    dead = {row.id: row for row in await jobs.dead_ones()}
    for code, row_id in ids.items():
        assert (dead[row_id].error, dead[row_id].message) == EXPECTED[code], code
        assert dead[row_id].attempts == runs
        trace = dead[row_id].traceback
        assert trace.startswith("Traceback (most recent call last):\n")
        assert "\x00" not in trace
        trace.encode()  # valid UTF-8
        assert len(trace) <= 10_000 + len(ESCAPED)
    assert await jobs.drain_at(t + 3_600_000_000) == 0  # nothing left running to come back


async def test_under_serve_a_failure_no_store_can_keep_ends_its_row(store: Store) -> None:
    jobs = job.Jobs(kinds=[Fails, Fine], store=store, poll_ms=50)
    fine.clear()
    ran_fine.clear()
    failing.clear()
    bad = await jobs.push(Fails("both"))
    async with jobs.serving(grace_ms=5_000):
        await jobs.push(Fine(2))
        assert await asyncio.to_thread(ran_fine.wait, 20)
        assert await asyncio.to_thread(failing.wait, 20)
    # Leaving the block waited for every running row's end to be written.
    assert fine == [2]
    assert await jobs.stats() == (0, 0, 1)
    (dead,) = await jobs.dead_ones()
    assert (dead.id, dead.error, dead.message) == (bad, "ValueError", EXPECTED["both"][1])


# ---------------------------------------------------------------- rows other programs wrote


@dataclass
class Shaped:
    nilo_job = "shaped"
    retry = job.Retry(times=3)

    n: int

    def run(self) -> None:
        shaped.append(self.n)


shaped: list[int] = []


def foreign(path: str, rows: list[tuple[str, Any, Any, Any, Any]]) -> None:
    """Rows written straight into the file, as another program would: (state, payload,
    run_at, lease_until, unique_key), each an SQL expression."""
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        for state, payload, run_at, lease, key in rows:
            conn.execute(
                "INSERT INTO nilo_jobs (kind, payload, state, run_at, lease_until, attempts, "
                f"unique_key) VALUES ('shaped', {payload}, '{state}', {run_at}, {lease}, "
                f"{1 if state == 'running' else 0}, {key})"
            )
    conn.close()


async def test_one_foreign_sqlite_row_never_stops_the_queue(tmp_path: Any, t: int) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    await table.create_missing()
    jobs = job.Jobs(kinds=[Shaped], store=table)
    shaped.clear()
    try:
        await jobs.push(Shaped(1), at=t - 10)
        foreign(
            f"{tmp_path}/q.db",
            [
                ("queued", "x'7b7d'", t - 9, "NULL", "NULL"),  # a BLOB (it reads "{}")
                ("queued", "CAST(x'7b226e223aff7d' AS TEXT)", t - 8, "NULL", "NULL"),  # not UTF-8
                ("queued", "'{\"n\":3}'", t - 7, "NULL", "CAST(x'6bff' AS TEXT)"),  # its key
                ("running", "'{\"n\":4}'", "'soon'", t - 6, "NULL"),  # its run_at is text
                ("queued", "'[[[[[['", t - 5, "NULL", "NULL"),  # not JSON
            ],
        )
        await jobs.push(Shaped(6), at=t - 4)
        assert await jobs.drain_at(t) == 3  # 1, 3 and 6 run; the rest die without running
        assert sorted(shaped) == [1, 3, 6]
        assert await jobs.stats() == (0, 0, 4)
        dead = sorted(await jobs.dead_ones(), key=lambda row: row.id)
        assert [row.error for row in dead] == ["BadPayload"] * 4
        assert dead[0].message.startswith(
            "the store cannot read it: its payload is stored as a BLOB, not text"
        )
        assert dead[1].message.startswith("the store cannot read it: its payload is not UTF-8")
        assert dead[2].message.startswith(
            "the store cannot read it: run_at is not a whole number ('soon')"
        )
        assert dead[3].message.startswith(
            "its payload no longer fits Shaped (ValidationError: Expected `object`, got `array`)"
        )
        assert all(row.message.endswith("(the row did not run)") for row in dead)
        assert [row.payload for row in dead[:2]] == [{}, '{"n":\ufffd}']
        views = sorted(await table.rows("dead", 10), key=lambda row: row.id)
        assert [row.unreadable for row in views] == [  # for the dashboard and the commands
            "its payload is stored as a BLOB, not text",
            "its payload is not UTF-8 text",
            "run_at is not a whole number ('soon')",
            None,  # text, and JSON of the wrong shape: readable as what it is
        ]
    finally:
        await table.close()


async def test_foreign_rows_are_read_for_an_operator_as_well_as_they_can_be(
    tmp_path: Any, t: int
) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    await table.create_missing()
    try:
        foreign(
            f"{tmp_path}/q.db",
            [
                ("queued", "x'7b7d'", "'tomorrow'", "NULL", "CAST(x'6bff' AS TEXT)"),
                ("dead", "CAST(x'ff' AS TEXT)", t, "NULL", "NULL"),
            ],
        )
        (queued,) = await table.rows("queued", 10)
        assert queued.unreadable == (
            "its payload is stored as a BLOB, not text; run_at is not a whole number "
            "('tomorrow'); unique_key is not UTF-8 text"
        )
        assert (queued.payload, queued.run_at, queued.unique_key) == (b"{}", 0, "k\ufffd")
        (dead,) = await table.dead_ones(10)
        assert dead.payload == b"\xff"
        assert job.Jobs(kinds=[Shaped], store=table)  # a queue over it builds
        listed = await job.Jobs(kinds=[Shaped], store=table).dead_ones()
        assert listed[0].payload == "\ufffd"
    finally:
        await table.close()


# ------------------------------------------------------------------ payloads too deep to read


@dataclass
class Deep:
    nilo_job = "deep"
    retry = job.Retry.NONE

    tree: Any

    def run(self) -> None:
        deep.append(1)


deep: list[int] = []


def nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels - 2):  # the payload's own object and its field are two levels
        value = [value]
    return value


async def test_a_payload_deeper_than_a_worker_can_read_is_refused_at_push(store: Store) -> None:
    jobs = job.Jobs(kinds=[Deep], store=store)
    assert await jobs.push(Deep(nested(256))) is not None
    with pytest.raises(job.Refusal, match=r"Deep nests lists and dicts too deeply \(257 levels\)"):
        await jobs.push(Deep(nested(257)))
    text = "[" * 300 + "]" * 300  # brackets inside a string are text, not nesting
    assert await jobs.push(Deep(text)) is not None
    assert await jobs.stats() == (2, 0, 0)


async def test_a_row_too_deep_to_read_dies_as_bad_payload_and_the_next_runs(
    store: Store, t: int
) -> None:
    # Deeper than any supported Python reads: 3.13 counts the decoder's nesting against a C
    # recursion limit of its own (10,000 levels), not the interpreter's 1,000. That is 24 kB, so
    # a Memory that takes payloads that big.
    payload = b'{"tree":' + b"[" * 12_000 + b"]" * 12_000 + b"}"
    if isinstance(store, job.Memory):
        store = job.Memory(max_payload=len(payload))
    jobs = job.Jobs(kinds=[Deep], store=store)
    deep.clear()
    (bad,) = await store.push([NewRow("deep", payload, t - 1)])  # pushed by another program
    await jobs.push(Deep([1]), at=t)
    assert await jobs.drain_at(t) == 1
    assert deep == [1]
    (dead,) = await jobs.dead_ones()
    assert (dead.id, dead.error) == (bad, "BadPayload")
    assert dead.message.startswith("its payload no longer fits Deep (RecursionError: ")
    assert (dead.payload, dead.payload_cut) == (payload.decode()[:4096], True)  # its start
    row = await jobs.row(bad)
    assert row is not None
    assert row.payload == payload.decode()  # whole, shown as the text it is


# ------------------------------------------------------------- bad options, on every store


@dataclass
class Keyed:
    nilo_job = "keyed"
    retry = job.Retry.NONE

    amount: decimal.Decimal = decimal.Decimal(0)

    def run(self) -> None:
        pass


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("a\x00b", "it holds a NUL character, which PostgreSQL cannot keep in text"),
        (os.fsdecode(b"\xe9"), "which is not valid Unicode (a lone surrogate)"),
        ("k" * 65, "it is 65 bytes, and at most 64 bytes are kept"),
    ],
)
async def test_a_key_no_store_can_keep_is_refused_alike_everywhere(
    store: Store, key: str, said: str
) -> None:
    jobs = job.Jobs(kinds=[Keyed], store=store)
    with pytest.raises(job.Refusal) as refused:
        await jobs.push(Keyed(), unique=key)
    assert said in str(refused.value)
    assert "Hash it or shorten it" in str(refused.value)
    assert await jobs.stats() == (0, 0, 0)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("sNaN", "Keyed holds a value that cannot be compared with what comes back from JSON"),
        ("NaN", "Keyed.amount would not come back from JSON as it was pushed"),
    ],
)
async def test_a_decimal_that_cannot_come_back_equal_is_refused(
    store: Store, value: str, said: str
) -> None:
    jobs = job.Jobs(kinds=[Keyed], store=store)
    with pytest.raises(job.Refusal) as refused:
        await jobs.push(Keyed(decimal.Decimal(value)))
    assert str(refused.value).startswith(said)
    assert str(refused.value).endswith("nothing was pushed")
    assert await jobs.stats() == (0, 0, 0)
    assert await jobs.push(Keyed(decimal.Decimal("Infinity"))) is not None


async def test_a_text_payload_that_is_not_unicode_is_refused(store: Store) -> None:
    jobs = job.Jobs(kinds=[Fails], store=store)
    with pytest.raises(job.Refusal, match=r"Fails holds text that is not valid Unicode"):
        await jobs.push(Fails(os.fsdecode(b"caf\xe9")))
    assert await jobs.push(Fails("a\x00b")) is not None  # NUL is JSON's \u0000: every store
    assert await jobs.stats() == (1, 0, 0)


@pytest.mark.parametrize("name", ["ka\x00nd", os.fsdecode(b"k\xe9")])
def test_a_kind_name_no_store_can_keep_is_refused_where_it_is_defined(name: str) -> None:
    @dataclass
    class Odd:
        nilo_job = name
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    with pytest.raises(job.Refusal, match=r"Odd.nilo_job cannot be a kind's name: it holds"):
        job.Jobs(kinds=[Odd], store=job.Memory())


async def test_a_database_without_the_table_says_so_alike_on_every_table(
    tmp_path: Any, pg_url: str
) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE nilo_jobs")
    sqlite3.connect(tmp_path / "empty.db").close()
    for url in (pg_url, f"sqlite:///{tmp_path}/empty.db"):
        table = job.Table(url)
        queue = job.Jobs(kinds=[Fine], store=table)
        try:
            for call in (
                functools.partial(queue.push, Fine(1)),
                queue.stats,
                queue.drain,
                functools.partial(queue.cancel, 1),
                queue.dead_ones,
                table.check,
            ):
                with pytest.raises(job.StoreUnavailable) as missing:
                    await call()
                assert str(missing.value).startswith("there is no nilo_jobs table in "), url
                assert "create it with `nilo-job migrate " in str(missing.value)
        finally:
            await table.close()


def test_a_postgresql_url_postgresql_cannot_read_is_refused_with_a_sentence() -> None:
    with pytest.raises(job.Refusal) as refused:
        job.Table("postgresql://me:secret@127.0.0.1:5432/x y")
    message = str(refused.value)
    assert message.startswith("job.Table('postgresql://me@127.0.0.1:5432/x y') is not a")
    assert "percent-encoded spaces (%20)" in message
    assert "secret" not in message
    assert repr(job.Table("postgresql://me:secret@db.example:6543/app")) == (
        "job.Table('postgresql://me@db.example:6543/app')"
    )


def test_a_postgresql_tables_repr_keeps_the_user_as_the_reference_shows() -> None:
    """The repr the reference shows is the one a table has: the user kept, the password and
    the query dropped, also for a user that needs percent-encoding."""
    from tests.helpers import ROOT

    reference = (ROOT / "docs" / "reference.md").read_text()
    shown = (
        "`job.Table('postgresql://app:s3cret@db:5432/shop?sslmode=require')` is shown as\n"
        "`job.Table('postgresql://app@db:5432/shop')`"
    )
    assert shown in reference
    cases = {
        "postgresql://app:s3cret@db:5432/shop?sslmode=require": "postgresql://app@db:5432/shop",
        "postgresql://db:5432/shop": "postgresql://db:5432/shop",
        "postgres://ops%40corp:Pw1%2F@db/shop": "postgresql://ops%40corp@db/shop",
        "postgresql:///shop?host=db&user=app&password=Pw2": "postgresql://app@db/shop",
    }
    for url, said in cases.items():
        assert repr(job.Table(url)) == f"job.Table('{said}')"
        assert "Pw" not in repr(job.Table(url))


async def test_an_end_a_store_refuses_is_written_again_with_its_text_in_ascii(t: int) -> None:
    store = job.Memory()
    real = store.finish

    async def picky(ends: Any) -> list[bool]:
        if any(not getattr(end, "detail", "").isascii() for end in ends):
            raise ValueError("this store keeps ASCII only")
        return await real(ends)

    store.finish = picky  # type: ignore[method-assign]
    jobs = job.Jobs(kinds=[Fails, Fine], store=store)
    fine.clear()
    bad = await jobs.push(Fails("accent"))
    await jobs.push(Fine(3))
    assert await jobs.drain_at(t) == 2
    assert fine == [3]
    (dead,) = await jobs.dead_ones()
    assert (dead.id, dead.error, dead.message) == (bad, "ValueError", "caf\\xe9 au lait")
