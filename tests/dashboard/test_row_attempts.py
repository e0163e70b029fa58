"""A row's page shows its attempts as a timeline, on every store: a row that failed twice,
died, was retried and succeeded shows all four, oldest first; the worker and the messages only
with `payloads=True`; the same page in Chromium. The overview's chart counts deaths after a bulk
retry."""

from __future__ import annotations

import asyncio
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import nilo_job as job
from nilo_job.dashboard import dashboard_app
from nilo_job.store.contract import Store
from tests.dashboard.test_browser import PHONE, Page, browser, serving
from tests.helpers import ROOT
from tests.helpers.attempts import Flaky, four_attempts
from tests.helpers.dashboard import client, text, utc

S = 1_000_000
WORKER = f"{socket.gethostname()}:{os.getpid()}"


async def test_a_row_page_shows_every_attempt_as_a_timeline(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Flaky], store=store)
    row_id = await four_attempts(jobs, t, f"page-{id(store)}-{t}")
    async with client(dashboard_app(jobs, payloads=True)) as http:
        shown = (await http.get(f"/rows/{row_id}")).text
    async with client(dashboard_app(jobs)) as http:
        hidden = (await http.get(f"/rows/{row_id}")).text
    items = re.findall(r'<li id="attempt-(\d)" class="attempt">(.*?)</li>', shown)
    down = "ConnectionError the provider is down"
    assert [(n, text(item)) for n, item in items] == [
        ("1", f"#1 · retrying · started {utc(t)} · ended {utc(t)} · {WORKER} · {down} (run 1)"),
        ("2", f"#2 · retrying · started {utc(t + S)} · ended {utc(t + S)} · {WORKER} · {down} "
              "(run 2)"),
        ("3", f"#3 · dead · started {utc(t + 2 * S)} · ended {utc(t + 2 * S)} · {WORKER} · "
              f"{down} (run 3)"),
        ("4", f"#1 · done · started {utc(t + 3 * S)} · ended {utc(t + 3 * S)} · {WORKER}"),
    ]  # fmt: skip
    assert '<section id="attempts"><h2>Attempts</h2><ol class="timeline" id="timeline">' in shown
    assert '<span class="state dead">dead</span>' in shown
    # Without payloads=True: each failure's name, and neither worker nor message.
    hidden_items = re.findall(r'<li id="attempt-\d" class="attempt">(.*?)</li>', hidden)
    assert [text(item) for item in hidden_items] == [
        f"#1 · retrying · started {utc(t)} · ended {utc(t)} · ConnectionError",
        f"#2 · retrying · started {utc(t + S)} · ended {utc(t + S)} · ConnectionError",
        f"#3 · dead · started {utc(t + 2 * S)} · ended {utc(t + 2 * S)} · ConnectionError",
        f"#1 · done · started {utc(t + 3 * S)} · ended {utc(t + 3 * S)}",
    ]
    assert WORKER not in hidden
    assert "the provider is down" not in hidden


def test_the_timeline_in_chromium(
    browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row page of a row with four attempts, looked at in Chromium at a phone's and a
    desktop's width: the timeline lists them in order, and nothing scrolls sideways. Its
    screenshot (`row-attempts-1280.png`) is kept when NILO_TEST_SCREENSHOTS names a folder."""
    # A file named as an application would name it, so that the page's header reads like one.
    monkeypatch.chdir(tmp_path)
    jobs = job.Jobs(kinds=[Flaky], store=job.Table("sqlite:///app.db"))
    t = job.now_us() + S  # soon: the retry by an operator is due at once

    async def seed() -> int:
        await jobs.store.create_missing()
        return await four_attempts(jobs, t, f"browser-{t}")

    row_id = asyncio.run(seed())
    keep = os.environ.get("NILO_TEST_SCREENSHOTS")
    try:
        with serving(jobs, payloads=True) as base:
            page = Page(browser, base)
            page.log_in()
            for width in (PHONE, 1280):
                browser.set_window_size(width, 900)
                page.open(f"/rows/{row_id}")
                items = [item.text for item in page.all("#timeline li")]
                assert [item.split(" · ")[:2] for item in items] == [
                    ["#1", "retrying"], ["#2", "retrying"], ["#3", "dead"], ["#1", "done"],
                ]  # fmt: skip
                assert items[2].endswith("ConnectionError the provider is down (run 3)")
                inner = browser.execute_script("return document.documentElement.clientWidth")
                wide = browser.execute_script("return document.documentElement.scrollWidth")
                assert wide <= inner, f"the row page at {width} px is {wide} px wide"
                height = browser.execute_script("return document.documentElement.scrollHeight")
                browser.set_window_size(width, min(height + 140, 5_000))
                shot = tmp_path / f"row-attempts-{width}.png"
                assert browser.save_screenshot(str(shot))
                if keep and width == 1280:
                    folder = Path(keep) if Path(keep).is_absolute() else ROOT / keep
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / shot.name).write_bytes(shot.read_bytes())
    finally:
        asyncio.run(jobs.store.close())


__all__ = ["browser"]  # the fixture, used by name


async def test_the_chart_keeps_counting_deaths_after_a_bulk_retry(store: Store, t: int) -> None:
    @dataclass
    class Dies:
        nilo_job = "dies"
        retry = job.Retry.NONE

        n: int

        def run(self) -> None:
            raise ValueError(f"bad input {self.n}")

    jobs = job.Jobs(kinds=[Dies], store=store)
    at = job.now_us() - 2 * 60 * S  # two minutes ago: within the chart's hour
    await jobs.push_many([Dies(n) for n in range(18)], at=at)
    assert await jobs.drain_at(at) == 18
    assert await jobs.retry_many(job.Where(state="dead")) == 18
    async with client(dashboard_app(jobs)) as http:
        page = (await http.get("/")).text
    assert re.search(r'<svg[^>]*data-done="0" data-died="18"', page), page
