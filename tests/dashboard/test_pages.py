"""The dashboard's pages over HTTP (httpx in process), on every store: the overview with its counts,
rows, schedules and flow charts, the rows page with its filters and keyset pages, a row's page with
its whole story, an unreadable row, a store of your own, a store that fails, the headers and
static files, the app mounted under a prefix or given a measured queue, filter values refused,
the error filter's list, payloads cut between JSON tokens, and a cron kind's next and last runs."""

import contextlib
import html
import re
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

import nilo_job as job
from nilo_job._base.text import duration
from nilo_job.dashboard import _rows, dashboard_app
from nilo_job.dashboard._render import relative
from nilo_job.metrics import Metrics
from nilo_job.store.contract import NewRow, RowView, Store
from tests.helpers.dashboard import (
    CSP,
    MINUTE,
    ORIGIN,
    SECRET,
    Mail,
    Nightly,
    Pulse,
    Rejected,
    Resize,
    S,
    cells,
    client,
    counts,
    csrf,
    dead_rows,
    iso,
    listed,
    login,
    minutes,
    per_kind,
    read_at,
    stats,
    text,
    utc,
)


@dataclass
class Order:
    nilo_job = "order"
    retry = job.Retry.NONE

    items: list[int]

    def run(self) -> None:
        pass


@dataclass
class Flaky:
    nilo_job = "flaky"
    retry = job.Retry(times=3, backoff=job.Fixed(ms=60_000))

    def run(self) -> None:
        raise TimeoutError("the server did not answer")


@dataclass
class Tidy:
    nilo_job = "tidy"
    retry = job.Retry.NONE
    schedule = job.cron("*/30 * * * *")
    overlap = job.Overlap.SKIP
    missed = job.Missed.DROP

    def run(self) -> None:
        pass


@dataclass
class Audit:
    nilo_job = "audit"
    retry = job.Retry.NONE
    schedule = job.cron("*/30 * * * *")
    overlap = job.Overlap.SKIP
    missed = job.Missed.DROP

    def run(self) -> None:
        raise Rejected("the audit failed")


def problem_of(page: str) -> str:
    """The page's problem sentence, as text."""
    found = re.search(r'<p class="problem" id="problem">(.*?)</p>', page)
    assert found is not None, "no problem on the page"
    return html.unescape(found.group(1))


# ------------------------------------------------------------------------- the overview


async def test_the_overview_shows_counts_rows_and_schedules(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail, Nightly, Pulse], store=store)
    (dead,) = await dead_rows(jobs, t, "bad@example.com")
    done = await jobs.push(Mail(to="ok@example.com"), at=t)
    assert await jobs.drain_at(t) == 1
    later = await jobs.push(Mail(to="a@example.com"), at=t + 60 * S, unique="welcome:7")
    running = await jobs.push(Mail(to="b@example.com"), at=t)
    (claimed,) = await store.claim(["mail"], t + S, t + 61 * S, 1, "web-7.internal:4242")
    assert claimed.id == running
    await store.push([NewRow("theirs", b"{}", t)])
    await jobs.seed_at(t)

    async with client(dashboard_app(jobs)) as http:
        hidden = await http.get("/")
    async with client(dashboard_app(jobs, payloads=True)) as http:
        answer = await http.get("/")
    assert (hidden.status_code, answer.status_code) == (200, 200)
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
    row, kind, error, attempts, died, payload = cells(page, dead)
    assert [row, kind, attempts, died, payload] == [
        str(dead), "mail", "1", utc(t), '{"to":"bad@example.com"}',
    ]  # fmt: skip
    # The error's name (a link to the rows that failed with it), its message, and its
    # traceback folded away under "traceback".
    assert error.startswith("Rejected no such address tracebackTraceback (most recent call")
    assert error.endswith("Rejected: no such address&#10;")
    assert '<a href="/rows?state=dead&amp;kind=mail&amp;error=Rejected" class="error-link">' in page
    assert cells(page, later) == [
        str(later), "mail", utc(t + 60 * S), "0", "", "welcome:7", '{"to":"a@example.com"}',
    ]  # fmt: skip
    assert cells(page, running) == [
        str(running), "mail", utc(t), "1", utc(t + 61 * S), "web-7.internal:4242",
        '{"to":"b@example.com"}',
    ]  # fmt: skip
    assert f'id="row-{done}"' not in page  # done rows are counted and charted, not listed here
    nightly = utc(Nightly.schedule.next(t))
    schedules = [
        [text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r'<tr data-kind="\w+">(.*?)</tr>', page)
    ]
    after_nightly = utc(Nightly.schedule.next(Nightly.schedule.next(t)))
    assert schedules == [
        ["nightly", "0 3 * * * (Asia/Jakarta)", f"{nightly}, row {later + 3} then {after_nightly}",
         "none kept", "skip", "drop"],
        ["pulse", "every 600,000 ms", f"{utc(t + 600 * S)}, row {later + 4} then "
         f"{utc(t + 1_200 * S)}", "none kept", "queue", "catch_up"],
    ]  # fmt: skip
    # Read-only: no forms at all, and it says so.
    assert "<form" not in page
    assert 'id="read-only"' in page
    # Unless asked for, nothing a row carries of its users: the error's name only, no message
    # or traceback, no unique key, no worker, no payload; the rest as above.
    assert cells(hidden.text, dead) == [str(dead), "mail", "Rejected", "1", utc(t)]
    assert cells(hidden.text, later) == [str(later), "mail", utc(t + 60 * S), "0", ""]
    assert cells(hidden.text, running) == [str(running), "mail", utc(t), "1", utc(t + 61 * S)]
    for secret in ("no such address", "Traceback", "welcome:7", "web-7.internal", "@example"):
        assert secret not in hidden.text, secret
    assert counts(hidden.text) == counts(page)
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
    # Not seeded: a cron schedule's runs are fixed in time, so the page gives them all the same.
    planned = Nightly.schedule.next(read_at(before))
    assert text(re.findall(r'class="next-tick">(.*?)</td>', before)[0]) == (
        f"{utc(planned)} (not seeded yet) then {utc(Nightly.schedule.next(planned))}"
    )
    following = Nightly.schedule.next(max(tick, read_at(after)))
    assert text(re.findall(r'class="next-tick">(.*?)</td>', after)[0]) == (
        f"running now (the tick due {utc(tick)}) then {utc(following)}"
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
    tick = Nightly.schedule.next(t)
    assert [text(re.findall(r'class="next-tick">(.*?)</td>', page)[0]) for page in pages] == [
        f"{utc(tick)}, row 1 then {utc(Nightly.schedule.next(tick))}",
        # A tick long overdue: the one after it is the schedule's first after the page's moment.
        f"{utc(7 * S)}, row 42 then {utc(Nightly.schedule.next(read_at(pages[1])))}",
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
    assert (
        '<code class="json">{&quot;to&quot;:<wbr>&quot;&lt;script&gt;alert(1)&lt;/script&gt;'
        "&quot;}</code>"
    ) in page
    assert cells(page, long)[-1] == '{"to":"' + "x" * 153 + "…"
    assert cells(page, short)[-1] == '{"to":"&lt;script&gt;alert(1)&lt;/script&gt;"}'
    assert '<code class="json">{&quot;to&quot;:<wbr>&quot;' + "x" * 300 + "&quot;}</code>" in whole


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


class Unreachable(job.Memory):
    """A store that cannot be reached (`failure`), or that fails as no store should."""

    failure: Exception = job.StoreUnavailable("cannot reach PostgreSQL at db.internal:5432")

    async def counts(self) -> dict[tuple[str, str], int]:
        raise self.failure

    async def find(self, *args: object) -> list[RowView]:
        raise self.failure

    async def row(self, row_id: int) -> RowView | None:
        raise self.failure


async def test_a_store_that_cannot_be_read_is_a_503_that_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=Unreachable())
    paths = ("/", "/rows?state=dead", "/rows/7")
    caplog.set_level("WARNING", logger="nilo_job")
    async with client(dashboard_app(jobs)) as http:
        answers = [await http.get(path) for path in paths]
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        await login(http)
        operator = [await http.get(path) for path in paths]
    # A reader is told that it cannot, not where the store is; an operator is told why.
    problem = (
        '<p class="problem" id="problem">The store cannot be read; the server&#x27;s log says '
        "why.</p>"
    )
    assert [(a.status_code, problem in a.text) for a in answers] == [(503, True)] * 3
    assert all("db.internal" not in answer.text for answer in answers)
    told = (
        '<p class="problem" id="problem">The store cannot be read: StoreUnavailable: cannot '
        "reach PostgreSQL at db.internal:5432</p>"
    )
    assert [(a.status_code, told in a.text) for a in operator] == [(503, True)] * 3
    # A store that cannot be reached is expected: one WARNING line a page (seven, with the
    # overview the login lands on), no traceback.
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        (
            "WARNING",
            "dashboard: the store cannot be read: cannot reach PostgreSQL at db.internal:5432",
            None,
        )
    ] * 7
    # Anything else is a bug: an ERROR with its traceback, and the same page.
    caplog.clear()
    broken = Unreachable()
    broken.failure = KeyError("run_at")
    async with client(dashboard_app(job.Jobs(kinds=[Mail], store=broken))) as http:
        answer = await http.get("/rows/7")
    assert (answer.status_code, problem in answer.text) == (503, True)
    ((record,),) = [caplog.records]
    assert (record.levelname, record.getMessage()) == (
        "ERROR",
        "dashboard: the store cannot be read: 'run_at'",
    )
    assert record.exc_info is not None
    assert record.exc_info[0] is KeyError
    # The rows page claims no count it could not read.
    assert 'id="total"' not in answers[1].text
    assert (
        '<p class="empty" id="none">Nothing is listed: the store cannot be read. '
        '<a href="/rows" id="all-rows">List every row</a>.</p>'
    ) in answers[1].text


async def test_headers_static_files_and_methods() -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    async with client(dashboard_app(jobs, secret=SECRET, public_reads=True)) as http:
        page = await http.get("/")
        css = await http.get("/static/dashboard.css")
        js = await http.get("/static/dashboard.js")
        missing = await http.get("/static/other.js")
        wrong_method = await http.get("/rows/1/retry")
        wrong_bulk = await http.get("/bulk")
        no_page = await http.get("/rows/abc")
    for answer in (page, css, js, missing, no_page):
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
    assert no_page.status_code == 404
    assert '<p class="problem" id="missing">There is no page at this address.' in no_page.text
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
    assert '<option value="Rejected" selected>Rejected</option>' in rejected.text
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
    pushed = utc((await jobs.row(dead)).pushed_at)  # type: ignore[arg-type,union-attr]
    fields = dict(re.findall(r'<dd id="f-(\w+)">(.*?)</dd>', dead_shown))
    assert {name: text(value) for name, value in fields.items()} == {
        "kind": "mail",
        "state": "dead",
        "key": "–",
        "pushed": pushed,
        "due": utc(t),
        "started": utc(t),
        "died": utc(t),
        "attempts": "1",
        "snoozes": "0",
        "worker": worker,
    }
    assert '<p class="error" id="error-name">Rejected</p>' in dead_shown
    assert '<p class="message" id="message">no such address</p>' in dead_shown
    trace = re.search(r'<pre class="trace" id="traceback">(.*?)</pre>', dead_shown, re.S)
    assert trace is not None
    assert trace.group(1).startswith("Traceback (most recent call last):\n")
    assert trace.group(1).endswith("Rejected: no such address\n")
    # Without payloads=True: the error's name, and no message, traceback, key, worker or
    # payload; the page says what is hidden and how to show it.
    hidden_fields = dict(re.findall(r'<dd id="f-(\w+)">(.*?)</dd>', page))
    assert {name: text(value) for name, value in hidden_fields.items()} == {
        "kind": "mail",
        "state": "dead",
        "pushed": pushed,
        "due": utc(t),
        "started": utc(t),
        "died": utc(t),
        "attempts": "1",
        "snoozes": "0",
    }
    assert '<section id="error"><h2>Last error</h2><p class="error" id="error-name">Rejected</p>' \
        "</section>" in page  # fmt: skip
    for hidden in ("no such address", "Traceback", worker, "bad@example.com"):
        assert hidden not in page, hidden
    assert 'id="payload-hidden"' in page
    assert "<form" not in page  # read-only
    assert '<a href="/rows?state=dead&amp;kind=mail" id="back">' in page
    done_fields = dict(re.findall(r'<dd id="f-(\w+)">(.*?)</dd>', done_shown))
    assert [text(done_fields[name]) for name in ("state", "key", "finished")] == [
        "done", "welcome:9", utc(t + 2 * S),
    ]  # fmt: skip
    assert re.fullmatch(r"\d+ ms", text(done_fields["took"]))  # the run's real length
    assert "ok@example.com" not in done_hidden  # neither payload nor result
    assert "welcome:9" not in done_hidden
    assert (
        '<section id="payload"><h2>Payload</h2><code class="json">{&quot;to&quot;:<wbr>'
        "&quot;ok@example.com"
    ) in done_shown
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
        answer = await http.post("/ops/jobs/login", data={"secret": SECRET}, headers=ORIGIN)
        assert "; Path=/ops/jobs/; " in answer.headers["set-cookie"]
        page = (await http.get("/ops/jobs/")).text
        assert f'<a href="/ops/jobs/rows/{row}">{row}</a>' in page
        token = csrf(page)
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
    assert text(re.findall(r'class="next-tick">(.*?)</td>', page)[0]) == (
        f"{utc(tick)}, row 1 then {utc(Nightly.schedule.next(tick))}"
    )


# ------------------------------------------------------------ what the filters may hold


async def test_every_filter_value_a_page_cannot_read_is_refused_and_no_count_claimed(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Mail, Resize], store=store)
    dead = await dead_rows(jobs, t, "bad1@x", "bad2@x")
    (theirs,) = await store.push([NewRow("theirs", b"{}", t)])
    refused = {
        "/rows?state=bogus": "state='bogus': a row is queued, running, dead or done",
        "/rows?state=dead&kind=bogus": (
            "kind='bogus': no row is of that kind; this queue's kinds are mail, resize"
        ),
        "/rows?state=dead&page=x": "page='x': a whole number from 1",
        "/rows?state=dead&page=0": "page='0': a whole number from 1",
        "/rows?state=dead&seen=-3": "seen='-3': a whole number from 0",
        "/rows?state=dead&after=nope": "after='nope' is not a cursor find() gave (its Found.next)",
        "/rows?error=%00": (
            "Where(error='\\x00'): no row holds a NUL or a lone surrogate, which no store can keep"
        ),
    }
    nothing = (
        '<p class="empty" id="none">Nothing is listed: the filter above was refused. '
        '<a href="/rows" id="all-rows">List every row</a>.</p>'
    )
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        await login(http)
        answers = {path: await http.get(path) for path in refused}
        foreign = await http.get("/rows?kind=theirs")
        empty = await http.get("/rows?state=done&kind=resize")
        slow = await http.get("/?refresh=2")
        word = await http.get("/?refresh=soon")
    for path, answer in answers.items():
        page = answer.text
        assert answer.status_code == 400, path
        assert problem_of(page) == f"That filter cannot be read: {refused[path]}", path
        # Nothing is listed, no count is claimed, and nothing can be acted on.
        assert nothing in page, path
        assert (listed(page), 'id="total"' in page, 'id="bulk"' in page) == ([], False, False)
    # A kind another program wrote, and a kind of this queue with no rows, are filters.
    assert (foreign.status_code, listed(foreign.text)) == (200, [theirs])
    assert (empty.status_code, listed(empty.text)) == (200, [])
    assert '<p class="empty" id="none">No rows match.</p>' in empty.text
    # The overview's one value: refused, said, and the rest of the page as always.
    for answer, raw in ((slow, "2"), (word, "soon")):
        assert answer.status_code == 400
        assert problem_of(answer.text) == (
            f"That address cannot be read: refresh='{raw}': auto-refresh is every 5 to 3,600 "
            "seconds (a whole number); it is off"
        )
        assert 'http-equiv="refresh"' not in answer.text
        assert counts(answer.text) == {"queued": 1, "running": 0, "dead": 2, "done": 0}
        assert listed(answer.text) == [theirs, dead[1], dead[0]]


async def test_the_error_filter_offers_the_errors_seen(
    store: Store, t: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = job.Jobs(kinds=[Mail, Resize, Flaky], store=store)
    await dead_rows(jobs, t, "bad1@x", "bounce1@x", "bad2@x")  # Rejected, Bounced, Rejected
    await jobs.push(Resize(n=-1), at=t + 10 * S)  # dies: ValueError
    waiting = await jobs.push(Flaky(), at=t + 10 * S)  # queued for a retry: TimeoutError
    assert await jobs.drain_at(t + 10 * S) == 2
    assert (await jobs.row(waiting)).state == "queued"  # type: ignore[union-attr]

    def choice(page: str) -> list[str]:
        found = re.search(r'<select name="error" id="f-error">(.*?)</select>', page)
        assert found is not None, "no error filter"
        return re.findall(r"<option ([^>]*)>", found.group(1))

    async with client(dashboard_app(jobs)) as http:
        seen = (await http.get("/rows")).text
        chosen = (await http.get("/rows?state=dead&error=KeyError")).text
        monkeypatch.setattr(_rows, "ERRORS_LISTED", 2)
        commonest = (await http.get("/rows")).text
        monkeypatch.setattr(_rows, "ERRORS_LISTED", 50)
        monkeypatch.setattr(_rows, "ERRORS_READ", 1)
        newest = (await http.get("/rows")).text
    names = ["Bounced", "Rejected", "TimeoutError", "ValueError"]
    assert choice(seen) == ['value="" selected', *(f'value="{name}"' for name in names)]
    # An error chosen in the address (a link from an error's name) stays chosen.
    assert choice(chosen) == [
        'value=""',
        *(f'value="{name}"' for name in names),
        'value="KeyError" selected',
    ]
    assert listed(chosen) == []
    # Bounded: the commonest when there are more than ERRORS_LISTED, and only the errors of
    # the ERRORS_READ newest dead rows and first queued rows.
    assert choice(commonest) == ['value="" selected', 'value="Rejected"', 'value="ValueError"']
    assert choice(newest) == ['value="" selected', 'value="TimeoutError"', 'value="ValueError"']


async def test_a_payload_is_cut_and_wrapped_between_tokens_never_inside_a_number(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Mail, Order], store=store)
    numbers = await jobs.push(Order(items=[1_234_567 + n for n in range(30)]), at=t)
    quotes = await jobs.push(Mail(to='"' * 200), at=t + S)
    async with client(dashboard_app(jobs, payloads=True)) as http:
        page = (await http.get("/rows?state=queued")).text
        whole = (await http.get(f"/rows/{numbers}")).text
    # 160 characters hold 18 numbers and the start of the 19th: the cut falls before it.
    kept = ",".join(str(1_234_567 + n) for n in range(18))
    assert cells(page, numbers)[-1] == '{"items":[' + kept + ",…"
    # A string is cut inside, but never inside an escape: 76 whole \" and not half of one.
    assert cells(page, quotes)[-1] == '{"to":"' + '\\"' * 76 + "…"
    # A line may break after each , and : and nowhere else.
    assert '<code class="json">{&quot;items&quot;:<wbr>[1234567,<wbr>1234568,<wbr>' in page
    every = ",<wbr>".join(str(1_234_567 + n) for n in range(30))
    assert f'<code class="json">{{&quot;items&quot;:<wbr>[{every}]}}</code>' in whole


async def test_a_cron_kind_shows_its_next_runs_and_its_last_run(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Tidy, Audit], store=store)
    schedule = Tidy.schedule  # Audit's is the same
    async with client(dashboard_app(jobs)) as http:
        before = (await http.get("/")).text
        await jobs.seed_at(t)
        tick = schedule.next(t)
        assert await jobs.drain_at(tick) == 2  # tidy is done, audit dies
        after = (await http.get("/")).text
    done = (await jobs.find(job.Where(state="done", kind="tidy"))).rows[0].id
    died = (await jobs.find(job.Where(state="dead", kind="audit"))).rows[0].id
    ticks = {row.kind: row.id for row in await store.holding("schedule", ["audit", "tidy"])}

    def schedules(page: str) -> dict[str, list[str]]:
        return {
            kind: [text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)][2:4]
            for kind, row in re.findall(r'<tr data-kind="(\w+)">(.*?)</tr>', page)
        }

    # Before any worker seeded them: the runs the cron expression gives, read from the page's
    # own moment; no run is kept yet.
    planned = schedule.next(read_at(before))
    expected = [f"{utc(planned)} (not seeded yet) then {utc(schedule.next(planned))}", "none kept"]
    assert schedules(before) == {"tidy": expected, "audit": expected}
    # After a run: the next tick's row, the run after it, and how the last run ended.
    coming = schedule.next(tick)
    assert schedules(after) == {
        "tidy": [
            f"{utc(coming)}, row {ticks['tidy']} then {utc(schedule.next(coming))}",
            f"{utc(tick)}, done, row {done}",
        ],
        "audit": [
            f"{utc(coming)}, row {ticks['audit']} then {utc(schedule.next(coming))}",
            f"{utc(tick)}, died, row {died}",
        ],
    }
    assert f'<a href="/rows/{died}">row {died}</a>' in after
