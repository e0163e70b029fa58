"""Properties over payloads and exception texts, on every store: each value either round-trips
and runs, or is refused at push with nothing written, or its row dies with a named error. Never
a row running past its retry, never a claim that fails for every row after it.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nilo_job as job
from nilo_job.store.contract import Store

# Derandomized: the same examples on every run (a suite that cannot fail by chance); more
# examples are a matter of max_examples.
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text of every kind, lone surrogates and NUL included.
TEXT = st.text(st.characters(exclude_categories=()), max_size=40) | st.sampled_from(
    ["caf\udce9.txt", "a\x00b", "\udcff\x00", "x" * 3_000]
)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)

failures: dict[int, str | None] = {}
counter = itertools.count()


@dataclass
class Anything:
    nilo_job = "anything"
    retry = job.Retry.NONE

    n: int
    value: Any = None

    def run(self) -> None:
        text = failures.get(self.n)
        if text is not None:
            raise ValueError(text)


@dataclass
class After:
    nilo_job = "after"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


def storable(text: str) -> bool:
    """Whether every store keeps `text` as it is: UTF-8, no NUL."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


@SETTINGS
@given(value=VALUES, failure=st.none() | TEXT)
async def test_a_value_runs_or_is_refused_and_a_failure_always_ends_its_row(
    store: Store, value: Any, failure: str | None
) -> None:
    t = job.now_us() + 1_000_000  # a second ahead of this example's pushes
    jobs = job.Jobs(kinds=[Anything, After], store=store)
    n = next(counter)
    failures[n] = failure
    before = await jobs.stats()
    try:
        row = await jobs.push(Anything(n, value))
    except (job.Refusal, job.PayloadTooLarge):  # (Memory's own bound, 4 KiB a payload)
        assert await jobs.stats() == before  # nothing written
        return
    assert await jobs.drain_at(t) == 1  # it round-tripped, so its run was called
    after = await jobs.stats()
    assert (after.queued, after.running) == (before.queued, before.running)  # nothing left
    if failure is None:
        assert after.dead == before.dead
    else:
        assert after.dead == before.dead + 1
        (dead,) = await jobs.dead_ones(limit=1)
        assert (dead.id, dead.error, dead.attempts) == (row, "ValueError", 1)
        assert storable(dead.message)
        assert storable(dead.traceback)
    await jobs.push(After())
    assert await jobs.drain_at(t) == 1  # the next row is never stopped


@SETTINGS
@given(payload=st.binary(max_size=60), as_text=st.booleans())
async def test_any_bytes_another_program_stores_as_a_payload_never_stop_the_queue(
    tmp_path_factory: pytest.TempPathFactory, t: int, payload: bytes, as_text: bool
) -> None:
    path = tmp_path_factory.mktemp("foreign") / "q.db"
    table = job.Table(f"sqlite:///{path}")
    await table.create_missing()
    jobs = job.Jobs(kinds=[Anything, After], store=table)
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            value = "CAST(? AS TEXT)" if as_text else "?"
            conn.execute(
                "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts) "
                f"VALUES ('anything', {value}, 'queued', ?, 0)",
                (payload, t - 1),
            )
        conn.close()
        await jobs.push(After(), at=t)
        runs = await jobs.drain_at(t)
        stats = await jobs.stats()
        # The foreign row either ran (its bytes were an Anything) or died as BadPayload; the
        # row after it ran either way.
        assert (stats.queued, stats.running) == (0, 0)
        assert runs == 2 - stats.dead
        for dead in await jobs.dead_ones():
            assert dead.error == "BadPayload"
    finally:
        await table.close()


def test_the_texts_cover_what_no_store_can_keep() -> None:
    """The strategy above does reach lone surrogates and NUL (else the property says little)."""
    found = {"surrogate": False, "nul": False}

    @settings(max_examples=500, database=None)
    @given(TEXT)
    def look(text: str) -> None:
        found["nul"] |= "\x00" in text
        found["surrogate"] |= any(0xD800 <= ord(c) <= 0xDFFF for c in text)

    look()
    assert found == {"surrogate": True, "nul": True}
