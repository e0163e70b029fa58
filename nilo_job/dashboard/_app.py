"""`dashboard_app(jobs, secret=...)`: the dashboard as a Starlette application.

    GET  /                      the page: counts, queued/running/dead rows, schedules
    GET  /static/dashboard.css  its stylesheet
    POST /login                 the secret, in a form; sets the session cookie
    POST /logout                clears it
    POST /rows/{id}/retry       `jobs.retry_dead(id)`, then back to the page
    POST /rows/{id}/cancel      `jobs.cancel(id)`, then back to the page

Every POST must come from a page of this dashboard: its `Origin` (or, without one, its `Referer`)
must be this server's own origin or one of `origins`. A retry or cancel also needs a live session
cookie (HttpOnly, SameSite=Strict, Secure over https) and the CSRF token bound to that session,
both compared with `hmac.compare_digest`. Without a secret every POST is 403 and the page shows no
buttons. Mounted under a prefix (`app.mount("/jobs", ...)`), every link and cookie path follows
the prefix.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from importlib import resources
from urllib.parse import parse_qs, urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import Cron, Every, JobError, Jobs, Refusal, now_us
from .._ticks import SCHEDULE_KEY  # the key a schedule's next tick holds
from ..store.contract import ROW_STATES, RowView
from ._render import Mode, Page, ScheduleView, render
from ._session import Sessions, check_secret

log = logging.getLogger("nilo_job")

COOKIE = "nilo_job_dashboard"
"""The session cookie's name."""

_MAX_FORM_BYTES = 4_096
_CSS = resources.files(__package__).joinpath("static/dashboard.css").read_bytes()

_SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; "
        b"base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]

_DONE = {
    "retried": ("Row {row} is queued again, from its first attempt.", False),
    "not_retried": ("Row {row} is not dead any more; nothing changed.", True),
    "cancelled": ("Row {row} was taken out of the queue.", False),
    "not_cancelled": (
        "Row {row} is not queued (a worker holds it, or it is gone); nothing changed.",
        True,
    ),
    "logged_in": ("Logged in: retry and cancel are on.", False),
    "logged_out": ("Logged out.", False),
}


class _SecurityHeaders:
    """Adds the headers in `_SECURITY_HEADERS` to every response of the wrapped app, and
    answers a failure inside it (a store that fails mid-action, say) with a sentence and 503
    rather than a traceback and 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), *_SECURITY_HEADERS]
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception as error:
            log.error("dashboard: %s %s failed", scope.get("method"), scope.get("path"),
                      exc_info=True)  # fmt: skip
            if started:
                raise
            why = error if isinstance(error, JobError) else type(error).__name__
            answer = PlainTextResponse(f"the dashboard could not do that: {why}", 503)
            await answer(scope, receive, send_with_headers)


class _Dashboard:
    """The handlers, and what they share: the queue, the sessions, the settings."""

    def __init__(
        self,
        jobs: Jobs,
        sessions: Sessions | None,
        *,
        title: str,
        limit: int,
        payloads: bool,
        origins: Sequence[str],
    ) -> None:
        self.jobs = jobs
        self.sessions = sessions
        self.title = title
        self.limit = limit
        self.payloads = payloads
        self.origins = frozenset(origin.rstrip("/").lower() for origin in origins)

    # ------------------------------------------------------------------------------ helpers

    @staticmethod
    def base(request: Request) -> str:
        """The prefix the dashboard is mounted under ("" at the root), without a final slash."""
        root: str = request.scope.get("root_path", "")
        return root.rstrip("/")

    def session(self, request: Request) -> str | None:
        """The nonce of the request's live session, or None."""
        if self.sessions is None:
            return None
        return self.sessions.session(request.cookies.get(COOKIE), int(time.time()))

    def same_origin(self, request: Request) -> bool:
        """Whether the request says it comes from this server's own origin (or a trusted one):
        its `Origin` header, or without one its `Referer`; False when it has neither."""
        host = request.headers.get("host")
        allowed = set(self.origins)
        if host:
            allowed.add(f"{request.url.scheme}://{host}".lower())
        origin = request.headers.get("origin")
        if origin is None:
            referer = request.headers.get("referer")
            if not referer:
                return False
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}"
        return origin.lower() in allowed

    @staticmethod
    async def form(request: Request) -> dict[str, str] | Response:
        """The request's url-encoded form (first value of each field), or the refusal."""
        kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return PlainTextResponse("send an application/x-www-form-urlencoded form", 415)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM_BYTES:
                return PlainTextResponse(f"a form is at most {_MAX_FORM_BYTES} bytes", 413)
        try:
            fields = parse_qs(body.decode(), keep_blank_values=True, max_num_fields=8)
        except (UnicodeDecodeError, ValueError):
            return PlainTextResponse("the form cannot be read", 400)
        return {name: values[0] for name, values in fields.items()}

    async def page(
        self, request: Request, *, flash: str | None = None, refused: bool = False
    ) -> Page:
        """Read the store and build the page for this request."""
        nonce = self.session(request)
        if self.sessions is None:
            mode = Mode.READ_ONLY
        elif nonce is None:
            mode = Mode.LOGIN
        else:
            mode = Mode.OPERATOR
        jobs = self.jobs
        store = jobs.store
        counts: dict[tuple[str, str], int] = {}
        rows: dict[str, list[RowView]] = {}
        ticks: dict[str, RowView] | None = {}
        problem = None
        scheduled = [kind for kind in jobs.kinds if kind.schedule is not None]
        try:
            counts = await store.counts()
            for state in ROW_STATES:
                rows[state] = await store.rows(state, self.limit)
            held = await store.holding(SCHEDULE_KEY, [kind.name for kind in scheduled])
            ticks = None if held is None else {row.kind: row for row in held}
        except Exception as error:  # the page says so; it never answers 500
            problem = f"The store cannot be read: {error}"
            log.warning("dashboard: the store cannot be read: %s", error, exc_info=True)
        schedules = [
            ScheduleView(
                kind.name,
                _describe(kind.schedule),
                kind.overlap.value if kind.overlap is not None else "",
                kind.missed.value if kind.missed is not None else "",
                None if ticks is None else ticks.get(kind.name),
                known=ticks is not None,
            )
            for kind in scheduled
        ]
        return Page(
            title=self.title,
            store=repr(store),
            base=self.base(request),
            now_us=now_us(),
            kinds=[kind.name for kind in jobs.kinds],
            counts=counts,
            rows=rows,
            schedules=schedules,
            limit=self.limit,
            mode=mode,
            csrf=None if nonce is None or self.sessions is None else self.sessions.csrf(nonce),
            flash=flash,
            flash_refused=refused,
            problem=problem,
            payloads=self.payloads,
        )

    def back(self, request: Request, did: str, row: int | None = None) -> RedirectResponse:
        """303 to the page, which says what was done."""
        query = f"?did={did}" if row is None else f"?did={did}&row={row}"
        return RedirectResponse(f"{self.base(request)}/{query}", status_code=303)

    # ----------------------------------------------------------------------------- handlers

    async def index(self, request: Request) -> Response:
        flash, refused = None, False
        did = request.query_params.get("did", "")
        if did in _DONE:
            row = request.query_params.get("row", "")
            if "{row}" not in _DONE[did][0] or row.isdigit():
                text, refused = _DONE[did]
                flash = text.format(row=row)
        page = await self.page(request, flash=flash, refused=refused)
        return HTMLResponse(render(page), status_code=503 if page.problem else 200)

    async def css(self, request: Request) -> Response:
        return Response(_CSS, media_type="text/css")

    async def login(self, request: Request) -> Response:
        if self.sessions is None:
            return PlainTextResponse("this dashboard is read-only: no secret is configured", 403)
        if not self.same_origin(request):
            return PlainTextResponse("refused: the form was not sent from this dashboard", 403)
        form = await self.form(request)
        if isinstance(form, Response):
            return form
        if not self.sessions.secret_matches(form.get("secret", "")):
            log.warning(
                "dashboard: a login with the wrong secret from %s",
                request.client.host if request.client else "?",
            )
            page = await self.page(request, flash="That is not the secret.", refused=True)
            return HTMLResponse(render(page), status_code=403)
        response = self.back(request, "logged_in")
        response.set_cookie(
            COOKIE,
            self.sessions.issue(int(time.time())),
            max_age=self.sessions.session_s,
            path=f"{self.base(request)}/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(self, request: Request) -> Response:
        if self.sessions is None:
            return PlainTextResponse("this dashboard is read-only: no secret is configured", 403)
        if not self.same_origin(request):
            return PlainTextResponse("refused: the form was not sent from this dashboard", 403)
        response = self.back(request, "logged_out")
        response.delete_cookie(
            COOKIE,
            path=f"{self.base(request)}/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def authorize(self, request: Request) -> Response | None:
        """None when the request may change a row; otherwise the refusal to send."""
        if self.sessions is None:
            return PlainTextResponse("this dashboard is read-only: no secret is configured", 403)
        if not self.same_origin(request):
            return PlainTextResponse("refused: the form was not sent from this dashboard", 403)
        nonce = self.session(request)
        if nonce is None:
            return PlainTextResponse("log in with the secret first", 403)
        form = await self.form(request)
        if isinstance(form, Response):
            return form
        if not self.sessions.csrf_matches(nonce, form.get("csrf", "")):
            return PlainTextResponse("refused: the form's CSRF token is not this session's", 403)
        return None

    async def retry(self, request: Request) -> Response:
        if (refusal := await self.authorize(request)) is not None:
            return refusal
        row_id: int = request.path_params["row_id"]
        again = await self.jobs.retry_dead(row_id)
        log.info(
            "dashboard: row %d %s", row_id, "queued again" if again else "was not dead",
            extra={"row": row_id, "action": "retry"},
        )  # fmt: skip
        return self.back(request, "retried" if again else "not_retried", row_id)

    async def cancel(self, request: Request) -> Response:
        if (refusal := await self.authorize(request)) is not None:
            return refusal
        row_id: int = request.path_params["row_id"]
        gone = await self.jobs.cancel(row_id)
        log.info(
            "dashboard: row %d %s", row_id, "cancelled" if gone else "was not queued",
            extra={"row": row_id, "action": "cancel"},
        )  # fmt: skip
        return self.back(request, "cancelled" if gone else "not_cancelled", row_id)


def _describe(schedule: object) -> str:
    """A schedule in words: the cron expression (and its zone) or the interval."""
    if isinstance(schedule, Cron):
        return schedule.expr if schedule.tz is None else f"{schedule.expr} ({schedule.tz})"
    if isinstance(schedule, Every):
        return f"every {schedule.ms:,} ms"
    return repr(schedule)


def dashboard_app(
    jobs: Jobs,
    *,
    secret: str | None = None,
    title: str = "nilo-job",
    limit: int = 100,
    payloads: bool = False,
    session_s: int = 8 * 3_600,
    origins: Sequence[str] = (),
) -> Starlette:
    """The dashboard of `jobs`, as an ASGI application to mount or serve.

        app.mount("/jobs", dashboard_app(jobs, secret=os.environ["NILO_DASHBOARD_SECRET"]))

    Args:
        jobs: the queue to show; its store is read on every page view.
        secret: the operator's secret (at least 16 characters). None: read-only, no buttons,
            every POST is 403. It is never put in a cookie: logging in exchanges it for a
            signed session.
        title: the page's heading.
        limit: the most rows listed per state (the counts are always complete).
        payloads: show each row's payload (the first 160 characters of its JSON). Off by
            default: payloads often hold personal data, and the page is readable by anyone who
            can reach it.
        session_s: how long a login lasts, in seconds.
        origins: further origins (``"https://ops.example.com"``) a POST may come from, for a
            dashboard behind a proxy that changes the scheme or host; the server's own origin
            is always allowed.

    Returns:
        A Starlette application. Mounted, it does not run a lifespan of its own and closes
        nothing; the queue and its store stay the application's.

    Raises:
        Refusal: the secret is too short, or a setting is out of range.
    """
    sessions = None
    if (checked := check_secret(secret)) is not None:
        if isinstance(session_s, bool) or not isinstance(session_s, int) or session_s <= 0:
            raise Refusal(f"dashboard_app(session_s={session_s!r}) takes a positive int")
        sessions = Sessions(checked, session_s)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise Refusal(f"dashboard_app(limit={limit!r}) takes a positive int")
    if isinstance(origins, str):
        raise Refusal("dashboard_app(origins=...) takes a list of origins, not one str")
    board = _Dashboard(jobs, sessions, title=title, limit=limit, payloads=payloads, origins=origins)
    return Starlette(
        routes=[
            Route("/", board.index, methods=["GET", "HEAD"]),
            Route("/static/dashboard.css", board.css, methods=["GET", "HEAD"]),
            Route("/login", board.login, methods=["POST"]),
            Route("/logout", board.logout, methods=["POST"]),
            Route("/rows/{row_id:int}/retry", board.retry, methods=["POST"]),
            Route("/rows/{row_id:int}/cancel", board.cancel, methods=["POST"]),
        ],
        middleware=[Middleware(_SecurityHeaders)],
    )
