"""The dashboard over HTTP (httpx in process, and the `nilo-job dashboard` command): every page on
every store (the overview with its flow charts, the rows page with its filters and keyset pages,
a row's page), the secret, the session and its CSRF token, the origin check, bulk actions with
their confirmation, pausing a kind, a prefix, an unreadable row, a store that fails.

The browser drives it in tests/test_dashboard_browser.py.
"""

import contextlib
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

import nilo_job as job
from nilo_job.dashboard import dashboard_app
from nilo_job.dashboard._render import duration, relative
from nilo_job.dashboard._session import Sessions
from nilo_job.metrics import Metrics
from nilo_job.store.contract import NewRow, RowView, Store

S = 1_000_000  # microseconds in a second
MINUTE = 60 * S
SECRET = "correct horse battery staple"
ORIGIN = {"origin": "http://testserver"}
FORM = {"content-type": "application/x-www-form-urlencoded"}
CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


class Rejected(Exception):
    pass


class Bounced(Exception):
    pass


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str

    def run(self) -> dict[str, str]:
        if self.to.startswith("bad"):
            raise Rejected("no such address")
        if self.to.startswith("bounce"):
            raise Bounced("mailbox full")
        return {"sent": self.to}


@dataclass
class Resize:
    nilo_job = "resize"
    retry = job.Retry.NONE

    n: int

    def run(self) -> None:
        if self.n < 0:
            raise ValueError("negative")


@dataclass
class Nightly:
    nilo_job = "nightly"
    retry = job.Retry.NONE
    schedule = job.cron("0 3 * * *", tz="Asia/Jakarta")
    overlap = job.Overlap.SKIP
    missed = job.Missed.DROP

    def run(self) -> None:
        pass


@dataclass
class Pulse:
    nilo_job = "pulse"
    retry = job.Retry.NONE
    schedule = job.every(600_000)
    overlap = job.Overlap.QUEUE
    missed = job.Missed.CATCH_UP

    def run(self) -> None:
        pass


# ------------------------------------------------------------------------------- helpers


def utc(us: int) -> str:
    return datetime.fromtimestamp(us / S, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(us: int) -> str:
    return datetime.fromtimestamp(us / S, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def text(fragment: str) -> str:
    """The fragment without tags and entities, and without the relative hints."""
    plain = re.sub(r'\s*<span class="rel">\(.*?\)</span>', "", fragment)
    plain = re.sub(r"<[^>]+>", "", plain)
    return re.sub(r"\s+", " ", plain.replace("&quot;", '"')).strip()


def cells(page: str, row_id: int) -> list[str]:
    """The text of each cell of the table row `row-<id>`, but the last (the buttons) when the
    page is an operator's."""
    found = re.search(rf'<tr id="row-{row_id}">(.*?)</tr>', page)
    assert found is not None, f"no row {row_id} on the page"
    return [text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", found.group(1))]


def listed(page: str) -> list[int]:
    """The ids of the table rows on the page, in order."""
    return [int(n) for n in re.findall(r'<tr id="row-(\d+)">', page)]


def counts(page: str) -> dict[str, int]:
    """The totals row of the counts table."""
    found = re.findall(r'<td class="n" id="count-(\w+)"><a href="[^"]*">(\d+)</a></td>', page)
    return {state: int(n) for state, n in found}


def per_kind(page: str) -> dict[tuple[str, str], int]:
    found = re.findall(r'data-kind="([^"]+)" data-state="(\w+)"><a href="[^"]*">(\d+)</a>', page)
    return {(kind, state): int(n) for kind, state, n in found}


def minutes(page: str, kind: str) -> dict[str, tuple[int, int]]:
    """The chart of `kind`: each minute (ISO, UTC) with its done and died bars' numbers."""
    found = re.search(rf'<svg class="chart"[^>]*data-kind="{kind}".*?</svg>', page)
    assert found is not None, f"no chart of {kind}"
    bars = re.findall(
        r'<g class="minute" data-minute="([^"]+)" data-done="(\d+)" data-died="(\d+)">',
        found.group(0),
    )
    return {minute: (int(done), int(died)) for minute, done, died in bars}


def stats(page: str, kind: str) -> dict[str, str]:
    found = re.search(rf'<article class="flow" data-kind="{kind}">(.*?)</article>', page)
    assert found is not None, f"no flow card of {kind}"
    return dict(re.findall(r'<dd data-stat="(\w+)">(.*?)</dd>', found.group(1)))


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    assert found is not None, "no CSRF token on the page"
    return found.group(1)


def flash(page: str) -> str:
    found = re.search(r'<p class="flash[^"]*" id="flash" role="status">(.*?)</p>', page)
    assert found is not None, "no flash on the page"
    return found.group(1)


def client(app: object) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def login(http: httpx.AsyncClient, prefix: str = "") -> str:
    """Log in with the secret; the CSRF token of the new session."""
    answer = await http.post(f"{prefix}/login", data={"secret": SECRET}, headers=ORIGIN)
    assert (answer.status_code, answer.headers["location"]) == (303, f"{prefix}/?did=logged_in")
    page = await http.get(f"{prefix}/")
    return csrf(page.text)


@pytest.fixture
async def dead_one() -> tuple[job.Jobs, int]:
    """A queue on Memory with one dead row."""
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    row = await jobs.push(Mail(to="bad@example.com"))
    assert await jobs.drain() == 1
    return jobs, row


async def dead_rows(jobs: job.Jobs, t: int, *addresses: str) -> list[int]:
    """Push a Mail to each address, due and dying one second apart from `t`; their ids."""
    ids = []
    for n, to in enumerate(addresses):
        ids.append(await jobs.push(Mail(to=to), at=t + n * S))
        assert await jobs.drain_at(t + n * S) == 1
    return ids


# ------------------------------------------------------------------------- the overview


async def test_the_overview_shows_counts_rows_and_schedules(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail, Nightly, Pulse], store=store)
    (dead,) = await dead_rows(jobs, t, "bad@example.com")
    done = await jobs.push(Mail(to="ok@example.com"), at=t)
    assert await jobs.drain_at(t) == 1
    later = await jobs.push(Mail(to="a@example.com"), at=t + 60 * S, unique="welcome:7")
    running = await jobs.push(Mail(to="b@example.com"), at=t)
    (claimed,) = await store.claim(["mail"], t + S, t + 61 * S, 1)
    assert claimed.id == running
    await store.push([NewRow("theirs", b"{}", t)])
    await jobs.seed_at(t)

    async with client(dashboard_app(jobs)) as http:
        answer = await http.get("/")
    assert answer.status_code == 200
    page = answer.text
    assert counts(page) == {"queued": 4, "running": 1, "dead": 1, "done": 1}
    assert per_kind(page) == {
        **{("mail", state): 1 for state in ("queued", "running", "dead", "done")},
        ("nightly", "queued"): 1,
        ("nightly", "running"): 0,
        ("nightly", "dead"): 0,
        ("nightly", "done"): 0,
        ("pulse", "queued"): 1,
        ("pulse", "running"): 0,
        ("pulse", "dead"): 0,
        ("pulse", "done"): 0,
        ("theirs", "queued"): 1,
        ("theirs", "running"): 0,
        ("theirs", "dead"): 0,
        ("theirs", "done"): 0,
    }
    # Each count links to the rows it counts.
    assert '<td class="n" id="count-dead"><a href="/rows?state=dead">1</a></td>' in page
    assert 'data-state="done"><a href="/rows?state=done&amp;kind=mail">1</a>' in page
    assert 'theirs <span class="rel">(not a kind of this queue)</span>' in page
    row, kind, error, attempts, died = cells(page, dead)
    assert [row, kind, attempts, died] == [str(dead), "mail", "1", utc(t)]
    # The error's name (a link to the rows that failed with it), its message, and its
    # traceback folded away under "traceback".
    assert error.startswith("Rejected no such address tracebackTraceback (most recent call")
    assert error.endswith("Rejected: no such address&#10;")
    assert '<a href="/rows?state=dead&amp;kind=mail&amp;error=Rejected" class="error-link">' in page
    assert cells(page, later) == [str(later), "mail", utc(t + 60 * S), "0", "", "welcome:7"]
    assert cells(page, running) == [str(running), "mail", utc(t), "1", utc(t + 61 * S), ""]
    assert f'id="row-{done}"' not in page  # done rows are counted and charted, not listed here
    nightly = utc(Nightly.schedule.next(t))
    schedules = [
        [text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r'<tr data-kind="\w+">(.*?)</tr>', page)
    ]
    assert schedules == [
        ["nightly", "0 3 * * * (Asia/Jakarta)", "skip", "drop", f"{nightly}, row {later + 3}"],
        ["pulse", "every 600,000 ms", "queue", "catch_up", f"{utc(t + 600 * S)}, row {later + 4}"],
    ]  # fmt: skip
    # Read-only: no forms at all, and it says so.
    assert "<form" not in page
    assert 'id="read-only"' in page
    # Payloads are not shown unless asked for.
    assert "bad@example.com" not in page
    # No refresh unless asked for.
    assert 'http-equiv="refresh"' not in page


async def test_the_flow_charts_show_each_minute_of_the_last_hour(store: Store) -> None:
    jobs = job.Jobs(kinds=[Mail, Resize], store=store)
    now = job.now_us()
    minute = now - now % MINUTE  # the start of this minute
    seeded = {5: (3, 1), 12: (1, 0), 30: (0, 2)}  # minutes ago: (done, died) of mail
    for ago, (ok, bad) in seeded.items():
        at = minute - ago * MINUTE + 10 * S
        for n in range(ok):
            await jobs.push(Mail(to=f"ok{n}@example.com"), at=at)
        for n in range(bad):
            await jobs.push(Mail(to=f"bad{n}@example.com"), at=at)
        assert await jobs.drain_at(at) == ok + bad
    await jobs.push(Resize(n=-1), at=minute - 20 * MINUTE)
    assert await jobs.drain_at(minute - 20 * MINUTE) == 1
    waiting = await jobs.push(Resize(n=1), at=now - 90 * S)

    async with client(dashboard_app(jobs)) as http:
        page = (await http.get("/")).text
    mail = minutes(page, "mail")
    assert len(mail) == 60
    last = max(mail)  # the minute the page was read in (the one the flow ends with)
    start = int(datetime.strptime(last, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    base = start * S
    expected = {
        iso(base - ago * MINUTE): pair
        for ago, pair in seeded.items()
        if base - ago * MINUTE >= base - 59 * MINUTE
    }
    assert {m: pair for m, pair in mail.items() if pair != (0, 0)} == expected
    assert min(mail) == iso(base - 59 * MINUTE)
    assert {m: pair for m, pair in minutes(page, "resize").items() if pair != (0, 0)} == {
        iso(base - 20 * MINUTE): (0, 1)
    }
    # The tallest minute fills the chart; its bars' heights are in proportion.
    svg = re.search(r'<svg class="chart"[^>]*data-kind="mail"[^>]*>', page)
    assert svg is not None
    assert 'data-peak="4" data-done="4" data-died="3"' in svg.group(0)
    five = re.search(rf'data-minute="{iso(base - 5 * MINUTE)}".*?</g>', page)
    assert five is not None
    assert re.findall(r'<rect class="(done|died)" x="[\d.]+" y="([\d.]+)" width="[\d.]+" '
                      r'height="([\d.]+)"', five.group(0)) == [
        ("done", "23", "33"), ("died", "12", "11"),
    ]  # fmt: skip
    assert f"<title>{utc(base - 5 * MINUTE)[11:16]} UTC: 3 done, 1 died</title>" in page
    mail_stats = stats(page, "mail")
    # Run lengths are real (a few µs here); the rest is exact.
    assert re.fullmatch(r"\d+ ms", mail_stats.pop("p50"))
    assert re.fullmatch(r"\d+ ms", mail_stats.pop("p95"))
    assert mail_stats == {
        "done": "4",
        "died": "3",
        "latency": "0 ms",
        "queued": "0",
        "running": "0",
        "dead": "3",
    }
    resize = stats(page, "resize")
    assert re.fullmatch(r"1 min 3[01] s", resize.pop("latency")), page  # due 90 s ago
    assert resize == {
        "done": "0",
        "died": "1",
        "p50": "–",
        "p95": "–",
        "queued": "1",
        "running": "0",
        "dead": "1",
    }
    assert f'id="row-{waiting}"' in page


async def test_auto_refresh_is_asked_for_in_the_query(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, _row = dead_one
    async with client(dashboard_app(jobs)) as http:
        ten = (await http.get("/?refresh=10")).text
        wild = [(await http.get(f"/?refresh={n}")).text for n in ("1", "99999", "x", "")]
    assert '<meta http-equiv="refresh" content="10">' in ten
    assert '<a href="/?refresh=10" id="refresh-10" aria-current=true>10 s</a>' in ten
    assert all('http-equiv="refresh"' not in page for page in wild)


async def test_a_schedule_not_seeded_and_a_tick_running(t: int) -> None:
    store = job.Memory()
    jobs = job.Jobs(kinds=[Nightly], store=store)
    async with client(dashboard_app(jobs)) as http:
        before = (await http.get("/")).text
        await jobs.seed_at(t)
        tick = Nightly.schedule.next(t)
        await store.claim(["nightly"], tick, tick + S, 1)
        after = (await http.get("/")).text
    assert text(re.findall(r'class="next-tick">(.*?)</td>', before)[0]) == (
        "not seeded yet: serve() or seed() queues it"
    )
    assert text(re.findall(r'class="next-tick">(.*?)</td>', after)[0]) == (
        f"running now (the tick due {utc(tick)})"
    )
    assert 'id="none-queued"' in after
    assert 'id="none-dead"' in after


class Elsewhere:
    """A store of someone else's: the contract, through a Memory it keeps."""

    def __init__(self) -> None:
        self.inner = job.Memory()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


class ElsewhereHolding(Elsewhere):
    """The same, answering `holding` itself."""

    async def holding(self, key: str, kinds: list[str]) -> list[RowView]:
        return [RowView(42, "nightly", "queued", b"{}", 7 * S, 0, key, None, None, None)]


async def test_a_store_of_your_own_shows_the_rows_its_holding_answers(t: int) -> None:
    pages = []
    for store in (Elsewhere(), ElsewhereHolding()):
        jobs = job.Jobs(kinds=[Nightly], store=store)  # type: ignore[arg-type]
        await jobs.seed_at(t)
        async with client(dashboard_app(jobs)) as http:
            pages.append((await http.get("/")).text)
    assert [text(re.findall(r'class="next-tick">(.*?)</td>', page)[0]) for page in pages] == [
        f"{utc(Nightly.schedule.next(t))}, row 1",
        f"{utc(7 * S)}, row 42",
    ]
    assert [counts(page) for page in pages] == [
        {"queued": 1, "running": 0, "dead": 0, "done": 0}
    ] * 2


class Partial:
    """A store of your own that forwards only some of the contract."""

    def __init__(self) -> None:
        self.inner = job.Memory()

    def __getattr__(self, name: str) -> object:
        if name in {"claim", "finish"}:
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_a_forwarding_store_is_taken_and_one_lacking_methods_is_refused_naming_them() -> None:
    assert job.Jobs(kinds=[Nightly], store=Elsewhere()).store.__class__ is Elsewhere  # type: ignore[arg-type]
    with pytest.raises(job.Refusal) as refused:
        job.Jobs(kinds=[Nightly], store=Partial())  # type: ignore[arg-type]
    assert str(refused.value).endswith(
        "a store of your own must have every method of nilo_job.store.contract.Store, and this "
        "one lacks claim, finish"
    )
    with pytest.raises(job.Refusal, match=r"and this one has none$"):
        job.Jobs(kinds=[Nightly], store=None)  # type: ignore[arg-type]


async def test_payloads_when_asked_are_escaped_and_cut(t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    short = await jobs.push(Mail(to="<script>alert(1)</script>"), at=t + S)
    long = await jobs.push(Mail(to="x" * 300), at=t + 2 * S)
    async with client(dashboard_app(jobs, payloads=True)) as http:
        page = (await http.get("/")).text
        whole = (await http.get(f"/rows/{long}")).text
    assert "<script>" not in page
    assert "<code>{&quot;to&quot;:&quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;}</code>" in page
    assert cells(page, long)[-1] == '{"to":"' + "x" * 153 + "…"
    assert cells(page, short)[-1] == '{"to":"&lt;script&gt;alert(1)&lt;/script&gt;"}'
    assert "<code>{&quot;to&quot;:&quot;" + "x" * 300 + "&quot;}</code>" in whole


async def test_the_overview_lists_ten_rows_of_a_state_and_links_to_the_rest(t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    rows = [await jobs.push(Mail(to=f"{n}@example.com"), at=t + n) for n in range(12)]
    async with client(dashboard_app(jobs)) as http:
        page = (await http.get("/")).text
    assert listed(page) == rows[:10]
    assert (
        '<p class="more">The first 10 of 12: <a href="/rows?state=queued" id="all-queued">'
        "all queued rows</a>.</p>"
    ) in page
    async with client(dashboard_app(jobs, limit=2)) as http:
        small = (await http.get("/")).text
    assert listed(small) == rows[:2]


async def test_a_store_that_cannot_be_read_is_a_503_that_says_why() -> None:
    class Unreachable(job.Memory):
        async def counts(self) -> dict[tuple[str, str], int]:
            raise job.StoreUnavailable("PostgreSQL: connection refused")

        async def find(self, *args: object) -> list[RowView]:
            raise job.StoreUnavailable("PostgreSQL: connection refused")

        async def row(self, row_id: int) -> RowView | None:
            raise job.StoreUnavailable("PostgreSQL: connection refused")

    jobs = job.Jobs(kinds=[Mail], store=Unreachable())
    async with client(dashboard_app(jobs)) as http:
        answers = [await http.get(path) for path in ("/", "/rows?state=dead", "/rows/7")]
    problem = (
        '<p class="problem" id="problem">The store cannot be read: PostgreSQL: connection '
        "refused</p>"
    )
    assert [(a.status_code, problem in a.text) for a in answers] == [(503, True)] * 3


async def test_headers_static_files_and_methods() -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        page = await http.get("/")
        css = await http.get("/static/dashboard.css")
        js = await http.get("/static/dashboard.js")
        missing = await http.get("/static/other.js")
        wrong_method = await http.get("/rows/1/retry")
        wrong_bulk = await http.get("/bulk")
    for answer in (page, css, js, missing):
        assert answer.headers["content-security-policy"] == CSP
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "same-origin"
        assert answer.headers["cache-control"] == "no-store"
    assert (css.status_code, css.headers["content-type"]) == (200, "text/css; charset=utf-8")
    assert css.text.startswith("/* The dashboard's one stylesheet")
    assert (js.status_code, js.headers["content-type"]) == (
        200,
        "text/javascript; charset=utf-8",
    )
    assert js.text.startswith("// The dashboard's one script")
    assert missing.status_code == 404
    assert '<script src="/static/dashboard.js" defer></script>' in page.text
    assert "<style" not in page.text
    assert " style=" not in page.text
    assert "onclick" not in page.text
    assert (wrong_method.status_code, wrong_bulk.status_code) == (405, 405)


def test_relative_hints_and_durations() -> None:
    now = 10_000 * S
    assert [
        relative(now, now),
        relative(now + 999_999, now),
        relative(now + 59 * S, now),
        relative(now - 61 * S, now),
        relative(now + 3 * 3_600 * S, now),
        relative(now - 2 * 86_400 * S - 1, now),
    ] == ["now", "now", "in 59 s", "1 min ago", "in 3 h", "2 d ago"]
    assert [duration(ms) for ms in (None, 0, 840.4, 2_500, 184_000, 7_380_000)] == [
        "–", "0 ms", "840 ms", "2.5 s", "3 min 4 s", "2 h 3 min",
    ]  # fmt: skip


# ---------------------------------------------------------------------------- the rows page


async def test_the_rows_page_filters_by_state_kind_and_error(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail, Resize], store=store)
    bad = await dead_rows(jobs, t, "bad1@x", "bounce1@x", "bad2@x")
    await jobs.push(Resize(n=-1), at=t + 10 * S)
    assert await jobs.drain_at(t + 10 * S) == 1
    queued = await jobs.push(Mail(to="later@x"), at=t + 3_600 * S, unique="welcome:1")
    async with client(dashboard_app(jobs)) as http:
        dead = (await http.get("/rows?state=dead")).text
        mail = (await http.get("/rows?state=dead&kind=mail")).text
        rejected = await http.get("/rows?state=dead&kind=mail&error=Rejected")
        nothing = (await http.get("/rows?state=dead&kind=mail&error=KeyError")).text
        everything = (await http.get("/rows")).text
        by_key = (await http.get("/rows?q=welcome:1")).text
        by_id = await http.get(f"/rows?q={bad[1]}")
        unknown_id = (await http.get("/rows?q=999999")).text
        bad_state = await http.get("/rows?state=finished")
        bad_cursor = await http.get("/rows?state=dead&after=nope")
    assert listed(dead) == [bad[2] + 1, bad[2], bad[1], bad[0]]  # newest death first
    assert 'Dead rows: <span id="total">4</span>; showing 1–4.' in dead
    assert listed(mail) == [bad[2], bad[1], bad[0]]
    assert 'Dead rows of mail: <span id="total">3</span>; showing 1–3.' in mail
    assert rejected.status_code == 200
    assert listed(rejected.text) == [bad[2], bad[0]]
    assert (
        'Dead rows of mail that failed with Rejected: <span id="total">2</span>; showing 1–2.'
    ) in rejected.text
    # The form shows the filter it applied.
    assert '<option value="dead" selected>dead</option>' in rejected.text
    assert '<option value="mail" selected>mail</option>' in rejected.text
    assert 'name="error" id="f-error" placeholder="class name" value="Rejected"' in rejected.text
    assert listed(nothing) == []
    assert '<p class="empty" id="none">No rows match.</p>' in nothing
    # Without a state: rows of every state, queued first.
    assert listed(everything) == [queued, bad[2] + 1, bad[2], bad[1], bad[0]]
    assert cells(everything, queued)[2:4] == ["queued", utc(t + 3_600 * S)]
    # The search box: a unique key lists its rows, a row id opens the row.
    assert listed(by_key) == [queued]
    assert "All rows holding the key &#x27;welcome:1&#x27;: <span" in by_key
    assert (by_id.status_code, by_id.headers["location"]) == (303, f"/rows/{bad[1]}")
    assert listed(unknown_id) == []  # no such row, and no such key
    assert (bad_state.status_code, bad_cursor.status_code) == (400, 400)
    assert "That filter cannot be read: state=&#x27;finished&#x27;" in bad_state.text
    assert "That filter cannot be read: after=&#x27;nope&#x27; is not a cursor" in bad_cursor.text


async def test_250_rows_come_in_three_keyset_pages(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    pushed = [await jobs.push(Mail(to=f"{n}@x"), at=t + (n % 7) * S) for n in range(250)]
    by_due = sorted(pushed, key=lambda row: (t + (pushed.index(row) % 7) * S, row))
    seen: list[int] = []
    summaries = []
    async with client(dashboard_app(jobs)) as http:
        path: str | None = "/rows?state=queued"
        while path is not None:
            page = (await http.get(path)).text
            seen.extend(listed(page))
            summary = re.search(r'<p class="summary" id="summary">(.*?)</p>', page)
            assert summary is not None
            summaries.append(text(summary.group(1)))
            found = re.search(r'<a href="([^"]+)" id="next-page" rel="next">', page)
            path = None if found is None else found.group(1).replace("&amp;", "&")
    assert seen == by_due  # each row once, none missed, in due order
    assert summaries == [
        "Queued rows: 250; showing 1–100.",
        "Queued rows: 250; showing 101–200.",
        "Queued rows: 250; showing 201–250.",
    ]


# ---------------------------------------------------------------------------- a row's page


async def test_a_row_page_tells_the_whole_story(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    (dead,) = await dead_rows(jobs, t, "bad@example.com")
    done = await jobs.push(Mail(to="ok@example.com"), at=t + S, unique="welcome:9")
    assert await jobs.drain_at(t + 2 * S) == 1
    hidden_app = dashboard_app(jobs)
    shown_app = dashboard_app(jobs, payloads=True)
    async with client(hidden_app) as http:
        dead_page = await http.get(f"/rows/{dead}")
        done_hidden = (await http.get(f"/rows/{done}")).text
        missing = await http.get("/rows/999999")
        huge = await http.get("/rows/99999999999999999999")
    async with client(shown_app) as http:
        done_shown = (await http.get(f"/rows/{done}")).text
        dead_shown = (await http.get(f"/rows/{dead}")).text
    assert dead_page.status_code == 200
    page = dead_page.text
    worker = (await jobs.row(dead)).worker  # type: ignore[union-attr]
    assert worker is not None
    assert re.fullmatch(r".+:\d+", worker)
    fields = dict(re.findall(r'<dd id="f-(\w+)">(.*?)</dd>', page))
    assert {name: text(value) for name, value in fields.items()} == {
        "kind": "mail",
        "state": "dead",
        "key": "–",
        "pushed": utc((await jobs.row(dead)).pushed_at),  # type: ignore[arg-type,union-attr]
        "due": utc(t),
        "started": utc(t),
        "died": utc(t),
        "attempts": "1",
        "worker": worker,
    }
    assert '<p class="error" id="error-name">Rejected</p>' in page
    assert '<p class="message" id="message">no such address</p>' in page
    trace = re.search(r'<pre class="trace" id="traceback">(.*?)</pre>', page, re.S)
    assert trace is not None
    assert trace.group(1).startswith("Traceback (most recent call last):\n")
    assert trace.group(1).endswith("Rejected: no such address\n")
    assert "bad@example.com" not in page
    assert 'id="payload-hidden"' in page
    assert "<form" not in page  # read-only
    assert '<a href="/rows?state=dead&amp;kind=mail" id="back">' in page
    done_fields = dict(re.findall(r'<dd id="f-(\w+)">(.*?)</dd>', done_hidden))
    assert [text(done_fields[name]) for name in ("state", "key", "finished")] == [
        "done", "welcome:9", utc(t + 2 * S),
    ]  # fmt: skip
    assert re.fullmatch(r"\d+ ms", text(done_fields["took"]))  # the run's real length
    assert "ok@example.com" not in done_hidden  # neither payload nor result
    assert '<section id="payload"><h2>Payload</h2><code>{&quot;to&quot;:&quot;ok@example.com' in (
        done_shown
    )
    assert (
        '<section id="result"><h2>Result</h2><pre>{\n  &quot;sent&quot;: '
        "&quot;ok@example.com&quot;\n}</pre></section>"
    ) in done_shown
    assert 'id="result"' not in dead_shown
    assert (missing.status_code, huge.status_code) == (404, 404)
    assert '<p class="problem" id="missing">There is no row 999999: it never existed' in (
        missing.text
    )


async def test_a_row_another_program_wrote_shows_as_unreadable(tmp_path: Path) -> None:
    table = job.Table(f"sqlite:///{tmp_path}/q.db")
    await table.create_missing()
    with contextlib.closing(sqlite3.connect(tmp_path / "q.db")) as conn, conn:
        conn.execute(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, error, detail, "
            "died_at) VALUES ('mail', x'7b7d', 'dead', 1, 1, 'Boom', 'it broke', 5)"
        )
    conn.close()
    jobs = job.Jobs(kinds=[Mail], store=table)
    try:
        async with client(dashboard_app(jobs, payloads=True)) as http:
            rows = await http.get("/rows?state=dead")
            row = await http.get("/rows/1")
    finally:
        await table.close()
    assert (rows.status_code, row.status_code) == (200, 200)
    marker = '<span class="unreadable">unreadable: its payload is stored as a BLOB, not text</span>'
    assert marker in rows.text
    assert '<dd id="f-unreadable"><span class="unreadable">its payload is stored as a BLOB' in (
        row.text
    )
    assert '<span class="unreadable">cannot be read</span>' in row.text


# -------------------------------------------------------------------- secret and actions


async def test_without_a_secret_every_post_is_refused(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, row = dead_one
    paths = ("/login", "/logout", f"/rows/{row}/retry", f"/rows/{row}/cancel", "/bulk",
             "/pause", "/resume")  # fmt: skip
    async with client(dashboard_app(jobs)) as http:
        answers = [
            await http.post(
                path,
                data={"secret": SECRET, "csrf": "x", "act": "retry:all", "kind": "mail"},
                headers=ORIGIN,
            )
            for path in paths
        ]
    assert [(a.status_code, a.text) for a in answers] == [
        (403, "this dashboard is read-only: no secret is configured")
    ] * 7
    assert await jobs.stats() == (0, 0, 1)
    assert await jobs.paused() == {}


async def test_log_in_retry_a_dead_row_and_cancel_a_queued_one(
    dead_one: tuple[job.Jobs, int],
) -> None:
    jobs, row = dead_one
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        before = (await http.get("/")).text
        assert 'id="login-form"' in before
        assert f'id="retry-{row}"' not in before

        answer = await http.post("/login", data={"secret": SECRET}, headers=ORIGIN)
        assert (answer.status_code, answer.headers["location"]) == (303, "/?did=logged_in")
        cookie = answer.headers["set-cookie"]
        assert re.fullmatch(
            r"nilo_job_dashboard=v1\.\d+\.[0-9a-f]{32}\.[0-9a-f]{64}; HttpOnly; Max-Age=28800; "
            r"Path=/; SameSite=strict",
            cookie,
        )
        page = (await http.get("/?did=logged_in")).text
        assert '<p class="flash" id="flash" role="status">Logged in: the actions are on.</p>' in (
            page
        )
        assert f'<form method="post" action="/rows/{row}/retry" class="inline">' in page
        token = csrf(page)

        answer = await http.post(f"/rows/{row}/retry", data={"csrf": token}, headers=ORIGIN)
        assert (answer.status_code, answer.headers["location"]) == (
            303,
            f"/rows/{row}?did=retried&row={row}",
        )
        assert await jobs.stats() == (1, 0, 0)
        page = (await http.get(answer.headers["location"])).text
        assert flash(page) == f"Row {row} is queued again, from its first attempt."
        assert f'<form method="post" action="/rows/{row}/cancel" class="inline">' in page

        again = await http.post(f"/rows/{row}/retry", data={"csrf": token}, headers=ORIGIN)
        assert again.headers["location"] == f"/rows/{row}?did=not_retried&row={row}"
        page = (await http.get(again.headers["location"])).text
        assert (
            f'<p class="flash refused" id="flash" role="status">Row {row} is not dead any more; '
            "nothing changed.</p>"
        ) in page

        answer = await http.post(f"/rows/{row}/cancel", data={"csrf": token}, headers=ORIGIN)
        assert answer.headers["location"] == f"/rows?state=queued&did=cancelled&row={row}"
        page = (await http.get(answer.headers["location"])).text
        assert flash(page) == f"Row {row} was taken out of the queue."
        assert await jobs.stats() == (0, 0, 0)
        answer = await http.post(f"/rows/{row}/cancel", data={"csrf": token}, headers=ORIGIN)
        assert answer.headers["location"] == f"/rows/{row}?did=not_cancelled&row={row}"

        answer = await http.post("/logout", data={"csrf": token}, headers=ORIGIN)
        assert answer.headers["location"] == "/?did=logged_out"
        assert answer.headers["set-cookie"].startswith('nilo_job_dashboard=""; expires=')
        page = (await http.get("/")).text
        assert 'id="login-form"' in page


async def test_a_flash_is_only_what_the_dashboard_says(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, _row = dead_one
    async with client(dashboard_app(jobs)) as http:
        pages = [
            (await http.get(path)).text
            for path in (
                "/?did=retried&row=<b>",
                "/?did=paused&kind=<b>",
                "/?did=bulk&verb=retry&n=x&of=2",
                "/?did=whatever",
                "/?did=paused&kind=mail",
                "/rows?did=bulk&verb=delete&n=2&of=3",
            )
        ]
    assert ['id="flash"' in page for page in pages] == [False] * 4 + [True] * 2
    assert flash(pages[4]) == "mail is paused: no process starts its rows until it is resumed."
    assert flash(pages[5]) == "2 of 3 rows deleted: the others had changed meanwhile."


async def test_the_wrong_secret_is_a_403_that_changes_nothing(
    dead_one: tuple[job.Jobs, int],
) -> None:
    jobs, row = dead_one
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        answer = await http.post("/login", data={"secret": SECRET + "!"}, headers=ORIGIN)
        assert answer.status_code == 403
        assert "set-cookie" not in answer.headers
        assert (
            'class="flash refused" id="flash" role="status">That is not the secret.' in answer.text
        )
        refused = [
            await http.post(path, data={"csrf": "0" * 64, "kind": "mail"}, headers=ORIGIN)
            for path in (f"/rows/{row}/retry", "/bulk", "/pause")
        ]
    assert [(a.status_code, a.text) for a in refused] == [(403, "log in with the secret first")] * 3
    assert await jobs.stats() == (0, 0, 1)


async def test_cross_site_and_forged_posts_are_refused(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, row = dead_one
    foreign = "refused: the form was not sent from this dashboard"
    forged = "refused: the form's CSRF token is not this session's"
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        other = Sessions(SECRET, 3_600)
        answers = []
        for path in (f"/rows/{row}/retry", "/bulk", "/pause"):
            data = {"csrf": token, "act": "retry:all", "state": "dead", "confirm": "yes",
                    "at_most": "1", "kind": "mail"}  # fmt: skip
            answers += [
                # No Origin and no Referer.
                await http.post(path, data=data),
                # Another site's Origin, and another site's Referer.
                await http.post(path, data=data, headers={"origin": "https://evil.test"}),
                await http.post(path, data=data, headers={"referer": "https://evil.test/"}),
                await http.post(path, data=data, headers={"origin": "null"}),
                # The right origin, without a token, with a wrong one, with another session's.
                await http.post(path, data={**data, "csrf": ""}, headers=ORIGIN),
                await http.post(path, data={**data, "csrf": "0" * 64}, headers=ORIGIN),
                await http.post(
                    path, data={**data, "csrf": other.csrf("someone-else")}, headers=ORIGIN
                ),
                # Not a form.
                await http.post(path, json=data, headers=ORIGIN),
                await http.post(path, content=b"csrf=" + b"a" * 41_000, headers={**ORIGIN, **FORM}),
            ]  # fmt: skip
        answers.append(
            await http.post("/login", data={"secret": SECRET}, headers={"origin": "https://evil.test"})
        )  # fmt: skip
    assert [(a.status_code, a.text) for a in answers] == [
        (403, foreign),
        (403, foreign),
        (403, foreign),
        (403, foreign),
        (403, forged),
        (403, forged),
        (403, forged),
        (415, "send an application/x-www-form-urlencoded form"),
        (413, "a form is at most 40960 bytes"),
    ] * 3 + [(403, foreign)]
    assert await jobs.stats() == (0, 0, 1)
    assert await jobs.paused() == {}


async def test_a_same_origin_referer_or_a_trusted_origin_is_accepted(
    dead_one: tuple[job.Jobs, int],
) -> None:
    jobs, row = dead_one
    app = dashboard_app(jobs, secret=SECRET, origins=["https://ops.example.com/"])
    async with client(app) as http:
        token = await login(http)
        by_referer = await http.post(
            f"/rows/{row}/retry",
            data={"csrf": token},
            headers={"referer": "http://testserver/?did=logged_in"},
        )
        assert by_referer.status_code == 303
        assert await jobs.cancel(row)
        trusted = await http.post(
            "/login", data={"secret": SECRET}, headers={"origin": "https://OPS.example.com"}
        )
        assert trusted.status_code == 303


async def test_a_session_expires_and_is_bound_to_its_secret() -> None:
    sessions = Sessions(SECRET, 3_600)
    cookie = sessions.issue(1_000)
    nonce = sessions.session(cookie, 1_000)
    assert nonce is not None
    assert sessions.session(cookie, 4_599) == nonce
    assert sessions.session(cookie, 4_600) is None  # expired
    assert sessions.session(cookie, 999) is None  # issued in the future
    assert Sessions(SECRET + "x", 3_600).session(cookie, 1_000) is None
    version, issued, nonce_part, mac = cookie.split(".")
    assert sessions.session(f"{version}.{issued}.{nonce_part}.{'0' * 64}", 1_000) is None
    assert sessions.session(f"{version}.999999.{nonce_part}.{mac}", 1_000) is None
    assert sessions.session(f"v2.{issued}.{nonce_part}.{mac}", 1_000) is None
    assert sessions.session("garbage", 1_000) is None
    assert sessions.session(None, 1_000) is None
    assert sessions.csrf_matches(nonce, sessions.csrf(nonce))
    assert not sessions.csrf_matches(nonce, sessions.csrf(nonce + "0"))
    assert sessions.secret_matches(SECRET)
    assert not sessions.secret_matches(SECRET[:-1])


async def test_an_expired_cookie_cannot_retry(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, row = dead_one
    old = Sessions(SECRET, 60).issue(1_000)  # long expired
    nonce = old.split(".")[2]
    async with client(dashboard_app(jobs, secret=SECRET, session_s=60)) as http:
        http.cookies.set("nilo_job_dashboard", old)
        answer = await http.post(
            f"/rows/{row}/retry", data={"csrf": Sessions(SECRET, 60).csrf(nonce)}, headers=ORIGIN
        )
    assert (answer.status_code, answer.text) == (403, "log in with the secret first")
    assert await jobs.stats() == (0, 0, 1)


def test_settings_are_refused_with_the_fix() -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    with pytest.raises(job.Refusal, match=r"is 5 characters; use at least 16 \("):
        dashboard_app(jobs, secret="short")
    with pytest.raises(job.Refusal, match="takes a str, not bytes"):
        dashboard_app(jobs, secret=b"0123456789abcdef0123")  # type: ignore[arg-type]
    with pytest.raises(job.Refusal, match=r"limit=0\) takes a positive int, at most 1,000"):
        dashboard_app(jobs, limit=0)
    with pytest.raises(job.Refusal, match=r"limit=1001\) takes a positive int, at most 1,000"):
        dashboard_app(jobs, limit=1_001)
    with pytest.raises(job.Refusal, match=r"session_s=0\) takes a positive int"):
        dashboard_app(jobs, secret=SECRET, session_s=0)
    with pytest.raises(job.Refusal, match="a list of origins, not one str"):
        dashboard_app(jobs, origins="https://ops.example.com")


# --------------------------------------------------------------------------- bulk actions


def confirm_fields(page: str) -> dict[str, list[str]]:
    """The hidden fields of the confirmation form."""
    found = re.search(
        r'<form method="post" action="[^"]*/bulk" id="confirm-form">(.*?)</form>', page
    )
    assert found is not None, "no confirmation form"
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(
        r'<input type="hidden" name="(\w+)" value="([^"]*)">', found.group(1)
    ):
        fields.setdefault(name, []).append(value)
    return fields  # fmt: skip


def confirm_what(page: str) -> str:
    found = re.search(r'<p id="confirm-what">(.*?)</p>', page)
    assert found is not None, "no confirmation sentence"
    return text(found.group(1))


async def test_bulk_retry_of_a_filter_confirms_the_count_then_acts(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    rejected = await dead_rows(jobs, t, "bad1@x", "bounce1@x", "bad2@x", "bad3@x")
    del rejected[1]
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        page = (await http.get("/rows?state=dead&kind=mail&error=Rejected")).text
        assert '<button type="submit" name="act" value="retry:all" id="retry-all">Retry all 3 ' in (
            page
        )
        assert 'id="cancel-all"' not in page  # cancel is for queued rows
        ask = {"csrf": token, "act": "retry:all", "state": "dead", "kind": "mail",
               "error": "Rejected"}  # fmt: skip
        first = await http.post("/bulk", data=ask, headers=ORIGIN)
        assert first.status_code == 200
        assert confirm_what(first.text) == (
            "Retry 3 rows: the dead rows of mail that failed with Rejected."
        )
        assert await jobs.stats() == (0, 0, 4)  # nothing done yet
        fields = confirm_fields(first.text)
        assert fields == {
            "csrf": [token], "act": ["retry:all"], "confirm": ["yes"], "at_most": ["3"],
            "state": ["dead"], "kind": ["mail"], "error": ["Rejected"],
        }  # fmt: skip
        # One more row fails the same way before the operator confirms: only 3 are retried.
        await dead_rows(jobs, t + 10 * S, "bad4@x")
        second = await http.post("/bulk", data=fields, headers=ORIGIN)
        assert (second.status_code, second.headers["location"]) == (
            303,
            "/rows?state=dead&kind=mail&error=Rejected&did=bulk&verb=retry&n=3&of=3",
        )
        after = (await http.get(second.headers["location"])).text
    assert flash(after) == "3 rows queued again."
    assert await jobs.stats() == (3, 0, 2)
    queued = (await jobs.find(job.Where(state="queued"))).rows
    assert all(row.attempts == 0 and row.kind == "mail" for row in queued)
    dead = (await jobs.find(job.Where(state="dead"))).rows
    assert sorted(row.error for row in dead) == ["Bounced", "Rejected"]


async def test_bulk_actions_on_ticked_rows(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    dead = await dead_rows(jobs, t, "bad1@x", "bad2@x", "bad3@x")
    queued = [await jobs.push(Mail(to=f"q{n}@x"), at=t + 3_600 * S) for n in range(3)]
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        page = (await http.get("/rows?state=dead")).text
        assert [int(n) for n in re.findall(r'name="id" value="(\d+)" form="bulk"', page)] == (
            dead[::-1]
        )
        outcomes = []
        for act, ids in (
            ("retry:selected", [dead[0], dead[1], queued[0]]),  # the queued one is not dead
            ("cancel:selected", [queued[1], queued[2], dead[2]]),
            ("delete:selected", [dead[2]]),
        ):
            form = {"csrf": token, "act": act, "id": [str(i) for i in ids], "state": "dead"}
            first = await http.post("/bulk", data=form, headers=ORIGIN)
            fields = confirm_fields(first.text)
            assert fields["id"] == [str(i) for i in ids]
            second = await http.post("/bulk", data=fields, headers=ORIGIN)
            outcomes.append((confirm_what(first.text), second.headers["location"]))
    assert outcomes == [
        ("Retry 2 rows: the dead rows among 3 ids.",
         "/rows?state=dead&did=bulk&verb=retry&n=2&of=2"),
        ("Cancel 2 rows: the queued rows among 3 ids.",
         "/rows?state=dead&did=bulk&verb=cancel&n=2&of=2"),
        ("Delete 1 row: the dead and done rows among 1 ids.",
         "/rows?state=dead&did=bulk&verb=delete&n=1&of=1"),
    ]  # fmt: skip
    assert await jobs.stats() == (3, 0, 0)
    assert sorted(row.id for row in (await jobs.find(job.Where(state="queued"))).rows) == sorted(
        [dead[0], dead[1], queued[0]]
    )


async def test_bulk_delete_and_cancel_of_a_filter(t: int) -> None:
    jobs = job.Jobs(kinds=[Mail, Resize], store=job.Memory())
    await dead_rows(jobs, t, "bad1@x", "bad2@x")
    done = await jobs.push(Mail(to="ok@x"), at=t)
    assert await jobs.drain_at(t) == 1
    for n in range(4):
        await jobs.push(Resize(n=n), at=t + 3_600 * S)
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        asked = []
        for form in (
            {"act": "delete:all", "kind": "mail"},  # no state: dead and done rows
            {"act": "cancel:all", "state": "queued", "kind": "resize"},
        ):
            first = await http.post("/bulk", data={"csrf": token, **form}, headers=ORIGIN)
            asked.append(confirm_what(first.text))
            second = await http.post("/bulk", data=confirm_fields(first.text), headers=ORIGIN)
            assert second.status_code == 303
    assert asked == [
        "Delete 3 rows: the dead and done rows of mail.",
        "Cancel 4 rows: the queued rows of resize.",
    ]
    assert await jobs.stats() == job.Stats(0, 0, 0, 0)
    assert await jobs.row(done) is None


async def test_bulk_forms_that_cannot_be_done_say_why(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, row = dead_one
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        answers = [
            await http.post("/bulk", data={"csrf": token, **form}, headers=ORIGIN)
            for form in (
                {"act": "explode:all"},
                {"act": "retry:selected"},
                {"act": "retry:selected", "id": "seven"},
                {"act": "retry:all", "state": "queued"},
                {"act": "retry:all", "state": "finished"},
                {"act": "retry:selected", "id": [str(n) for n in range(1, 1_002)]},
            )
        ]
        too_many = await http.post(
            "/bulk",
            content="&".join([f"csrf={token}", *[f"id={n}" for n in range(1_020)]]).encode(),
            headers={**ORIGIN, **FORM},
        )
        nothing = await http.post(
            "/bulk", data={"csrf": token, "act": "retry:all", "kind": "other"}, headers=ORIGIN
        )
        no_count = await http.post(
            "/bulk",
            data={"csrf": token, "act": "retry:all", "confirm": "yes", "at_most": "many"},
            headers=ORIGIN,
        )
    assert [(a.status_code, flash(a.text)) for a in answers] == [
        (400, "Nothing was done: the form does not say which action to take."),
        (400, "Nothing was done: no row is ticked: tick the rows to act on, or use the button "
              "for all of them."),
        (400, "Nothing was done: &#x27;seven&#x27; is not a row id."),
        (400, "Nothing was done: Retry acts on dead rows, not queued ones."),
        (400, "Nothing was done: &#x27;finished&#x27; is not a state."),
        (400, "Nothing was done: at most 1,000 rows at once."),
    ]  # fmt: skip
    assert (too_many.status_code, too_many.text) == (413, "a form has at most 1016 fields")
    assert nothing.status_code == 200
    assert confirm_what(nothing.text) == (
        "No row is one of the dead rows of other: there is nothing to retry."
    )
    assert 'id="confirm-form"' not in nothing.text
    assert (no_count.status_code, no_count.text) == (
        400,
        "refused: the form does not say how many rows",
    )
    assert await jobs.stats() == (0, 0, 1)
    assert row == 1


async def test_a_page_of_1000_ticked_rows_fits_in_a_form(t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory(bytes=1 << 22))
    await jobs.push_many([Mail(to=f"q{n}@x") for n in range(1_000)], at=t + 3_600 * S)
    ids = [row.id for row in (await jobs.find(job.Where(state="queued"), limit=1_000)).rows]
    async with client(dashboard_app(jobs, secret=SECRET, limit=1_000)) as http:
        token = await login(http)
        page = (await http.get("/rows?state=queued")).text
        assert len(re.findall(r'name="id" value="\d+" form="bulk"', page)) == 1_000
        form = {"csrf": token, "act": "cancel:selected", "id": [str(i) for i in ids]}
        first = await http.post("/bulk", data=form, headers=ORIGIN)
        assert confirm_what(first.text) == "Cancel 1,000 rows: the queued rows among 1000 ids."
        second = await http.post("/bulk", data=confirm_fields(first.text), headers=ORIGIN)
    assert second.headers["location"] == "/rows?did=bulk&verb=cancel&n=1000&of=1000"
    assert await jobs.stats() == (0, 0, 0)


async def test_a_store_that_fails_during_a_bulk_action_is_a_503_with_a_sentence(t: int) -> None:
    store = job.Memory()
    jobs = job.Jobs(kinds=[Mail], store=store)
    await dead_rows(jobs, t, "bad@x")

    async def broken(ids: list[int], now_us: int) -> list[int]:
        raise job.StoreUnavailable("the database went away")

    store.retry_many = broken  # type: ignore[method-assign]
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        form = {"csrf": token, "act": "retry:all", "state": "dead", "confirm": "yes",
                "at_most": "1"}  # fmt: skip
        answer = await http.post("/bulk", data=form, headers=ORIGIN)
    assert (answer.status_code, answer.text) == (
        503,
        "the dashboard could not do that: the database went away",
    )


# ------------------------------------------------------------------------------- pausing


async def test_pause_and_resume_a_kind(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail, Resize], store=store)
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        page = (await http.get("/")).text
        assert 'id="pause-mail"' in page
        assert 'id="resume-mail"' not in page
        paused = await http.post("/pause", data={"csrf": token, "kind": "mail"}, headers=ORIGIN)
        twice = await http.post("/pause", data={"csrf": token, "kind": "mail"}, headers=ORIGIN)
        assert list(await jobs.paused()) == ["mail"]
        page = (await http.get(paused.headers["location"])).text
        # Pushes are still taken; the paused kind's rows wait, the others run.
        await jobs.push(Mail(to="a@x"), at=t)
        await jobs.push(Resize(n=1), at=t)
        assert await jobs.drain_at(t) == 1
        resumed = await http.post("/resume", data={"csrf": token, "kind": "mail"}, headers=ORIGIN)
        again = await http.post("/resume", data={"csrf": token, "kind": "mail"}, headers=ORIGIN)
        after = (await http.get("/")).text
        unknown = await http.post("/pause", data={"csrf": token, "kind": "nope"}, headers=ORIGIN)
    assert [a.headers["location"] for a in (paused, twice, resumed, again)] == [
        "/?did=paused&kind=mail",
        "/?did=was_paused&kind=mail",
        "/?did=resumed&kind=mail",
        "/?did=not_paused&kind=mail",
    ]
    assert flash(page) == "mail is paused: no process starts its rows until it is resumed."
    assert '<span class="badge paused" id="paused-mail">paused</span>' in page
    assert 'id="resume-mail"' in page
    assert 'id="pause-mail"' not in page
    assert 'id="paused-resize"' not in page
    assert 'id="paused-mail"' not in after
    assert 'id="pause-mail"' in after
    assert await jobs.paused() == {}
    assert await jobs.drain_at(t) == 1
    assert (unknown.status_code, unknown.text) == (
        400,
        "refused: 'nope' is not a kind of this queue (mail, resize)",
    )


# ------------------------------------------------------------------------------ mounting


async def test_mounted_under_a_prefix(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, row = dead_one
    app = Starlette(routes=[Mount("/ops/jobs", app=dashboard_app(jobs, secret=SECRET))])
    async with client(app) as http:
        page = (await http.get("/ops/jobs/")).text
        assert '<link rel="stylesheet" href="/ops/jobs/static/dashboard.css">' in page
        assert '<script src="/ops/jobs/static/dashboard.js" defer></script>' in page
        assert '<form method="post" action="/ops/jobs/login" id="login-form">' in page
        assert '<a href="/ops/jobs/rows" id="nav-rows">' in page
        assert f'<a href="/ops/jobs/rows/{row}">{row}</a>' in page
        answer = await http.post("/ops/jobs/login", data={"secret": SECRET}, headers=ORIGIN)
        assert "; Path=/ops/jobs/; " in answer.headers["set-cookie"]
        token = csrf((await http.get("/ops/jobs/")).text)
        rows = (await http.get("/ops/jobs/rows?state=dead")).text
        assert '<form method="post" action="/ops/jobs/bulk" id="bulk" class="bulk">' in rows
        answer = await http.post(
            f"/ops/jobs/rows/{row}/retry", data={"csrf": token}, headers=ORIGIN
        )
        assert answer.headers["location"] == f"/ops/jobs/rows/{row}?did=retried&row={row}"
        answer = await http.post(
            "/ops/jobs/pause", data={"csrf": token, "kind": "mail"}, headers=ORIGIN
        )
        assert answer.headers["location"] == "/ops/jobs/?did=paused&kind=mail"
        assert (await http.get("/ops/jobs/static/dashboard.css")).status_code == 200
    assert await jobs.stats() == (1, 0, 0)


async def test_a_measured_queue_shows_the_same(t: int) -> None:
    jobs = job.Jobs(kinds=[Mail, Nightly], store=job.Memory())
    Metrics(jobs)
    await jobs.seed_at(t)
    async with client(dashboard_app(jobs)) as http:
        page = (await http.get("/")).text
    tick = Nightly.schedule.next(t)
    assert text(re.findall(r'class="next-tick">(.*?)</td>', page)[0]) == f"{utc(tick)}, row 1"


# ------------------------------------------------------------------------------ command


QUEUE_MODULE = """
import os
from dataclasses import dataclass

import nilo_job as job


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str

    def run(self) -> None:
        raise ValueError("no")


jobs = job.Jobs(kinds=[Mail], store=job.Table("sqlite:///" + os.environ["QUEUE_DB"]))
"""


@pytest.fixture
def queue_module(tmp_path: Path) -> dict[str, str]:
    """A module `dash_queue:jobs` in tmp_path over a SQLite file holding one dead row; the
    environment for a command run in tmp_path."""
    (tmp_path / "dash_queue.py").write_text(QUEUE_MODULE)
    env = {**os.environ, "QUEUE_DB": str(tmp_path / "q.db"), "PYTHONUNBUFFERED": "1"}
    env.pop("NILO_DASHBOARD_SECRET", None)
    script = (
        "import asyncio, dash_queue as q\n"
        "async def main():\n"
        "    await q.jobs.store.create_missing()\n"
        "    await q.jobs.push(q.Mail(to='x'))\n"
        "    assert await q.jobs.drain() == 1\n"
        "    await q.jobs.store.close()\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, check=True, timeout=60)
    return env


def nilo_job_command(*args: str) -> list[str]:
    return [sys.executable, "-c", "from nilo_job.cli import main; main()", *args]


def test_the_command_serves_the_dashboard(queue_module: dict[str, str], tmp_path: Path) -> None:
    command = nilo_job_command(
        "dashboard", "dash_queue:jobs", "--port", "0", "--secret-env", "OPS_SECRET"
    )
    env = {**queue_module, "OPS_SECRET": SECRET}
    lines: queue.Queue[str] = queue.Queue()
    with subprocess.Popen(
        command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    ) as proc:
        stderr = proc.stderr
        assert stderr is not None
        reader = threading.Thread(target=lambda: [lines.put(line) for line in stderr], daemon=True)
        reader.start()
        try:
            first = lines.get(timeout=60)
            found = re.fullmatch(
                r"nilo-job dashboard on (http://127\.0\.0\.1:\d+)/ \(log in with \$OPS_SECRET "
                r"to act on rows\)\n",
                first,
            )
            assert found is not None, first
            base = found.group(1)
            with httpx.Client(base_url=base, timeout=30) as http:
                assert counts(http.get("/").text) == {
                    "queued": 0,
                    "running": 0,
                    "dead": 1,
                    "done": 0,
                }
                answer = http.post("/login", data={"secret": SECRET}, headers={"origin": base})
                assert answer.status_code == 303
                page = http.get("/").text
                (row,) = re.findall(r'id="retry-(\d+)"', page)
                answer = http.post(
                    f"/rows/{row}/retry", data={"csrf": csrf(page)}, headers={"origin": base}
                )
                assert answer.status_code == 303
                assert counts(http.get("/").text) == {
                    "queued": 1,
                    "running": 0,
                    "dead": 0,
                    "done": 0,
                }
        finally:
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=30)
            reader.join(timeout=30)
    rest = "".join(lines.get_nowait() for _ in range(lines.qsize()))
    assert code == 0, rest
    assert re.fullmatch(r"[\d :,-]+ INFO nilo_job: dashboard: row 1 queued again\n", rest), rest


def test_the_command_refuses_a_short_secret(queue_module: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run(
        nilo_job_command("dashboard", "dash_queue:jobs", "--port", "0"),
        cwd=tmp_path,
        env={**queue_module, "NILO_DASHBOARD_SECRET": "short"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(
        "Error: $NILO_DASHBOARD_SECRET: dashboard_app(secret=...) is 5 characters; use at least 16"
    )
