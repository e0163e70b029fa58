"""Pydantic v2 models as job classes, on every store: they read, push, round-trip and run as a
dataclass does, and are refused alike (a setting as a field, a type JSON cannot carry, a value
that would not come back, a scheduled model without defaults); msgspec Structs keep working."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import ClassVar
from uuid import UUID

import msgspec
import pytest
from pydantic import BaseModel, ConfigDict

import nilo_job as job
from nilo_job.store.contract import Store
from tests.helpers import ROOT

ran: list[object] = []


class Address(BaseModel):
    street: str
    zip: str


class SendInvoice(BaseModel):
    nilo_job: ClassVar[str] = "send-invoice"
    retry: ClassVar[job.Retry] = job.Retry(times=1)

    invoice: UUID
    amount: Decimal
    due: datetime
    to: Address
    lines: list[str] = []
    note: str | None = None

    async def run(self, tick: job.Tick) -> dict[str, str]:
        ran.append(self)
        return {"sent": str(self.invoice)}


class Counted(msgspec.Struct):
    nilo_job: ClassVar[str] = "counted"
    retry: ClassVar[job.Retry] = job.Retry.NONE

    n: int

    def run(self) -> None:
        ran.append(self)


INVOICE = SendInvoice(
    invoice=UUID("12345678-1234-5678-1234-567812345678"),
    amount=Decimal("19.90"),
    due=datetime(2026, 12, 24, 9, 30, tzinfo=UTC),
    to=Address(street="1 Main St", zip="02134"),
    lines=["a", "b"],
)


async def test_a_pydantic_model_is_pushed_and_run_as_it_was_given(store: Store, t: int) -> None:
    ran.clear()
    jobs = job.Jobs(kinds=[SendInvoice, Counted], store=store)
    (kind, _struct) = jobs.kinds
    assert (kind.name, kind.retry.attempts) == ("send-invoice", 2)
    row_id = await jobs.push(INVOICE, at=t)
    await jobs.push(Counted(n=3), at=t)
    assert await jobs.drain_at(t) == 2
    got = next(value for value in ran if isinstance(value, SendInvoice))
    assert got == INVOICE
    assert type(got.to) is Address
    assert got.amount == Decimal("19.90")
    assert Counted(n=3) in ran  # a msgspec Struct beside it keeps working
    row = await jobs.row(row_id)  # type: ignore[arg-type]
    assert row is not None
    assert row.payload == {
        "invoice": "12345678-1234-5678-1234-567812345678",
        "amount": "19.90",
        "due": "2026-12-24T09:30:00Z",
        "to": {"street": "1 Main St", "zip": "02134"},
        "lines": ["a", "b"],
        "note": None,
    }
    assert row.result == {"sent": "12345678-1234-5678-1234-567812345678"}


async def test_a_value_that_would_not_come_back_is_refused_and_nothing_is_written(
    store: Store,
) -> None:
    jobs = job.Jobs(kinds=[SendInvoice], store=store)
    # model_construct skips validation: a str where an int-like UUID field is, a bad nested value.
    broken = SendInvoice.model_construct(**{**dict(INVOICE), "invoice": "not-a-uuid"})
    with pytest.raises(job.Refusal, match=r"(?s)SendInvoice cannot be written as JSON.*invoice"):
        await jobs.push(broken)
    nan = SendInvoice.model_construct(**{**dict(INVOICE), "amount": float("nan")})
    with pytest.raises(job.Refusal, match="nothing was pushed"):
        await jobs.push(nan)
    assert await jobs.stats() == (0, 0, 0)


async def test_a_payload_that_no_longer_fits_the_model_dies_as_bad_payload(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[SendInvoice], store=store)
    from nilo_job.store.contract import NewRow

    (row_id,) = await store.push([NewRow("send-invoice", b'{"invoice": 7}', t)])
    assert await jobs.drain_at(t) == 0
    (dead,) = await jobs.dead_ones()
    assert (dead.id, dead.error) == (row_id, "BadPayload")
    assert dead.message.startswith("its payload no longer fits SendInvoice (ValidationError:")


def test_a_model_is_refused_at_definition_as_a_dataclass_is() -> None:
    class SettingAsField(BaseModel):
        nilo_job: ClassVar[str] = "x"
        retry: job.Retry = job.Retry.NONE  # a field, not a ClassVar

        def run(self) -> None:
            return None

    with pytest.raises(job.Refusal, match=r"SettingAsField.retry is a dataclass field"):
        job.Jobs(kinds=[SettingAsField], store=job.Memory())

    class Holder(BaseModel):
        model_config = ConfigDict(arbitrary_types_allowed=True)
        nilo_job: ClassVar[str] = "holder"
        retry: ClassVar[job.Retry] = job.Retry.NONE

        conn: socket.socket

        def run(self) -> None:
            return None

    with pytest.raises(job.Refusal, match=r"Holder.conn holds a socket, which cannot travel"):
        job.Jobs(kinds=[Holder], store=job.Memory())

    class Nightly(BaseModel):
        nilo_job: ClassVar[str] = "nightly"
        retry: ClassVar[job.Retry] = job.Retry.NONE
        schedule: ClassVar[job.Schedule] = job.cron("0 3 * * *")
        overlap: ClassVar[job.Overlap] = job.Overlap.SKIP
        missed: ClassVar[job.Missed] = job.Missed.DROP

        day: str

        def run(self) -> None:
            return None

    with pytest.raises(job.Refusal, match=r"Nightly.day has no default"):
        job.Jobs(kinds=[Nightly], store=job.Memory())

    class NoRun(BaseModel):
        nilo_job: ClassVar[str] = "no-run"
        retry: ClassVar[job.Retry] = job.Retry.NONE

    with pytest.raises(job.Refusal, match="NoRun has no run method"):
        job.Jobs(kinds=[NoRun], store=job.Memory())


async def test_a_scheduled_model_with_defaults_ticks(store: Store) -> None:
    class Report(BaseModel):
        nilo_job: ClassVar[str] = "report"
        retry: ClassVar[job.Retry] = job.Retry.NONE
        schedule: ClassVar[job.Schedule] = job.every(60_000)
        overlap: ClassVar[job.Overlap] = job.Overlap.SKIP
        missed: ClassVar[job.Missed] = job.Missed.DROP

        scope: str = "all"

        def run(self) -> None:
            ran.append(self)

    ran.clear()
    jobs = job.Jobs(kinds=[Report], store=store)
    t = 1_800_000_000_000_000
    await jobs.seed_at(t)
    assert await jobs.drain_at(t + 60_000_000) == 1
    assert ran == [Report(scope="all")]


def test_the_docs_example_runs_as_it_stands(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "pydantic.md").read_text()
    (sample,) = re.findall(r"```python\n(.*?)```", text, re.S)
    (tmp_path / "app.py").write_text(sample)
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "invoice 7: 19.90 to 1 Main St, due 2026-12-24",
        "done {'sent': '02134'}",
    ]
