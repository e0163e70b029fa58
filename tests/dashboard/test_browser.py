"""The dashboard in a real headless Chromium: a visitor who has not logged in sees the login form
and nothing of the table; an operator logs in and retries a dead row by a click; filters the rows,
opens one, and retries every row of a filter through the confirmation page; pauses and resumes a
kind while two worker processes run; reads the flow charts of a seeded history through the DOM; a
form posted from another site is refused; at a phone's width a wide table says it scrolls and each
of its columns can be reached, the filters' controls share one height, and a wrapped payload never
breaks a number; and each page, at a phone's width and a desktop's, fits its width and hints every
table that scrolls (screenshots are kept when NILO_TEST_SCREENSHOTS names a folder: docs/images/
holds the ones docs/dashboard.md shows).

The browser is Debian's `chromium` driven through its `chromium-driver`, both named by path, so
Selenium Manager never runs and nothing is fetched from the internet (`SE_OFFLINE` says the same to
Selenium). The dashboard is served by uvicorn in a thread, over a SQLite file, on a socket this
test binds and listens on first, so the browser's first request waits in the socket's backlog
instead of the test waiting for the server. Without Chromium the tests skip saying so, except in CI
(CI=true), where they fail. Every wait is bounded; the only waits on the wall clock are those for
real worker processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import nilo_job as job
from nilo_job.store.contract import NewRow
from tests.helpers.dashboard import MINUTE, SECRET, S, iso
from tests.helpers.workers import forget_procs_kinds, fresh_procs_kinds, start

CHROMIUM = os.environ.get("NILO_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("NILO_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT_S = 30  # the longest any one step may take


class Rejected(Exception):
    pass


class SMTPServerDisconnected(Exception):
    pass


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str

    def run(self) -> dict[str, str]:
        if self.to.startswith("bad"):
            raise Rejected("no such address")
        if self.to.startswith("gone"):
            raise SMTPServerDisconnected("Connection unexpectedly closed")
        return {"sent": self.to}


@dataclass
class Resize:
    nilo_job = "resize-image"
    retry = job.Retry.NONE

    path: str

    def run(self) -> None:
        if self.path.endswith(".gif"):
            raise ValueError("cannot resize an animated GIF")
        if self.path.startswith("slow/"):  # for the screenshots' run times
            time.sleep(int(self.path.split("/")[1].split(".")[0]) / 1_000)


@dataclass
class Digest:
    nilo_job = "daily-digest"
    retry = job.Retry.NONE
    schedule = job.cron("0 7 * * *", tz="Europe/Berlin")
    overlap = job.Overlap.SKIP
    missed = job.Missed.DROP

    def run(self) -> None:
        pass


def _need(path: str) -> str | None:
    return None if os.access(path, os.X_OK) else f"{path} is missing"


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A headless Chromium through its ChromeDriver, with a profile of its own, in the time zone
    Asia/Jakarta (UTC+7, no summer time), so a local time differs from UTC."""
    missing = [reason for path in (CHROMIUM, CHROMEDRIVER) if (reason := _need(path))]
    if missing:
        why = f"{'; '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the browser test: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")
    monkeypatch.setenv("SE_AVOID_STATS", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        "--no-pings",
        "--disable-extensions",
        "--no-first-run",
        "--no-default-browser-check",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        "--lang=en-US",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(argument)
    service = Service(executable_path=CHROMEDRIVER, env={**os.environ, "TZ": "Asia/Jakarta"})
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.set_page_load_timeout(WAIT_S)
        driver.set_window_size(1280, 900)
        yield driver
    finally:
        driver.quit()


@contextlib.contextmanager
def serving(jobs: job.Jobs, **settings: Any) -> Iterator[str]:
    """The dashboard of `jobs` served by uvicorn in a thread; its base URL."""
    import uvicorn

    from nilo_job.dashboard import dashboard_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        dashboard_app(jobs, secret=SECRET, **settings),
        log_config=None,
        access_log=False,
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(WAIT_S)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not stop"


@pytest.fixture
def sqlite_jobs(tmp_path: Path) -> Iterator[job.Jobs]:
    """A queue of Mail and Resize over a fresh SQLite file."""
    jobs = job.Jobs(kinds=[Mail, Resize], store=job.Table(f"sqlite:///{tmp_path}/q.db"))
    asyncio.run(jobs.store.create_missing())
    try:
        yield jobs
    finally:
        asyncio.run(jobs.store.close())


def dead(jobs: job.Jobs, at: int, *addresses: str) -> list[int]:
    """Mails to `addresses`, each run (and dying) one second after the one before, from `at`."""

    async def go() -> list[int]:
        ids = []
        for n, to in enumerate(addresses):
            ids.append(await jobs.push(Mail(to=to), at=at + n * S))
            assert await jobs.drain_at(at + n * S) == 1
        return ids

    return asyncio.run(go())


class Page:
    """The browser, with the waits and look-ups these tests use."""

    def __init__(self, driver: Any, base: str) -> None:
        from selenium.common.exceptions import (
            NoSuchElementException,
            StaleElementReferenceException,
        )
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver = driver
        self.base = base
        self.wait = WebDriverWait(
            driver,
            WAIT_S,
            ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
        )

    def open(self, path: str) -> None:
        self.driver.get(f"{self.base}{path}")

    def by_id(self, element_id: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.ID, element_id)

    def all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def text_of(self, element_id: str) -> str:
        return str(self.by_id(element_id).text)

    def until(self, check: Callable[[], bool]) -> None:
        self.wait.until(lambda _driver: check())

    def click_and_wait(self, element_id: str) -> None:
        """Click and wait for the next page to load (the old page's <html> goes stale)."""
        from selenium.common.exceptions import WebDriverException

        html = self.all("html")[0]
        self.by_id(element_id).click()

        def gone(_driver: Any) -> bool:
            # Stale, or (Chromium, while the next page replaces it) "Node with given id does
            # not belong to the document": either way the old page is gone.
            try:
                html.is_enabled()
            except WebDriverException:
                return True
            return False

        self.wait.until(gone)

    def log_in(self) -> None:
        self.open("/")
        self.by_id("secret").send_keys(SECRET)
        self.click_and_wait("login")
        assert self.text_of("operator") == "Logged in"

    def ids(self) -> list[int]:
        """The ids of the rows listed, in order."""
        return [int(row.get_attribute("id").removeprefix("row-")) for row in self.all("tr[id]")]


def counts(page: Page) -> tuple[str, ...]:
    return tuple(page.text_of(f"count-{state}") for state in ("queued", "running", "dead", "done"))


# ------------------------------------------------------------------------------ the tests


def test_a_dead_row_is_retried_by_a_click(browser: Any, sqlite_jobs: job.Jobs) -> None:
    jobs = sqlite_jobs
    (row,) = dead(jobs, job.now_us() - 5 * S, "bad@example.com")
    with serving(jobs, payloads=True) as base:
        page = Page(browser, base)
        # A visitor who has not logged in sees the login form, and nothing of the table: no
        # count, no row, no error.
        page.open("/")
        assert browser.title == "nilo-job"
        assert page.text_of("login-needed") == "Log in with the secret to see this dashboard."
        assert page.by_id("secret").is_displayed()
        assert page.all("tr[id]") == []
        assert page.all("#count-dead") == []
        shown = page.all("body")[0].text
        assert ("Rejected" in shown, "bad@example.com" in shown) == (False, False)
        page.open(f"/rows/{row}")
        assert page.text_of("login-needed") == "Log in with the secret to see this dashboard."
        assert page.all("#f-state") == []
        # Logged in with the secret: the session is an HttpOnly, SameSite=Strict cookie.
        page.open("/")
        page.by_id("secret").send_keys(SECRET)
        page.click_and_wait("login")
        assert page.text_of("operator") == "Logged in"
        assert page.text_of("flash") == "Logged in: the actions are on."
        cookie = browser.get_cookie("nilo_job_dashboard")
        assert cookie is not None
        assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/")
        # The overview: one dead row.
        assert counts(page) == ("0", "0", "1", "0")
        # The error's name, its message, and its traceback folded away until asked for.
        assert page.by_id(f"row-{row}").text.split()[:7] == [
            str(row), "mail", "Rejected", "no", "such", "address", "traceback",
        ]  # fmt: skip
        assert not page.all(f"#row-{row} pre")[0].is_displayed()
        page.all(f"#row-{row} summary")[0].click()
        trace = page.all(f"#row-{row} pre")[0].text
        assert trace.startswith("Traceback (most recent call last):\n")
        assert trace.endswith("Rejected: no such address")
        # The stylesheet and the script loaded under the page's Content-Security-Policy: the
        # script gave each time the local time (Jakarta, UTC+7) as its title.
        collapse = browser.execute_script(
            "return getComputedStyle(document.querySelector('table')).borderCollapse"
        )
        assert collapse == "collapse"
        died = page.all(f"#row-{row} time")[0]
        moment = datetime.fromisoformat(died.get_attribute("datetime").replace("Z", "+00:00"))
        assert died.text == moment.strftime("%Y-%m-%d %H:%M:%S UTC")
        title = died.get_attribute("title")
        hour = (moment.hour + 7) % 24
        expected = f"{hour % 12 or 12}:{moment:%M:%S} {'PM' if hour >= 12 else 'AM'}"
        assert title.endswith(f"{expected} (your local time)"), title

        # Retry the dead row by a click: its own page says so, and offers Cancel now.
        page.click_and_wait(f"retry-{row}")
        assert page.text_of("flash") == f"Row {row} is queued again, from its first attempt."
        assert page.text_of("f-state") == "queued"
        assert page.all(f"#retry-{row}") == []
        assert page.text_of(f"cancel-{row}") == "Cancel"
        page.open("/")
        assert counts(page) == ("1", "0", "0", "0")
    assert asyncio.run(jobs.stats()) == (1, 0, 0)


def test_filter_open_a_row_and_retry_all_of_a_filter(browser: Any, sqlite_jobs: job.Jobs) -> None:
    from selenium.webdriver.support.ui import Select

    jobs = sqlite_jobs
    t = job.now_us() - 60 * S
    ids = dead(jobs, t, "gone1@x", "bad1@x", "gone2@x", "gone3@x", "bad2@x")
    gone = [ids[0], ids[2], ids[3]]
    rejected = [ids[1], ids[4]]
    with serving(jobs, payloads=True) as base:
        page = Page(browser, base)
        page.log_in()
        # Filter: dead rows of mail that failed with SMTPServerDisconnected.
        page.click_and_wait("nav-rows")
        assert page.ids() == ids[::-1]  # every state; here all dead, newest first
        Select(page.by_id("f-state")).select_by_value("dead")
        Select(page.by_id("f-kind")).select_by_value("mail")
        Select(page.by_id("f-error")).select_by_value("SMTPServerDisconnected")
        page.click_and_wait("apply-filter")
        assert page.ids() == gone[::-1]
        assert page.text_of("summary") == (
            "Dead rows of mail that failed with SMTPServerDisconnected: 3; showing 1–3."
        )
        # Open a row from the list, and come back to its kind's dead rows.
        page.all(f"#row-{gone[1]} a")[0].click()
        page.until(lambda: page.text_of("error-name") == "SMTPServerDisconnected")
        assert page.text_of("message") == "Connection unexpectedly closed"
        assert page.text_of("f-attempts") == "1"
        assert browser.current_url == f"{base}/rows/{gone[1]}"
        browser.back()
        page.until(lambda: page.ids() == gone[::-1])
        # Retry all 3 matching: the confirmation says how many and which, then acts.
        assert page.text_of("retry-all") == "Retry all 3 matching this filter"
        page.click_and_wait("retry-all")
        assert page.text_of("confirm-what") == (
            "Retry 3 rows: the dead rows of mail that failed with SMTPServerDisconnected."
        )
        assert asyncio.run(jobs.stats()) == (0, 0, 5)  # not yet
        page.click_and_wait("confirm")
        assert page.text_of("flash") == "3 rows queued again."
        assert page.text_of("none") == "No rows match."
        # The rows really were retried: queued again from their first attempt, the others not.
        rows = [asyncio.run(jobs.row(row_id)) for row_id in ids]
        assert {(r.id, r.state, r.attempts) for r in rows if r} == {
            *((row_id, "queued", 0) for row_id in gone),
            *((row_id, "dead", 1) for row_id in rejected),
        }
        # Tick one of the others and delete it, through its confirmation.
        page.open("/rows?state=dead")
        assert page.ids() == rejected[::-1]
        page.by_id("select-all").click()  # the script ticks every box ...
        assert all(box.is_selected() for box in page.all("input[name=id]"))
        page.by_id(f"pick-{rejected[1]}").click()  # ... and one is unticked
        page.click_and_wait("delete-selected")
        assert page.text_of("confirm-what") == "Delete 1 row: the dead and done rows among 1 ids."
        page.click_and_wait("confirm")
        assert page.text_of("flash") == "1 row deleted."
        assert page.ids() == [rejected[1]]
    assert asyncio.run(jobs.row(rejected[0])) is None
    assert asyncio.run(jobs.stats()) == (3, 0, 1)


def test_the_charts_show_a_seeded_history(browser: Any, sqlite_jobs: job.Jobs) -> None:
    jobs = sqlite_jobs
    now = job.now_us()
    minute = now - now % MINUTE
    # Minutes ago -> (done, died) of mail; resize-image fails once, 40 minutes ago.
    seeded = {3: (4, 0), 10: (2, 2), 25: (0, 1), 44: (1, 0)}

    async def seed() -> None:
        for ago, (ok, bad) in seeded.items():
            at = minute - ago * MINUTE + 30 * S
            await jobs.push_many([Mail(to=f"ok{n}@x") for n in range(ok)], at=at)
            await jobs.push_many([Mail(to=f"bad{n}@x") for n in range(bad)], at=at)
            assert await jobs.drain_at(at) == ok + bad
        await jobs.push(Resize(path="a.gif"), at=minute - 40 * MINUTE)
        assert await jobs.drain_at(minute - 40 * MINUTE) == 1

    asyncio.run(seed())
    with serving(jobs) as base:
        page = Page(browser, base)
        page.log_in()
        bars = {
            group.get_attribute("data-minute"): (
                int(group.get_attribute("data-done")),
                int(group.get_attribute("data-died")),
            )
            for group in page.all('svg.chart[data-kind="mail"] g.minute')
        }
        heights = {
            rect.get_attribute("class"): float(rect.get_attribute("height"))
            for rect in page.all('svg.chart[data-kind="mail"] g.minute rect:not(.slot)')
            if rect.find_element("xpath", "..").get_attribute("data-done") == "2"
        }
        last = max(bars)
        base_us = int(datetime.fromisoformat(last.replace("Z", "+00:00")).timestamp()) * S
        chart = page.all('svg.chart[data-kind="mail"]')[0]
        label = chart.get_attribute("aria-label")
        card = {
            dd.get_attribute("data-stat"): dd.text
            for dd in page.all('article.flow[data-kind="mail"] dd')
        }
        resize = [
            (group.get_attribute("data-minute"), group.get_attribute("data-died"))
            for group in page.all('svg.chart[data-kind="resize-image"] g.minute')
            if group.get_attribute("data-died") != "0"
        ]
        # The chart is drawn: the tallest minute's bars fill the 44 units of its height.
        tallest = [
            float(rect.get_attribute("height"))
            for rect in page.all('svg.chart[data-kind="mail"] g.minute rect.done')
        ]
        painted = browser.execute_script(
            "return getComputedStyle(document.querySelector('svg.chart rect.died')).fill"
        )
    assert len(bars) == 60
    # The chart ends at the minute of the page view: the seeding's, or the next one when the
    # clock passed a minute in between.
    assert base_us in (minute, minute + MINUTE)
    expected = {iso(minute - ago * MINUTE): pair for ago, pair in seeded.items()}
    assert {m: pair for m, pair in bars.items() if pair != (0, 0)} == expected
    assert heights == {"done": 22.0, "died": 22.0}  # 2 and 2 of a peak of 4, in 44 units
    assert max(tallest) == 44.0
    assert label == ("mail: 7 done and 3 died in the last 60 minutes, at most 4 in one minute")
    assert re.fullmatch(r"\d+ ms", card.pop("p50"))  # real run lengths: a few µs
    assert re.fullmatch(r"\d+ ms", card.pop("p95"))
    assert card == {
        "done": "7", "died": "3", "latency": "0 ms", "queued": "0", "running": "0", "dead": "3",
    }  # fmt: skip
    assert resize == [(iso(minute - 40 * MINUTE), "1")]
    assert painted == "rgb(192, 57, 43)"  # the stylesheet's red, through the class


# ------------------------------------------------------------------ two worker processes


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A database file and an output folder shared by this test and its worker processes."""
    env = {"NILO_TEST_DB": str(tmp_path / "q.db"), "NILO_TEST_OUT": str(tmp_path)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def procs_queue(shared: dict[str, str]) -> Iterator[Any]:
    """The queue the workers serve (tests/helpers/procs_kinds.py), opened in this process."""
    procs_kinds = fresh_procs_kinds()
    asyncio.run(procs_kinds.jobs.store.create_missing())
    try:
        yield procs_kinds
    finally:
        asyncio.run(procs_kinds.jobs.store.close())
        forget_procs_kinds()


def _worker(shared: dict[str, str]) -> subprocess.Popen[bytes]:
    return start({**shared, "NILO_TEST_HANG": "0"}, "--workers", "2")


def _until(what: str, check: Callable[[], bool], seconds: float = 30.0) -> None:
    """Wait for `check()` to hold, looking every 20 ms, for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {seconds} s waiting for {what}")
        time.sleep(0.02)


def test_pause_and_resume_a_kind_while_two_workers_run(
    browser: Any, procs_queue: Any, tmp_path: Path, shared: dict[str, str]
) -> None:
    kinds = procs_queue
    jobs: job.Jobs = kinds.jobs
    poll_s = jobs.poll_ms / 1_000
    slack_s = 1.0  # a loaded machine's scheduling, on top of poll_ms

    def records_done() -> int:
        return sum(len(p.read_text().splitlines()) for p in tmp_path.glob("runs-*.log"))

    def stamps() -> dict[int, int]:
        return {int(p.name.split("-")[1]): int(p.read_text()) for p in tmp_path.glob("stamp-*")}

    def push(rows: list[Any]) -> None:
        asyncio.run(jobs.push_many(rows))

    workers = [_worker(shared) for _ in range(2)]
    try:
        # Both processes serve: four rows that can only finish together, on two workers each.
        push([kinds.Meet(n=n, of=4) for n in range(4)])
        push([kinds.Record(n=n) for n in range(20)])
        _until("the first records", lambda: records_done() == 20)
        done = job.Where(state="done", kind="meet")
        _until("the meeting", lambda: asyncio.run(jobs.count(done)) == 4)
        assert set(kinds.met(tmp_path)) == {proc.pid for proc in workers}
        with serving(jobs) as base:
            page = Page(browser, base)
            page.log_in()
            page.click_and_wait("pause-stamp")
            paused_at = job.now_us()
            assert page.text_of("flash") == (
                "stamp is paused: no process starts its rows until it is resumed."
            )
            assert page.text_of("paused-stamp") == "paused"
            assert page.all("#resume-stamp")
            # Stamps pushed at once may still start in a process that has not read the pause
            # yet: within its poll_ms.
            push([kinds.Stamp(n=n) for n in range(5)])
            # Other kinds go on: 40 more records run, in both processes, while stamps wait.
            push([kinds.Record(n=n) for n in range(20, 60)])
            _until("the records pushed after the pause", lambda: records_done() == 60)
            _until("poll_ms after the pause", lambda: job.now_us() > paused_at + 2 * poll_s * S)
            early = stamps()
            assert all(at <= paused_at + (poll_s + slack_s) * S for at in early.values()), (
                early, paused_at,
            )  # fmt: skip
            # Stamps pushed after every process has read the pause never start while it lasts.
            push([kinds.Stamp(n=n) for n in range(5, 10)])
            push([kinds.Record(n=n) for n in range(60, 100)])
            _until("more records", lambda: records_done() == 100)
            assert stamps() == early  # none started since
            waiting = asyncio.run(jobs.count(job.Where(state="queued", kind="stamp")))
            assert waiting == 10 - len(early)
            page.open("/")
            assert page.by_id("paused-stamp").text == "paused"
            assert [
                dd.text for dd in page.all('article.flow[data-kind="stamp"] dd[data-stat=queued]')
            ] == [str(waiting)]

            page.click_and_wait("resume-stamp")
            resumed_at = job.now_us()
            assert page.text_of("flash") == "stamp is resumed: its rows start again."
            assert page.all("#paused-stamp") == []
            _until("the stamps after resume", lambda: len(stamps()) == 10)
            late = max(stamps().values()) - resumed_at
            assert late <= (poll_s + slack_s) * S, late
    finally:
        outputs = []
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=WAIT_S)
            outputs.append((proc.returncode, out.decode()))
    for code, output in outputs:
        assert code == 0, output
        assert "Traceback" not in output, output
    assert sorted(stamps()) == list(range(10))


def test_a_form_from_another_site_is_refused(browser: Any, sqlite_jobs: job.Jobs) -> None:
    jobs = sqlite_jobs
    (row,) = dead(jobs, job.now_us() - 5 * S, "bad@example.com")
    with serving(jobs) as base:
        page = Page(browser, base)
        page.log_in()
        # ... and another page (another origin) posts a retry form to the dashboard.
        for action in (f"rows/{row}/retry", "bulk", "pause"):
            browser.get(
                "data:text/html,<form method=post "
                f"action='{base}/{action}'><input name=csrf value=x>"
                "<input name=act value=retry:all><input name=kind value=mail>"
                "<input name=confirm value=yes><input name=at_most value=9>"
                "<button id=go>go</button></form>"
            )
            page.by_id("go").click()
            # While the answer replaces the page there may be no <body> for a moment.
            page.until(lambda: any("refused" in body.text for body in page.all("body")))
            assert page.all("body")[0].text == "refused: the form was not sent from this dashboard"
    assert asyncio.run(jobs.stats()) == (0, 0, 1)
    assert asyncio.run(jobs.paused()) == {}


# ------------------------------------------------------------------- at a phone's width

PHONE = 390  # the width, in CSS px, of the phones the layout is checked at

_IN_SIGHT = """
var r = arguments[0].getBoundingClientRect();
if (r.width === 0 || r.left < 0 || r.right > document.documentElement.clientWidth) {
  return false;
}
var hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
return hit !== null && (hit === arguments[0] || arguments[0].contains(hit));
"""


def _in_sight(browser: Any, element: Any) -> bool:
    """Whether `element` is inside the window and on top where it is (so it can be clicked)."""
    return bool(browser.execute_script(_IN_SIGHT, element))


def _hint_agrees(browser: Any) -> list[str]:
    """Each table's box that is wider than it shows, said so by the hint above it: the boxes
    (by their label) whose hint is shown without cause, or missing when the table scrolls."""
    return list(
        browser.execute_script(
            """
            return Array.from(document.querySelectorAll('.scroll-box')).filter(function (outer) {
              var box = outer.querySelector('.scroll');
              var hint = outer.querySelector('.scroll-hint');
              var scrolls = box.scrollWidth > box.clientWidth + 1;
              var shown = hint.getBoundingClientRect().height > 0;
              return scrolls !== shown;
            }).map(function (outer) {
              return outer.querySelector('.scroll').getAttribute('aria-label');
            });
            """
        )
    )


def test_a_wide_table_says_it_scrolls_and_each_column_can_be_reached(
    browser: Any, sqlite_jobs: job.Jobs
) -> None:
    jobs = sqlite_jobs
    first, second = dead(jobs, job.now_us() - 60 * S, "bad1@example.com", "gone1@example.com")
    with serving(jobs, payloads=True) as base:
        page = Page(browser, base)
        page.log_in()
        browser.set_window_size(PHONE, 900)
        page.open("/rows?state=dead")
        hint = page.all("#listing .scroll-hint")[0]
        box = page.all("#listing .scroll")[0]
        # The table is wider than the phone: the hint says so, in sight, naming what is not.
        assert browser.execute_script("return arguments[0].scrollWidth", box) > PHONE
        assert _in_sight(browser, hint)
        words = "Scroll sideways for the other columns: "
        assert (hint.text[: len(words)], hint.text[-2:]) == (words, " →"), hint.text
        out_of_sight = hint.text.removeprefix(words).removesuffix(" →").split(", ")
        assert {"attempts", "died", "actions"} <= set(out_of_sight), hint.text
        heads = {th.text: th for th in page.all("#listing thead th") if th.text}
        retry = page.by_id(f"retry-{second}")
        assert not any(_in_sight(browser, heads[name]) for name in ("attempts", "died"))
        assert not _in_sight(browser, retry)
        # Scrolled to its end: the hint turns to what is now out of sight on the left ...
        browser.execute_script("arguments[0].scrollLeft = arguments[0].scrollWidth", box)
        page.until(lambda: hint.text.startswith(f"{words}← "))
        assert "actions" not in hint.text
        # ... and each column can be brought into sight, and its button clicked.
        for element in (heads["attempts"], heads["died"], retry):
            browser.execute_script(
                "arguments[0].scrollIntoView({block: 'center', inline: 'center'})", element
            )
            assert _in_sight(browser, element)
        page.click_and_wait(f"retry-{second}")
        assert page.text_of("flash") == f"Row {second} is queued again, from its first attempt."
        # On a desktop the table fits, and no hint shows.
        browser.set_window_size(1280, 900)
        page.open("/rows?state=dead")
        assert page.all("#listing .scroll-hint")[0].is_displayed() is False
        assert _hint_agrees(browser) == []
    assert asyncio.run(jobs.row(first)).state == "dead"  # type: ignore[union-attr]


_CONTROLS = """
return Array.from(document.querySelectorAll(
  '#filter select, #filter input:not([type=hidden]), #filter button'
)).map(function (control) {
  var box = control.getBoundingClientRect();
  var label = control.closest('label');
  var words = null;
  if (label) {
    var range = document.createRange();
    range.selectNodeContents(label.firstChild);
    words = range.getBoundingClientRect().top;
  }
  return [control.id, box.top, box.bottom, box.right, words];
});
"""


def test_the_filter_controls_share_one_height_and_their_labels_line_up(
    browser: Any, sqlite_jobs: job.Jobs
) -> None:
    dead(sqlite_jobs, job.now_us() - 5 * S, "bad@example.com", "gone@example.com")
    with serving(sqlite_jobs) as base:
        page = Page(browser, base)
        page.log_in()
        for width in (PHONE, 1280):
            browser.set_window_size(width, 900)
            page.open("/rows?state=dead&kind=mail")
            controls = browser.execute_script(_CONTROLS)
            names = [control[0] for control in controls]
            assert names == ["f-state", "f-kind", "f-error", "apply-filter", "q", "search-go"]
            heights = {round(bottom - top, 1) for _name, top, bottom, _right, _words in controls}
            assert len(heights) == 1, (width, controls)
            # Controls side by side line up, and so do their labels' words above them.
            rows: dict[float, list[Any]] = {}
            for control in controls:
                rows.setdefault(round(control[2], 1), []).append(control)
            for row in rows.values():
                tops = {round(words, 1) for *_rest, words in row if words is not None}
                assert len(tops) <= 1, (width, row)
            assert all(right <= width for _name, _top, _bottom, right, _words in controls)
            # Each form's button stands beside the control before it, not under it.
            for before, button in ((2, 3), (4, 5)):
                assert round(controls[before][2], 1) == round(controls[button][2], 1), (
                    width,
                    controls,
                )


_NUMBERS = """
var code = arguments[0];
var walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
var broken = [];
var numbers = 0;
for (var node = walker.nextNode(); node; node = walker.nextNode()) {
  var pattern = /-?\\d+(\\.\\d+)?([eE][+-]?\\d+)?/g;
  var found;
  while ((found = pattern.exec(node.data)) !== null) {
    var range = document.createRange();
    range.setStart(node, found.index);
    range.setEnd(node, found.index + found[0].length);
    var tops = {};
    Array.from(range.getClientRects()).forEach(function (r) { tops[Math.round(r.top)] = 1; });
    numbers += 1;
    if (Object.keys(tops).length > 1) {
      broken.push(found[0]);
    }
  }
}
var whole = document.createRange();
whole.selectNodeContents(code);
var lines = {};
Array.from(whole.getClientRects()).forEach(function (r) { lines[Math.round(r.top)] = 1; });
return [Object.keys(lines).length, numbers, broken];
"""


def test_a_payload_wraps_between_its_members_never_inside_a_number(
    browser: Any, sqlite_jobs: job.Jobs
) -> None:
    sizes = [1_234_567 + 1_111 * n for n in range(40)]
    payload = json.dumps({"to": "x@example.com", "sizes": sizes, "price": 12.75}).encode()
    (row,) = asyncio.run(sqlite_jobs.store.push([NewRow("mail", payload, job.now_us())]))
    assert row is not None
    with serving(sqlite_jobs, payloads=True) as base:
        page = Page(browser, base)
        page.log_in()
        for width in (PHONE, 1280):
            browser.set_window_size(width, 900)
            for path in ("/rows?state=queued", f"/rows/{row}"):
                page.open(path)
                lines, numbers, broken = browser.execute_script(_NUMBERS, page.all("code.json")[0])
                assert lines > 1, (width, path)  # it does wrap ...
                assert numbers >= 10, (width, path)
                assert broken == [], (width, path)  # ... and never inside a number


# -------------------------------------------------------------------------- screenshots


def _png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def _demo(jobs: job.Jobs) -> int:
    """A queue's last hour, as the screenshots show it; the id of one dead row."""

    async def seed() -> int:
        # A few real runs, served on the real clock: the run times the cards show.
        await jobs.push_many([Resize(path=f"slow/{20 + n * 9}.png") for n in range(8)])
        async with jobs.serving(grace_ms=5_000):
            deadline = time.monotonic() + WAIT_S
            while await jobs.count(job.Where(state="done")) < 8:
                assert time.monotonic() < deadline, "the slow rows did not run"
                await asyncio.sleep(0.02)
        now = job.now_us()
        # The schedule's last run, a few hours ago (serve seeded its next tick).
        digest_at = now - 3 * 3_600 * S - 17 * MINUTE
        await jobs.push(Digest(), at=digest_at)
        assert await jobs.drain_at(digest_at) == 1
        for ago in range(55, 0, -1):
            at = now - ago * MINUTE
            many = (ago * 7) % 6
            await jobs.push_many(
                [Mail(to=("gone" if n == 0 and ago % 7 == 0 else "ok") + f"{ago}.{n}@example.com")
                 for n in range(many)],
                at=at,
            )  # fmt: skip
            await jobs.push_many(
                [Resize(path=f"img/{ago}-{n}." + ("gif" if ago % 11 == 0 else "png"))
                 for n in range(ago % 3)],
                at=at,
            )  # fmt: skip
            await jobs.drain_at(at + 5 * S)
        for n in range(3):
            await jobs.push(
                Mail(to=f"later{n}@example.com"), at=now + (n + 1) * MINUTE, unique=f"welcome:{n}"
            )
        await jobs.push_many(
            [Resize(path=f"img/waiting-{n}.png") for n in range(2)], at=now - 90 * S
        )
        await jobs.pause("resize-image")
        found = await jobs.find(job.Where(state="dead", kind="mail"), limit=1)
        return found.rows[0].id

    return asyncio.run(seed())


def test_each_page_fits_a_phone_and_a_desktop(
    browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file named as an application would name it, so that the page's header reads like one.
    monkeypatch.chdir(tmp_path)
    jobs = job.Jobs(kinds=[Mail, Resize, Digest], store=job.Table("sqlite:///app.db"))
    asyncio.run(jobs.store.create_missing())
    try:
        one = _demo(jobs)
        # The tracebacks name this test's file; shown as an application's own would be.
        with contextlib.closing(sqlite3.connect("app.db")) as conn, conn:
            conn.execute(
                "UPDATE nilo_jobs SET traceback = replace(traceback, ?, '/srv/app/')",
                (f"{Path(__file__).resolve().parent}/",),
            )
        _shoot(browser, jobs, one, tmp_path)
    finally:
        asyncio.run(jobs.store.close())


SHOWN = (PHONE, 1280)
"""The widths of the screenshots docs/dashboard.md shows."""


def _shoot(browser: Any, jobs: job.Jobs, one: int, tmp_path: Path) -> None:
    keep = os.environ.get("NILO_TEST_SCREENSHOTS")
    folder = tmp_path / "shots"
    folder.mkdir(parents=True, exist_ok=True)
    pages = {
        "overview": "/",
        "rows": "/rows?state=dead",
        "row": f"/rows/{one}",
        "confirm": "/rows?state=dead&kind=mail&error=SMTPServerDisconnected",
        # Pages no document shows, checked all the same.
        "all-rows": "/rows",
        "refused": "/rows?state=bogus",
        "missing": "/rows/999999999",
    }
    shown = ("overview", "rows", "row", "confirm")
    taken = {}
    with serving(jobs, payloads=True, limit=25) as base:
        page = Page(browser, base)
        page.log_in()
        for width in (360, *SHOWN):
            for name, path in pages.items():
                browser.set_window_size(width, 900)
                page.open(path)
                if name == "confirm":
                    page.click_and_wait("retry-all")
                    assert page.text_of("confirm-what").startswith("Retry ")
                inner = browser.execute_script("return document.documentElement.clientWidth")
                wide = browser.execute_script("return document.documentElement.scrollWidth")
                assert wide <= inner, f"{name} at {width} px is {wide} px wide"
                assert _hint_agrees(browser) == [], f"{name} at {width} px"
                if width not in SHOWN:
                    continue
                height = browser.execute_script("return document.documentElement.scrollHeight")
                browser.set_window_size(width, min(height + 140, 5_000))
                page.until(lambda: _hint_agrees(browser) == [])  # the hints follow a resize
                shot = folder / f"{name}-{width}.png"
                assert browser.save_screenshot(str(shot))
                taken[shot.name] = _png_size(shot)[0]
                if keep and name in shown:
                    Path(keep).mkdir(parents=True, exist_ok=True)
                    (Path(keep) / shot.name).write_bytes(shot.read_bytes())
    assert taken == {f"{name}-{width}.png": width for width in SHOWN for name in pages}
