"""Who may read the dashboard, on every store: with a secret, every page is a 401 with the login
form and nothing of the table until one logs in; `public_reads=True` opens the pages and not the
actions; an access function answers "full", "read" or None per request (sync or async, from the
application's own session), and a visitor it lets act does so with a form token of its own;
with none of these, only this machine's clients are served and any other is told how to open
it; `hosts=` refuses a Host it was not given; and the settings are refused with the fix."""

import html
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route

import nilo_job as job
from nilo_job.dashboard import dashboard_app
from nilo_job.store.contract import Store
from tests.helpers.dashboard import ORIGIN, SECRET, Mail, S, counts, csrf, listed, login

if TYPE_CHECKING:
    import flask

KEY = "welcome:alice@example.com"
ELSEWHERE = ("10.0.0.5", 40_123)
OPEN_IT = (
    "This dashboard answers only on the machine it runs on: it has no secret, and no read "
    "access was chosen. To open it, set a secret and log in with it (dashboard_app(secret=...), "
    "or the command&#x27;s --secret-env), let anyone who can reach it read (public_reads=True, "
    "or --public-reads), or let your application decide for each request (access=a function of "
    "the request answering &#x27;full&#x27;, &#x27;read&#x27; or None)."
)


def client_at(app: object, address: tuple[str, int]) -> httpx.AsyncClient:
    """An httpx client on the app, as a client at `address`."""
    transport = httpx.ASGITransport(app=app, client=address)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def rows_of_every_kind(jobs: job.Jobs, t: int) -> dict[str, int]:
    """A dead row (its message and traceback), a queued row holding `KEY`, and a running row
    that a worker on web-7.internal holds: their ids by state."""
    dead = await jobs.push(Mail(to="bad@example.com"), at=t)
    assert await jobs.drain_at(t) == 1
    queued = await jobs.push(Mail(to="alice@example.com"), at=t + 3_600 * S, unique=KEY)
    running = await jobs.push(Mail(to="bob@example.com"), at=t)
    (claimed,) = await jobs.store.claim(["mail"], t + S, t + 61 * S, 1, "web-7.internal:4242")
    assert claimed.id == running
    return {"dead": dead, "queued": queued, "running": running}


def nothing_of_the_table(page: str) -> bool:
    """Whether `page` holds nothing a row or the store holds."""
    words = (KEY, "no such address", "Rejected", "Traceback", "web-7.internal", "@example.com",
             'id="row-', 'id="count-', "Memory", "Table(")  # fmt: skip
    return not [word for word in words if word in page]


# ------------------------------------------------------------------------ with a secret


async def test_every_page_is_a_401_with_the_login_form_until_one_logs_in(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    ids = await rows_of_every_kind(jobs, t)
    paths = (
        "/", "/?refresh=10", "/rows", "/rows?state=dead", "/rows?state=queued&kind=mail",
        f"/rows?q={KEY}", f"/rows?q={ids['dead']}", f"/rows/{ids['dead']}",
        f"/rows/{ids['queued']}", "/rows/999999", "/rows/abc", "/no/such/page",
    )  # fmt: skip
    app = dashboard_app(jobs, secret=SECRET, payloads=True)
    async with client_at(app, ELSEWHERE) as http:
        anonymous = {path: await http.get(path) for path in paths}
        heads = {path: await http.head(path) for path in paths}
        css = await http.get("/static/dashboard.css")
    async with client_at(app, ("127.0.0.1", 123)) as http:
        local = await http.get("/")  # this machine is no exception once a secret is set
        await login(http)
        logged_in = await http.get("/rows?state=queued")
    for path, answer in anonymous.items():
        assert answer.status_code == 401, path
        assert '<form method="post" action="/login" id="login-form">' in answer.text, path
        assert (
            '<p class="problem" id="login-needed">Log in with the secret to see this dashboard.</p>'
        ) in answer.text, path
        assert nothing_of_the_table(answer.text), (path, answer.text)
        assert answer.headers["cache-control"] == "no-store"
    assert {path: answer.status_code for path, answer in heads.items()} == dict.fromkeys(paths, 401)
    assert (local.status_code, nothing_of_the_table(local.text)) == (401, True)
    assert css.status_code == 200  # the login page's stylesheet
    # Logged in: the rows, their keys, and the store named in the header.
    assert logged_in.status_code == 200
    assert listed(logged_in.text) == [ids["queued"]]
    assert KEY in logged_in.text
    assert re.search(r'<p class="store">[^<]+ · read <time', logged_in.text)


async def test_public_reads_open_the_pages_and_not_the_actions(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    ids = await rows_of_every_kind(jobs, t)
    async with client_at(dashboard_app(jobs, secret=SECRET, public_reads=True), ELSEWHERE) as http:
        page = await http.get("/")
        row = await http.get(f"/rows/{ids['dead']}")
        retry = await http.post(f"/rows/{ids['dead']}/retry", data={"csrf": "0" * 64},
                                headers=ORIGIN)  # fmt: skip
    async with client_at(dashboard_app(jobs, public_reads=True), ELSEWHERE) as http:
        without_secret = await http.get("/rows?state=queued")
        post = await http.post("/pause", data={"kind": "mail"}, headers=ORIGIN)
    assert (page.status_code, row.status_code, without_secret.status_code) == (200, 200, 200)
    assert counts(page.text) == {"queued": 1, "running": 1, "dead": 1, "done": 0}
    assert listed(page.text) == [ids["queued"], ids["running"], ids["dead"]]
    assert 'id="login-form"' in page.text
    assert '<p class="error" id="error-name">Rejected</p>' in row.text
    # Payloads stay hidden, and with them the message, the traceback, the key and the worker;
    # the store is not named to a reader.
    for hidden in ("no such address", "Traceback", KEY, "web-7.internal", "@example.com"):
        assert hidden not in page.text + row.text + without_secret.text, hidden
    assert '<p class="store">read <time' in page.text
    assert listed(without_secret.text) == [ids["queued"]]
    assert (retry.status_code, retry.text) == (403, "log in with the secret first")
    assert (post.status_code, post.text) == (
        403,
        "this dashboard is read-only: no secret is configured",
    )
    assert (await jobs.row(ids["dead"])).state == "dead"  # type: ignore[union-attr]
    assert await jobs.paused() == {}


# --------------------------------------------------------------- an access function


def by_role(request: Request) -> str | None:
    """The application's own check: a role its login put in a header, for the test."""
    return {"admin": "full", "support": "read"}.get(request.headers.get("x-role", ""))


async def by_role_async(request: Request) -> str | None:
    return by_role(request)


@pytest.mark.parametrize("hook", [by_role, by_role_async], ids=["sync", "async"])
async def test_an_access_function_answers_full_read_or_none(
    store: Store, t: int, hook: object
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    ids = await rows_of_every_kind(jobs, t)
    dead = ids["dead"]
    app = dashboard_app(jobs, access=hook)  # type: ignore[arg-type]
    support, admin, nobody = ({"x-role": role} for role in ("support", "admin", "guest"))
    async with client_at(app, ELSEWHERE) as http:
        # "read": every page, no button, and every POST refused.
        read = [await http.get(path, headers=support) for path in ("/", f"/rows/{dead}")]
        refused_post = await http.post(
            f"/rows/{dead}/retry", data={"csrf": "0" * 64}, headers={**ORIGIN, **support}
        )
        # None: nothing, and a sentence.
        forbidden = [await http.get(path, headers=nobody) for path in ("/", "/rows", "/rows/1")]
        forbidden_post = await http.post("/pause", data={"kind": "mail"},
                                         headers={**ORIGIN, **nobody})  # fmt: skip
        forbidden_login = await http.post("/login", data={"secret": SECRET},
                                          headers={**ORIGIN, **nobody})  # fmt: skip
        # "full": the buttons, with a form token its cookie also holds.
        full = await http.get("/", headers=admin)
        token = csrf(full.text)
        cookie = full.headers["set-cookie"]
        again = await http.get("/rows", headers=admin)  # the cookie kept: the same token
        forged = await http.post(
            f"/rows/{dead}/retry", data={"csrf": "0" * 64}, headers={**ORIGIN, **admin}
        )
        demoted = await http.post(
            f"/rows/{dead}/retry", data={"csrf": token}, headers={**ORIGIN, **support}
        )
        retried = await http.post(
            f"/rows/{dead}/retry", data={"csrf": token}, headers={**ORIGIN, **admin}
        )
    assert [answer.status_code for answer in read] == [200, 200]
    assert listed(read[0].text) == [ids["queued"], ids["running"], ids["dead"]]
    assert ("<form" in read[0].text, "<form" in read[1].text) == (False, False)
    assert 'id="read-only"' in read[0].text
    assert (refused_post.status_code, refused_post.text) == (
        403,
        "refused: your access to this dashboard is to read",
    )
    sentence = (
        '<p class="problem" id="closed">Your application&#x27;s access check does not let you '
        "see this dashboard.</p>"
    )
    for answer in forbidden:
        assert (answer.status_code, sentence in answer.text) == (403, True)
        assert nothing_of_the_table(answer.text)
    assert [(a.status_code, a.text) for a in (forbidden_post, forbidden_login)] == [
        (403, "refused: Your application's access check does not let you see this dashboard.")
    ] * 2
    assert full.status_code == 200
    assert '<p id="granted">Full access, granted by your application.</p>' in full.text
    assert f'id="retry-{dead}"' in full.text
    assert re.fullmatch(
        rf"nilo_job_dashboard_token={token}; HttpOnly; Path=/; SameSite=strict", cookie
    )
    assert (csrf(again.text), "set-cookie" in again.headers) == (token, False)
    assert [(a.status_code, a.text) for a in (forged, demoted)] == [
        (403, "refused: the form's CSRF token is not this visitor's"),
        (403, "refused: your access to this dashboard is to read"),
    ]
    assert (retried.status_code, retried.headers["location"]) == (
        303,
        f"/rows/{dead}?did=retried&row={dead}",
    )
    assert (await jobs.row(dead)).state == "queued"  # type: ignore[union-attr]


async def test_a_reader_of_the_access_function_may_log_in_with_the_secret(
    dead_one: tuple[job.Jobs, int],
) -> None:
    jobs, row = dead_one
    app = dashboard_app(jobs, secret=SECRET, access=lambda request: "read")
    async with client_at(app, ELSEWHERE) as http:
        before = await http.get("/")
        token = await login(http)
        answer = await http.post(f"/rows/{row}/retry", data={"csrf": token}, headers=ORIGIN)
    assert (before.status_code, 'id="login-form"' in before.text) == (200, True)
    assert listed(before.text) == [row]
    assert answer.status_code == 303
    assert await jobs.stats() == (1, 0, 0)


async def test_an_access_function_answering_anything_else_refuses_and_says_so(
    dead_one: tuple[job.Jobs, int], caplog: pytest.LogCaptureFixture
) -> None:
    jobs, _row = dead_one

    def sloppy(request: Request) -> bool:
        return True

    async with client_at(dashboard_app(jobs, access=sloppy), ELSEWHERE) as http:  # type: ignore[arg-type]
        answer = await http.get("/")
    assert (answer.status_code, nothing_of_the_table(answer.text)) == (403, True)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        "dashboard: access=test_an_access_function_answering_anything_else_refuses_and_says_so."
        "<locals>.sloppy answered True; it answers 'full', 'read' or None; this request is "
        "refused"
    ]


async def test_behind_the_applications_own_login(dead_one: tuple[job.Jobs, int]) -> None:
    """The docs' Starlette example: the application's login puts a role in its session, and
    the access function reads it from the request the dashboard is handed."""
    jobs, row = dead_one

    def staff(request: Request) -> str | None:
        return {"admin": "full", "support": "read"}.get(request.session.get("role", ""))

    async def log_in_as(request: Request) -> Response:
        request.session["role"] = request.path_params["role"]
        return PlainTextResponse("in")

    app = Starlette(
        routes=[
            Route("/login/{role}", log_in_as),
            Mount("/jobs", dashboard_app(jobs, access=staff)),
        ],
        middleware=[Middleware(SessionMiddleware, secret_key="a key of the application")],
    )
    async with client_at(app, ELSEWHERE) as http:
        stranger = await http.get("/jobs/")
        await http.get("/login/support")
        support = await http.get("/jobs/")
        await http.get("/login/admin")
        admin = await http.get("/jobs/")
        token = csrf(admin.text)
        retried = await http.post(
            f"/jobs/rows/{row}/retry",
            data={"csrf": token},
            headers={"origin": "http://testserver"},
        )
    assert (stranger.status_code, support.status_code, admin.status_code) == (403, 200, 200)
    assert f'id="retry-{row}"' not in support.text
    assert admin.headers["set-cookie"].endswith("; HttpOnly; Path=/jobs/; SameSite=strict")
    assert (retried.status_code, retried.headers["location"]) == (
        303,
        f"/jobs/rows/{row}?did=retried&row={row}",
    )
    assert await jobs.stats() == (1, 0, 0)


# ---------------------------------------------------------- nothing chosen: this machine


@pytest.fixture
def no_secret_app(dead_one: tuple[job.Jobs, int]) -> tuple[object, int]:
    """The dashboard of a queue with one dead row, with no secret and nothing chosen."""
    jobs, row = dead_one
    return dashboard_app(jobs), row


async def test_without_a_secret_only_this_machine_reads_and_others_are_told_how_to_open_it(
    no_secret_app: tuple[object, int],
) -> None:
    app, row = no_secret_app
    paths = ("/", "/rows", f"/rows/{row}", "/no/such/page")
    answers = {}
    for address in (
        ("127.0.0.1", 1),
        ("127.0.0.2", 1),
        ("::1", 1),
        ("::ffff:127.0.0.1", 1),
        ELSEWHERE,
        ("192.168.1.9", 1),
        ("fe80::1", 1),
        ("testclient", 1),
    ):
        async with client_at(app, address) as http:
            answers[address[0]] = [(await http.get(path)).status_code for path in paths]
    assert answers == {
        "127.0.0.1": [200, 200, 200, 404],
        "127.0.0.2": [200, 200, 200, 404],
        "::1": [200, 200, 200, 404],
        "::ffff:127.0.0.1": [200, 200, 200, 404],
        "10.0.0.5": [403] * 4,
        "192.168.1.9": [403] * 4,
        "fe80::1": [403] * 4,
        "testclient": [403] * 4,
    }
    async with client_at(app, ELSEWHERE) as http:
        page = await http.get("/")
        post = await http.post(f"/rows/{row}/retry", data={"csrf": "x"}, headers=ORIGIN)
    assert f'<p class="problem" id="closed">{OPEN_IT}</p>' in page.text
    assert nothing_of_the_table(page.text)
    assert post.status_code == 403
    assert post.text.startswith("refused: This dashboard answers only on the machine it runs on")


async def test_a_request_through_a_proxy_is_not_this_machines(
    no_secret_app: tuple[object, int],
) -> None:
    app, _row = no_secret_app
    async with client_at(app, ("127.0.0.1", 1)) as http:
        statuses = [
            (await http.get("/", headers={name: "203.0.113.7"})).status_code
            for name in ("x-forwarded-for", "x-real-ip", "forwarded")
        ]
    assert statuses == [403, 403, 403]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("X-Forwarded-Host", "ops.example.com"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Port", "443"),
        ("X-Forwarded-Prefix", "/jobs"),
        ("Via", "1.1 proxy"),
    ],
)
async def test_any_header_a_proxy_adds_alone_makes_a_request_proxied(
    no_secret_app: tuple[object, int], name: str, value: str
) -> None:
    """A proxy on this machine that sets only X-Forwarded-Host (or -Proto, -Port, Via) still
    stands between the client and the dashboard: the request is not this machine's."""
    app, _row = no_secret_app
    async with client_at(app, ("127.0.0.1", 1)) as http:
        direct = await http.get("/")
        through = await http.get("/", headers={name: value})
        acted = await http.post("/pause", data={"kind": "mail"}, headers={name: value, **ORIGIN})
    assert direct.status_code == 200
    assert through.status_code == 403
    assert f'<p class="problem" id="closed">{OPEN_IT}</p>' in through.text
    assert nothing_of_the_table(through.text)
    assert acted.status_code == 403
    assert acted.text == f"refused: {html.unescape(OPEN_IT)}"


# ------------------------------------------------------------------------- the Host


async def test_hosts_refuses_a_host_it_was_not_given(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, _row = dead_one
    app = dashboard_app(jobs, secret=SECRET, hosts=["Ops.Example.com", "::1"])
    async with client_at(app, ("127.0.0.1", 1)) as http:
        answers = {
            host: await http.get("/", headers={"host": host})
            for host in ("ops.example.com", "OPS.EXAMPLE.COM:8443", "[::1]:8900", "evil.example",
                         "evil.example:8900", "ops.example.com.evil.example", "a@ops.example.com")
        }  # fmt: skip
        static = await http.get("/static/dashboard.css", headers={"host": "evil.example"})
    async with client_at(dashboard_app(jobs, secret=SECRET), ("127.0.0.1", 1)) as http:
        unchecked = await http.get("/", headers={"host": "evil.example"})
    assert {host: answer.status_code for host, answer in answers.items()} == {
        "ops.example.com": 401,
        "OPS.EXAMPLE.COM:8443": 401,
        "[::1]:8900": 401,
        "evil.example": 400,
        "evil.example:8900": 400,
        "ops.example.com.evil.example": 400,
        "a@ops.example.com": 400,
    }
    assert answers["evil.example"].text == (
        "refused: this dashboard answers to the names ::1, ops.example.com, not to the Host "
        "'evil.example'; to open it under another name, allow that name (--allow-host NAME for "
        "the command, hosts=[...] for dashboard_app)"
    )
    assert answers["evil.example"].headers["x-frame-options"] == "DENY"
    assert static.status_code == 400
    assert unchecked.status_code == 401  # no hosts: the application's server decides


# --------------------------------------------------------------------------- settings


def test_access_settings_are_refused_with_the_fix() -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    with pytest.raises(job.Refusal, match=r"access='full'\) takes a function of the request"):
        dashboard_app(jobs, access="full")  # type: ignore[arg-type]
    with pytest.raises(job.Refusal, match=r"access=\.\.\., public_reads=True\): choose one"):
        dashboard_app(jobs, access=by_role, public_reads=True)  # type: ignore[arg-type]
    with pytest.raises(job.Refusal, match=r"public_reads='yes'\) takes True or False"):
        dashboard_app(jobs, public_reads="yes")  # type: ignore[arg-type]
    with pytest.raises(job.Refusal, match=r"hosts=\.\.\.\) takes a list of host names, not one"):
        dashboard_app(jobs, hosts="ops.example.com")
    with pytest.raises(job.Refusal) as refused:
        dashboard_app(jobs, hosts=["ops.example.com", "a b"])
    assert str(refused.value) == (
        "dashboard_app(hosts=[..., 'a b', ...]): it holds a space (at index 1), which no host "
        f"name holds; {HOST_FORMS}"
    )


HOST_FORMS = (
    "a host is a name (letters, digits, '-' and '.') or an IP address, optionally with a port: "
    "'ops.example.com', 'ops.example.com:8900', '10.0.0.5', '::1' or '[::1]:8900'"
)


@pytest.mark.parametrize(
    ("host", "said"),
    [
        ("bad host!", "it holds a space (at index 3), which no host name holds"),
        ("bad!", "it holds '!' (at index 3), which no host name holds"),
        ("ops@example.com", "it holds '@' (at index 3), which no host name holds"),
        ("ops.example.com/jobs", "it holds '/' (at index 15), which no host name holds"),
        (
            "bücher.example",
            "it holds 'ü' (at index 1): write a name that is not ASCII in its IDNA form (xn--…)",
        ),
        ("ops.example.com:0", "its port '0' is not a number from 1 to 65535"),
        ("ops.example.com:http", "its port 'http' is not a number from 1 to 65535"),
        (":8900", "it has no name before its port"),
        ("", "it is empty"),
        ("[::1", "it opens an IPv6 address with '[' but never closes it with ']'"),
        ("[::1]8900", "'8' follows the IPv6 address, where only ':' and a port may"),
        ("1:2:zz", "'1:2:zz' has more than one ':', but is not an IPv6 address"),
        (8900, "it is int, not a str"),
    ],
)
def test_hosts_says_what_is_wrong_with_a_host(host: object, said: str) -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    with pytest.raises(job.Refusal) as refused:
        dashboard_app(jobs, hosts=["ops.example.com", host])  # type: ignore[list-item]
    assert str(refused.value) == f"dashboard_app(hosts=[..., {host!r}, ...]): {said}; {HOST_FORMS}"


def test_hosts_takes_names_and_addresses_with_or_without_a_port() -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory())
    for host in ("ops.example.com", "ops.example.com:8900", "10.0.0.5", "10.0.0.5:80", "::1",
                 "[::1]", "[::1]:8900", "my_service", "xn--bcher-kva.example"):  # fmt: skip
        dashboard_app(jobs, hosts=[host])


def flask_staff(flask_app: "flask.Flask") -> Callable[[Request], str | None]:
    """The docs' Flask example: the role Flask's own session cookie holds, read as Flask reads
    it."""
    from itsdangerous import BadSignature

    def staff(request: Request) -> str | None:
        cookie = request.cookies.get(flask_app.config["SESSION_COOKIE_NAME"], "")
        serializer = flask_app.session_interface.get_signing_serializer(flask_app)  # type: ignore[attr-defined]
        try:
            session = serializer.loads(
                cookie, max_age=flask_app.permanent_session_lifetime.total_seconds()
            )
        except BadSignature:
            return None
        return {"admin": "full", "support": "read"}.get(session.get("role"))

    return staff


async def test_behind_a_flask_applications_login(dead_one: tuple[job.Jobs, int]) -> None:
    import flask

    jobs, row = dead_one
    flask_app = flask.Flask("shop")
    flask_app.secret_key = "a key of the flask application"

    @flask_app.post("/login/<role>")
    def log_in(role: str) -> str:
        flask.session["role"] = role
        return "in"

    cookies = {}
    for role in ("support", "admin"):
        with flask_app.test_client() as browser:
            browser.post(f"/login/{role}")
            cookie = browser.get_cookie("session")
            assert cookie is not None
            cookies[role] = cookie.value
    app = dashboard_app(jobs, access=flask_staff(flask_app))
    answers = []
    # The forged cookie changes the signature's first character, all six of its bits data (its
    # last characters carry padding bits, and a change there may decode to the same bytes).
    signed = cookies["admin"]
    at = signed.rindex(".") + 1
    forged_cookie = signed[:at] + ("B" if signed[at] == "A" else "A") + signed[at + 1 :]
    for cookie in (None, forged_cookie, cookies["support"], cookies["admin"]):
        async with client_at(app, ELSEWHERE) as http:
            if cookie is not None:
                http.cookies.set("session", cookie)
            answers.append(await http.get("/"))
    stranger, forged, support, admin = answers
    assert [a.status_code for a in (stranger, forged, support, admin)] == [403, 403, 200, 200]
    assert (f'id="retry-{row}"' in support.text, f'id="retry-{row}"' in admin.text) == (
        False,
        True,
    )
