"""`dashboard_app(jobs, secret=...)`: the dashboard as a Starlette application.

    GET  /                      the overview: each kind's last hour, counts, first rows, schedules
                                (?refresh=10 reloads it every 10 s)
    GET  /rows                  rows by ?state=&kind=&error=, or ?q= a row id or unique key,
                                a keyset page at a time (?after=CURSOR)
    GET  /rows/{id}             one row's whole story; 404 when there is none
    GET  /static/dashboard.css  the stylesheet; /static/dashboard.js the one small script
    POST /login                 the secret, in a form; sets the session cookie
    POST /logout                clears it
    POST /rows/{id}/retry       `jobs.retry_dead(id)`, then to the row's page
    POST /rows/{id}/cancel      `jobs.cancel(id)`, then to the queued rows
    POST /bulk                  retry, cancel or delete the ticked rows or every row matching the
                                filter: first a confirmation page with the count, then (with
                                confirm=yes) `jobs.retry_many` / `cancel_many` / `delete_many`
    POST /pause, /resume        `jobs.pause(kind)` / `jobs.resume(kind)`, then to the overview

Who may read is `Access`'s decision (`_access.py`): a page refused is a 401 with the login form
or a 403 with a sentence, and reads no row. Every POST must come from a page of this dashboard:
its `Origin` (or, without one, its `Referer`) must be this server's own origin or one of
`origins`. Every action also needs full access: a live session cookie (HttpOnly,
SameSite=Strict, Secure over https) and the CSRF token bound to that session, or the `access`
function's "full" and the form token its cookie holds; each compared with
`hmac.compare_digest`. Without a secret and without `access`, every POST is 403 and the pages
show no buttons. Mounted under a prefix (`app.mount("/jobs", ...)`), every link and cookie path
follows the prefix.
"""

import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from importlib import resources

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from .. import Cron, Every, Jobs, Refusal
from .._base.errors import is_int
from .._base.values import Row, Where
from .._worker.ticks import SCHEDULE_KEY
from ..store.contract import INT64_MAX, WorkerEntry
from ._access import Access, AccessHook
from ._actions import Actions
from ._base import COOKIE, first
from ._guard import (
    HOST_FORMS,
    HostCheck,
    SecurityHeaders,
    host_name,
    host_problem,
    read_form,
    same_origin,
)
from ._index import LISTED, Overview, ScheduleView, render_index
from ._render import href
from ._row import render_row
from ._rows import Listing, errors_seen, render_rows
from ._session import Sessions, check_secret

log = logging.getLogger("nilo_job")

OVERVIEW_ROWS = 10
"""The most rows of each state the overview lists (the rows page lists `limit` a page)."""

_STATIC = {
    name: (resources.files(__package__).joinpath(f"static/{name}").read_bytes(), media)
    for name, media in (("dashboard.css", "text/css"), ("dashboard.js", "text/javascript"))
}
_STATES = ("queued", "running", "dead", "done")


class _Dashboard(Actions):
    """The dashboard's handlers: the pages and the session here, the actions in `Actions`."""

    async def index(self, request: Request) -> Response:
        if isinstance(visitor := await self.visit(request), Response):
            return visitor
        refresh = None
        refused = None
        raw = request.query_params.get("refresh")
        if raw:
            if raw.isascii() and raw.isdigit() and len(raw) < 6 and 5 <= int(raw) <= 3_600:
                refresh = int(raw)
            else:
                refused = (
                    f"That address cannot be read: refresh={raw[:40]!r}: auto-refresh is every 5 "
                    "to 3,600 seconds (a whole number); it is off"
                )
        chrome = self.chrome(request, visitor, refresh=refresh)
        now = chrome.now_us
        jobs, store = self.jobs, self.jobs.store
        counts: dict[tuple[str, str], int] = {}
        flows = []
        rows: dict[str, list[Row]] = {}
        ticks: dict[str, tuple[int, str, int]] | None = {}
        lasts: dict[str, tuple[int, str, int]] = {}
        problem = flow_problem = None
        scheduled = [kind for kind in jobs.kinds if kind.schedule is not None]
        shown = min(self.limit, OVERVIEW_ROWS)
        try:
            counts = await store.counts()
            try:
                flows = await jobs.flow()
            except Exception as error:  # a row it cannot read: the rest of the page stands
                flow_problem = self.unreadable(visitor, error, "flow")
            for state in LISTED:
                rows[state] = (await jobs.find(Where(state=state), limit=shown)).rows
            held = await store.holding(SCHEDULE_KEY, [kind.name for kind in scheduled])
            ticks = None if held is None else {r.kind: (r.id, r.state, r.run_at) for r in held}
            for kind in scheduled:
                if (last := await _last_run(jobs, kind.name)) is not None:
                    lasts[kind.name] = last
        except Exception as error:  # the page says so; it never answers 500
            problem = self.unreadable(visitor, error)
        schedules = []
        for kind in scheduled:
            tick = None if ticks is None else ticks.get(kind.name)
            planned, then = _runs(kind.schedule, None if tick is None else tick[2], now)
            schedules.append(
                ScheduleView(
                    kind.name,
                    _describe(kind.schedule),
                    kind.overlap.value if kind.overlap is not None else "",
                    kind.missed.value if kind.missed is not None else "",
                    None if tick is None else tick[0],
                    None if tick is None else tick[1],
                    None if tick is None else tick[2],
                    known=ticks is not None,
                    planned=planned,
                    then=then,
                    zone=kind.schedule.tz if isinstance(kind.schedule, Cron) else None,
                    last=lasts.get(kind.name),
                )
            )
        entries: list[WorkerEntry] | None = []
        if problem is None:
            try:
                entries = await store.workers()
            except Exception as error:  # the registry alone: the rest of the page stands
                self.unreadable(visitor, error, "worker registry")
                entries = None
        holding_back = None
        if problem is None:
            with contextlib.suppress(Exception):  # a role that cannot look: no line, no more
                holding_back = await store.held_back()
        view = Overview(
            self.names,
            counts,
            flows,
            rows,
            schedules,
            shown,
            flow_problem,
            workers=entries,
            held=holding_back,
        )
        chrome = dataclasses.replace(chrome, problem=problem or refused)
        status = 503 if problem else 400 if refused else 200
        return self.page(chrome, self.title, render_index(chrome, view), status, "index")

    async def rows(self, request: Request) -> Response:
        if isinstance(visitor := await self.visit(request), Response):
            return visitor
        params = request.query_params
        q = params.get("q", "").strip()
        errors: list[str] = []
        problem, status, why = None, 200, None
        listing = None
        try:
            errors = await errors_seen(self.jobs)
            where, page, offset = await self._filter(params)
            if q:
                number = q.isascii() and q.isdigit() and 0 < int(q) <= INT64_MAX
                if number and await self.jobs.row(int(q)):
                    return self.to(request, f"/rows/{int(q)}", {})
                where = Where(key=q)
            found = await self.jobs.find(where, after=params.get("after") or None, limit=self.limit)
            total = await self.jobs.count(where)
            listing = Listing(
                where, found.rows, found.next, total, page, offset, self.names, q, errors
            )
        except Refusal as refusal:
            problem, status = f"That filter cannot be read: {refusal}", 400
            why = "the filter above was refused"
        except Exception as error:
            problem, status = self.unreadable(visitor, error), 503
            why = "the store cannot be read"
        if listing is None:
            listing = Listing(Where(), [], None, 0, 1, 0, self.names, q, errors, unlisted=why)
        chrome = self.chrome(request, visitor, problem=problem)
        heading = f"{self.title}: rows"
        return self.page(chrome, heading, render_rows(chrome, listing), status, "rows")

    async def _filter(self, params: Mapping[str, str]) -> tuple[Where, int, int]:
        """The filter, the page number and the rows on the pages before, from a rows page's
        query.

        Raises:
            Refusal: a state that is not one of the four; a kind that is neither this queue's
                nor one the table holds; an error or key no row can hold; a page number or
                count that is not a whole number.
        """
        state = params.get("state") or None
        if state is not None and state not in _STATES:
            raise Refusal(f"state={state[:40]!r}: a row is queued, running, dead or done")
        kind = params.get("kind") or None
        if kind is not None and kind not in self.names:
            held = {name for name, _state in await self.jobs.store.counts()}
            if kind not in held:
                raise Refusal(
                    f"kind={kind[:80]!r}: no row is of that kind; this queue's kinds are "
                    f"{', '.join(self.names)}"
                )
        where = Where(
            state=state,
            kind=kind,
            error=params.get("error") or None,
            key=params.get("key") or None,
        )
        page = _whole(params, "page", 1)
        offset = _whole(params, "seen", 0)
        return where, page, offset

    async def row(self, request: Request) -> Response:
        if isinstance(visitor := await self.visit(request), Response):
            return visitor
        row_id: int = request.path_params["row_id"]
        try:
            # An id no store can hold names no row (the queue would refuse to look it up).
            row = await self.jobs.row(row_id) if 0 < row_id <= INT64_MAX else None
        except Exception as error:
            chrome = self.chrome(request, visitor, problem=self.unreadable(visitor, error))
            return self.page(chrome, f"Row {row_id}", "", 503)
        chrome = self.chrome(request, visitor)
        if row is None:
            rows = href(chrome.base, "/rows")
            text = (
                f'<p class="problem" id="missing">There is no row {row_id}: it never existed, or '
                "it was cancelled, deleted, or finished and no longer kept. "
                f'<a href="{rows}">Find rows</a>.</p>'
            )
            return self.page(chrome, f"Row {row_id}", text, 404)
        heading = f"Row {row.id} · {row.kind}"
        return self.page(chrome, heading, render_row(chrome, row), 200)

    async def not_found(self, request: Request, _error: Exception) -> Response:
        """Any address the dashboard has no page at (`/rows/abc`, say): a page that says so."""
        if isinstance(visitor := await self.visit(request), Response):
            return visitor
        chrome = self.chrome(request, visitor)
        rows = href(chrome.base, "/rows")
        text = (
            '<p class="problem" id="missing">There is no page at this address. '
            f'<a href="{rows}">Find rows</a>.</p>'
        )
        return self.page(chrome, "Not found", text, 404)

    async def static(self, request: Request) -> Response:
        found = _STATIC.get(request.path_params["name"])
        if found is None:
            return PlainTextResponse("no such file", 404)
        body, media = found
        return Response(body, media_type=media)

    # ----------------------------------------------------------------------------- session

    async def login(self, request: Request) -> Response:
        visitor = await self.visitor(request)
        if (refusal := self.closed(visitor)) is not None:
            return refusal
        if self.sessions is None:
            return PlainTextResponse("this dashboard is read-only: no secret is configured", 403)
        if not same_origin(request, self.origins):
            return PlainTextResponse("refused: the form was not sent from this dashboard", 403)
        form = await read_form(request)
        if isinstance(form, Response):
            return form
        if not self.sessions.secret_matches(first(form, "secret")):
            log.warning(
                "dashboard: a login with the wrong secret from %s",
                request.client.host if request.client else "?",
            )
            chrome = self.chrome(request, visitor, flash="That is not the secret.", refused=True)
            return self.page(chrome, self.title, "", 403)
        response = self.to(request, "/", {"did": "logged_in"})
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
        if (refusal := self.closed(await self.visitor(request))) is not None:
            return refusal
        if self.sessions is None:
            return PlainTextResponse("this dashboard is read-only: no secret is configured", 403)
        if not same_origin(request, self.origins):
            return PlainTextResponse("refused: the form was not sent from this dashboard", 403)
        response = self.to(request, "/", {"did": "logged_out"})
        response.delete_cookie(
            COOKIE,
            path=f"{self.base(request)}/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    # ----------------------------------------------------------------------------- actions


def _whole(params: Mapping[str, str], name: str, least: int) -> int:
    """The whole number in query field `name`, `least` without one.

    Raises:
        Refusal: it is not a whole number of at most 12 digits, or is less than `least`.
    """
    text = params.get(name, "")
    if not text:
        return least
    if not (text.isascii() and text.isdigit()) or len(text) > 12 or int(text) < least:
        raise Refusal(f"{name}={text[:40]!r}: a whole number from {least}")
    return int(text)


def _runs(schedule: object, tick_us: int | None, now_us: int) -> tuple[int | None, int | None]:
    """(planned, then), by the schedule's own `next` and `following`: `planned` is its next run
    after `now_us` when no row holds the tick (`tick_us` None; a cron schedule only, an `every`
    one has none before it is seeded), and `then` the run after the next one (the tick row's, or
    the planned one). None for what cannot be said, as for a tick row another program wrote
    whose time no schedule reads."""
    if not isinstance(schedule, Cron | Every):
        return None, None
    try:
        planned = schedule.next(now_us) if tick_us is None and isinstance(schedule, Cron) else None
        upcoming = tick_us if tick_us is not None else planned
        then = None if upcoming is None else schedule.following(upcoming, max(upcoming, now_us))
    except (Refusal, OverflowError, ValueError):
        return None, None
    return planned, then


async def _last_run(jobs: Jobs, kind: str) -> tuple[int, str, int] | None:
    """The newest run of `kind` the store keeps: (row id, "done" or "dead", when it ended in
    µs), or None; two reads of one row each."""
    last = None
    for state in ("done", "dead"):
        for row in (await jobs.find(Where(state=state, kind=kind), limit=1)).rows:
            at = row.finished_at if state == "done" else row.died_at
            if at is not None and (last is None or at > last[2]):
                last = (row.id, state, at)
    return last


def _describe(schedule: object) -> str:
    """A schedule in words: the cron expression (its zone is shown beside it) or the interval."""
    if isinstance(schedule, Cron):
        return schedule.expr
    if isinstance(schedule, Every):
        return f"every {schedule.ms:,} ms"
    return repr(schedule)


def _host_names(hosts: Sequence[str]) -> frozenset[str]:
    """The names of `hosts=`, as `HostCheck` compares them.

    Raises:
        Refusal: `hosts` is one str, or holds what is not a host name.
    """
    if isinstance(hosts, str):
        raise Refusal("dashboard_app(hosts=...) takes a list of host names, not one str")
    names = set()
    for host in hosts:
        problem = host_problem(host)
        name = None
        if problem is None and isinstance(host, str):
            bare = host.count(":") > 1 and not host.startswith("[")  # IPv6, without brackets
            name = host_name(f"[{host}]" if bare else host)
        if name is None:
            raise Refusal(
                f"dashboard_app(hosts=[..., {host!r}, ...]): {problem or 'it names no host'}; "
                f"{HOST_FORMS}"
            )
        names.add(name)
    return frozenset(names)


def dashboard_app(
    jobs: Jobs,
    *,
    secret: str | None = None,
    title: str = "nilo-job",
    limit: int = 100,
    payloads: bool = False,
    session_s: int = 8 * 3_600,
    origins: Sequence[str] = (),
    public_reads: bool = False,
    access: AccessHook | None = None,
    hosts: Sequence[str] | None = None,
) -> Starlette:
    """The dashboard of `jobs`, as an ASGI application to mount or serve.

        app.mount("/jobs", dashboard_app(jobs, access=staff_only))

    Closed by default: with a secret, every page needs a login with it (401 before); with no
    secret, no `access` and not `public_reads`, it answers clients on this machine (loopback)
    only, and anyone else 403 with a sentence saying how to open it.

    Args:
        jobs: the queue to show; its store is read on every page view.
        secret: the operator's secret (at least 16 characters). Logging in with it lets the
            visitor read and act; it is never put in a cookie, but exchanged for a signed
            session. None: nobody logs in, and every POST is 403 unless `access` answers
            "full".
        title: the page's heading.
        limit: the rows per page of the rows page, 1 to 1,000 (the overview lists at most 10
            per state; the counts are always complete).
        payloads: show what a row carries of its users' data: its payload (the first 160
            characters of its JSON in the lists, all of it on the row's page), a done row's
            result, its last failure's message and traceback, its unique key and the worker
            (`host:pid`) that ran it. Off by default: each may hold personal data, addresses
            or tokens, and only the failure's name, the kind, the state and the times are
            shown.
        session_s: how long a login lasts, in seconds.
        origins: further origins (``"https://ops.example.com"``) a POST may come from, for a
            dashboard behind a proxy that changes the scheme or host; the server's own origin
            is always allowed.
        public_reads: let anyone who can reach the dashboard read every page without logging
            in; acting still needs the secret.
        access: a function of the Starlette `Request`, sync (run in a thread) or async, that
            answers for each request: "full" (read and act), "read", or None (403). It is
            how the dashboard sits behind your application's own login: read your session or
            user from the request. A visitor it answers "read" may still log in with the
            secret to act. Not with `public_reads`.
        hosts: the host names the `Host` header may name (any port); any other is a 400 with
            a sentence, against DNS rebinding. None (the default): no check, as the server of
            the application it is mounted in decides.

    Returns:
        A Starlette application. Mounted, it does not run a lifespan of its own and closes
        nothing; the queue and its store stay the application's.

    Raises:
        Refusal: the secret is too short, a setting is out of range, `access` is not
            callable or comes with `public_reads`, or `hosts` holds what is not a host name.
    """
    sessions = None
    if (checked := check_secret(secret)) is not None:
        if not is_int(session_s, 1):
            raise Refusal(f"dashboard_app(session_s={session_s!r}) takes a positive int")
        sessions = Sessions(checked, session_s)
    if not is_int(limit, 1, 1_000):
        raise Refusal(f"dashboard_app(limit={limit!r}) takes a positive int, at most 1,000")
    if isinstance(origins, str):
        raise Refusal("dashboard_app(origins=...) takes a list of origins, not one str")
    gate = Access(access, public_reads=public_reads, secret=sessions is not None)
    middleware = [Middleware(SecurityHeaders)]
    if hosts is not None:
        middleware.append(Middleware(HostCheck, hosts=_host_names(hosts)))
    board = _Dashboard(
        jobs, sessions, title=title, limit=limit, payloads=payloads, origins=origins, access=gate
    )
    return Starlette(
        routes=[
            Route("/", board.index, methods=["GET", "HEAD"]),
            Route("/rows", board.rows, methods=["GET", "HEAD"]),
            Route("/rows/{row_id:int}", board.row, methods=["GET", "HEAD"]),
            Route("/static/{name:str}", board.static, methods=["GET", "HEAD"]),
            Route("/login", board.login, methods=["POST"]),
            Route("/logout", board.logout, methods=["POST"]),
            Route("/rows/{row_id:int}/retry", board.retry, methods=["POST"]),
            Route("/rows/{row_id:int}/cancel", board.cancel, methods=["POST"]),
            Route("/bulk", board.bulk, methods=["POST"]),
            Route("/pause", board.pause, methods=["POST"]),
            Route("/resume", board.resume, methods=["POST"]),
        ],
        middleware=middleware,
        exception_handlers={404: board.not_found},
    )
