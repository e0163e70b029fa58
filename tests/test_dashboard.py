"""The dashboard over HTTP (httpx in process, and the `nilo-job dashboard` command): what the page
shows on every store, the secret, the session and its CSRF token, the origin check, a prefix.

The browser drives it in tests/test_dashboard_browser.py.
"""

import os
import queue
import re
import signal
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
from nilo_job.dashboard._render import relative
from nilo_job.dashboard._session import Sessions
from nilo_job.metrics import Metrics
from nilo_job.store.contract import RowView, Store

S = 1_000_000  # microseconds in a second
SECRET = "correct horse battery staple"
ORIGIN = {"origin": "http://testserver"}
FORM = {"content-type": "application/x-www-form-urlencoded"}


class Rejected(Exception):
    pass


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str

    def run(self) -> None:
        if self.to.startswith("bad"):
            raise Rejected("no such address")


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


def text(fragment: str) -> str:
    """The fragment without tags and entities, and without the relative hints."""
    plain = re.sub(r'\s*<span class="rel">\(.*?\)</span>', "", fragment)
    plain = re.sub(r"<[^>]+>", "", plain)
    return re.sub(r"\s+", " ", plain.replace("&quot;", '"')).strip()


def cells(page: str, row_id: int) -> list[str]:
    """The text of each cell of the table row `row-<id>`."""
    found = re.search(rf'<tr id="row-{row_id}">(.*?)</tr>', page)
    assert found is not None, f"no row {row_id} on the page"
    return [text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", found.group(1))]


def counts(page: str) -> dict[str, int]:
    """The totals row of the counts table."""
    return {
        state: int(n) for state, n in re.findall(r'<td class="n" id="count-(\w+)">(\d+)</td>', page)
    }


def per_kind(page: str) -> dict[tuple[str, str], int]:
    found = re.findall(r'data-kind="([^"]+)" data-state="(\w+)">(\d+)</td>', page)
    return {(kind, state): int(n) for kind, state, n in found}


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page)
    assert found is not None, "no CSRF token on the page"
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


# ------------------------------------------------------------------------- what it shows


async def test_the_page_shows_counts_rows_and_schedules(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail, Nightly, Pulse], store=store)
    dead = await jobs.push(Mail(to="bad@example.com"), at=t)
    assert await jobs.drain_at(t) == 1
    later = await jobs.push(Mail(to="a@example.com"), at=t + 60 * S, unique="welcome:7")
    running = await jobs.push(Mail(to="b@example.com"), at=t)
    (claimed,) = await store.claim(["mail"], t + S, t + 61 * S, 1)
    assert claimed.id == running
    await store.push([job.store.contract.NewRow("theirs", b"{}", t)])
    await jobs.seed_at(t)

    async with client(dashboard_app(jobs)) as http:
        answer = await http.get("/")
    assert answer.status_code == 200
    page = answer.text
    assert counts(page) == {"queued": 4, "running": 1, "dead": 1}
    assert per_kind(page) == {
        ("mail", "queued"): 1,
        ("mail", "running"): 1,
        ("mail", "dead"): 1,
        ("nightly", "queued"): 1,
        ("nightly", "running"): 0,
        ("nightly", "dead"): 0,
        ("pulse", "queued"): 1,
        ("pulse", "running"): 0,
        ("pulse", "dead"): 0,
        ("theirs", "queued"): 1,
        ("theirs", "running"): 0,
        ("theirs", "dead"): 0,
    }
    assert 'theirs <span class="rel">(not a kind of this queue)</span>' in page
    row, kind, error, attempts, died = cells(page, dead)
    assert [row, kind, attempts, died] == [str(dead), "mail", "1", utc(t)]
    # The error's name, its message, and its traceback folded away under "traceback".
    assert error.startswith("Rejected no such address tracebackTraceback (most recent call")
    assert error.endswith("Rejected: no such address&#10;")
    assert cells(page, later) == [str(later), "mail", utc(t + 60 * S), "0", "", "welcome:7"]
    assert cells(page, running) == [str(running), "mail", utc(t), "1", utc(t + 61 * S)]
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
    assert [counts(page) for page in pages] == [{"queued": 1, "running": 0, "dead": 0}] * 2


async def test_payloads_when_asked_are_escaped_and_cut(t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    short = await jobs.push(Mail(to="<script>alert(1)</script>"), at=t + S)
    long = await jobs.push(Mail(to="x" * 300), at=t + 2 * S)
    async with client(dashboard_app(jobs, payloads=True)) as http:
        page = (await http.get("/")).text
    assert "<script>" not in page
    assert "<code>{&quot;to&quot;:&quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;}</code>" in page
    assert cells(page, long)[-1] == '{"to":"' + "x" * 153 + "…"
    assert cells(page, short)[-1] == '{"to":"<script>alert(1)</script>"}'.replace(
        "<", "&lt;"
    ).replace(">", "&gt;")


async def test_the_limit_lists_the_first_rows_and_says_how_many(t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    rows = [await jobs.push(Mail(to=f"{n}@example.com"), at=t + n) for n in range(5)]
    async with client(dashboard_app(jobs, limit=2)) as http:
        page = (await http.get("/")).text
    assert re.findall(r'<tr id="row-(\d+)">', page) == [str(rows[0]), str(rows[1])]
    assert '<p class="more">The first 2 of 5.</p>' in page


async def test_a_store_that_cannot_be_read_is_a_503_that_says_why() -> None:
    class Unreachable(job.Memory):
        async def counts(self) -> dict[tuple[str, str], int]:
            raise job.StoreUnavailable("PostgreSQL: connection refused")

    jobs = job.Jobs(kinds=[Mail], store=Unreachable())
    async with client(dashboard_app(jobs)) as http:
        answer = await http.get("/")
    assert answer.status_code == 503
    assert (
        '<p class="problem" id="problem">The store cannot be read: PostgreSQL: connection '
        "refused</p>"
    ) in answer.text


async def test_headers_stylesheet_and_methods() -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        page = await http.get("/")
        css = await http.get("/static/dashboard.css")
        wrong_method = await http.get("/rows/1/retry")
    assert page.headers["content-security-policy"] == (
        "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    )
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "same-origin"
    assert page.headers["cache-control"] == "no-store"
    assert (css.status_code, css.headers["content-type"]) == (200, "text/css; charset=utf-8")
    assert css.text.startswith("/* The dashboard's one stylesheet")
    assert wrong_method.status_code == 405


def test_relative_hints() -> None:
    now = 10_000 * S
    assert [
        relative(now, now),
        relative(now + 999_999, now),
        relative(now + 59 * S, now),
        relative(now - 61 * S, now),
        relative(now + 3 * 3_600 * S, now),
        relative(now - 2 * 86_400 * S - 1, now),
    ] == ["now", "now", "in 59 s", "1 min ago", "in 3 h", "2 d ago"]


# -------------------------------------------------------------------- secret and actions


async def test_without_a_secret_every_post_is_refused(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, row = dead_one
    async with client(dashboard_app(jobs)) as http:
        answers = [
            await http.post(path, data={"secret": SECRET, "csrf": "x"}, headers=ORIGIN)
            for path in ("/login", "/logout", f"/rows/{row}/retry", f"/rows/{row}/cancel")
        ]
    assert [(a.status_code, a.text) for a in answers] == [
        (403, "this dashboard is read-only: no secret is configured")
    ] * 4
    assert await jobs.stats() == (0, 0, 1)


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
        assert (
            '<p class="flash" id="flash" role="status">Logged in: retry and cancel are on.</p>'
            in page
        )
        assert f'<form method="post" action="/rows/{row}/retry">' in page
        token = csrf(page)

        answer = await http.post(f"/rows/{row}/retry", data={"csrf": token}, headers=ORIGIN)
        assert (answer.status_code, answer.headers["location"]) == (
            303,
            f"/?did=retried&row={row}",
        )
        assert await jobs.stats() == (1, 0, 0)
        page = (await http.get(answer.headers["location"])).text
        assert f"Row {row} is queued again, from its first attempt." in page
        assert counts(page) == {"queued": 1, "running": 0, "dead": 0}
        assert f'<form method="post" action="/rows/{row}/cancel">' in page

        again = await http.post(f"/rows/{row}/retry", data={"csrf": token}, headers=ORIGIN)
        assert again.headers["location"] == f"/?did=not_retried&row={row}"
        page = (await http.get(again.headers["location"])).text
        assert (
            f'<p class="flash refused" id="flash" role="status">Row {row} is not dead any more; '
            "nothing changed.</p>"
        ) in page

        answer = await http.post(f"/rows/{row}/cancel", data={"csrf": token}, headers=ORIGIN)
        assert answer.headers["location"] == f"/?did=cancelled&row={row}"
        assert await jobs.stats() == (0, 0, 0)
        answer = await http.post(f"/rows/{row}/cancel", data={"csrf": token}, headers=ORIGIN)
        assert answer.headers["location"] == f"/?did=not_cancelled&row={row}"

        answer = await http.post("/logout", data={"csrf": token}, headers=ORIGIN)
        assert answer.headers["location"] == "/?did=logged_out"
        assert answer.headers["set-cookie"].startswith('nilo_job_dashboard=""; expires=')
        page = (await http.get("/")).text
        assert 'id="login-form"' in page


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
        refused = await http.post(f"/rows/{row}/retry", data={"csrf": "0" * 64}, headers=ORIGIN)
    assert (refused.status_code, refused.text) == (403, "log in with the secret first")
    assert await jobs.stats() == (0, 0, 1)


async def test_cross_site_and_forged_posts_are_refused(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, row = dead_one
    path = f"/rows/{row}/retry"
    foreign = "refused: the form was not sent from this dashboard"
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        other = Sessions(SECRET, 3_600)
        answers = [
            # No Origin and no Referer.
            await http.post(path, data={"csrf": token}),
            # Another site's Origin, and another site's Referer.
            await http.post(path, data={"csrf": token}, headers={"origin": "https://evil.test"}),
            await http.post(path, data={"csrf": token}, headers={"referer": "https://evil.test/"}),
            await http.post(path, data={"csrf": token}, headers={"origin": "null"}),
            # The right origin, without a token, with a wrong one, with another session's.
            await http.post(path, data={"other": "1"}, headers=ORIGIN),
            await http.post(path, data={"csrf": "0" * 64}, headers=ORIGIN),
            await http.post(path, data={"csrf": other.csrf("someone-else")}, headers=ORIGIN),
            # Not a form.
            await http.post(path, json={"csrf": token}, headers=ORIGIN),
            await http.post(path, content=b"csrf=" + b"a" * 5_000, headers={**ORIGIN, **FORM}),
            # Login from another site.
            await http.post("/login", data={"secret": SECRET}, headers={"origin": "https://evil.test"}),
        ]  # fmt: skip
    assert [(a.status_code, a.text) for a in answers] == [
        (403, foreign),
        (403, foreign),
        (403, foreign),
        (403, foreign),
        (403, "refused: the form's CSRF token is not this session's"),
        (403, "refused: the form's CSRF token is not this session's"),
        (403, "refused: the form's CSRF token is not this session's"),
        (415, "send an application/x-www-form-urlencoded form"),
        (413, "a form is at most 4096 bytes"),
        (403, foreign),
    ]
    assert await jobs.stats() == (0, 0, 1)


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
    with pytest.raises(job.Refusal, match=r"limit=0\) takes a positive int"):
        dashboard_app(jobs, limit=0)
    with pytest.raises(job.Refusal, match=r"session_s=0\) takes a positive int"):
        dashboard_app(jobs, secret=SECRET, session_s=0)
    with pytest.raises(job.Refusal, match="a list of origins, not one str"):
        dashboard_app(jobs, origins="https://ops.example.com")


async def test_mounted_under_a_prefix(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, row = dead_one
    app = Starlette(routes=[Mount("/ops/jobs", app=dashboard_app(jobs, secret=SECRET))])
    async with client(app) as http:
        page = (await http.get("/ops/jobs/")).text
        assert '<link rel="stylesheet" href="/ops/jobs/static/dashboard.css">' in page
        assert '<form method="post" action="/ops/jobs/login" id="login-form">' in page
        answer = await http.post("/ops/jobs/login", data={"secret": SECRET}, headers=ORIGIN)
        assert "; Path=/ops/jobs/; " in answer.headers["set-cookie"]
        token = csrf((await http.get("/ops/jobs/")).text)
        answer = await http.post(
            f"/ops/jobs/rows/{row}/retry", data={"csrf": token}, headers=ORIGIN
        )
        assert answer.headers["location"] == f"/ops/jobs/?did=retried&row={row}"
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
                r"to retry and cancel\)\n",
                first,
            )
            assert found is not None, first
            base = found.group(1)
            with httpx.Client(base_url=base, timeout=30) as http:
                assert counts(http.get("/").text) == {"queued": 0, "running": 0, "dead": 1}
                answer = http.post("/login", data={"secret": SECRET}, headers={"origin": base})
                assert answer.status_code == 303
                page = http.get("/").text
                (row,) = re.findall(r'id="retry-(\d+)"', page)
                answer = http.post(
                    f"/rows/{row}/retry", data={"csrf": csrf(page)}, headers={"origin": base}
                )
                assert answer.status_code == 303
                assert counts(http.get("/").text) == {"queued": 1, "running": 0, "dead": 0}
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
