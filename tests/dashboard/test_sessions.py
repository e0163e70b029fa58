"""The dashboard's secret and sessions over HTTP: no post without a secret, logging in and acting on
a row, the flash, a wrong secret, cross-site and forged posts (the CSRF token and the origin
check), a session's expiry and its binding to the secret, and the settings refused."""

import re

import pytest

import nilo_job as job
from nilo_job.dashboard import dashboard_app
from nilo_job.dashboard._session import Sessions
from tests.helpers.dashboard import FORM, ORIGIN, SECRET, Mail, client, csrf, flash, login

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
