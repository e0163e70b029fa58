"""What every handler of the dashboard shares: the queue, the sessions, the settings, and the
helpers that decide what a request may see (`visit`: a page, or the 401 / 403 instead), build a
page around its main part, say that the store cannot be read, redirect after an action, and
check that a POST may change rows (access, origin, session or granted token, CSRF token)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from .. import Jobs, StoreUnavailable, now_us
from ._access import FORBIDDEN, LOCAL_ONLY, Access, Grant
from ._bulk import DONE_WORDS
from ._guard import read_form, same_origin
from ._render import Chrome, Mode, esc, layout, plural
from ._session import Sessions, new_token, token_matches, token_of

log = logging.getLogger("nilo_job")

COOKIE = "nilo_job_dashboard"
"""The session cookie's name."""
TOKEN_COOKIE = "nilo_job_dashboard_token"
"""The cookie holding the form token of a visitor the access function lets act."""


@dataclass(frozen=True, slots=True)
class Visitor:
    """Who asks, as the dashboard sees it: what they may do (`grant`), the nonce of their
    session of the secret (None: not logged in), and the token their forms carry (None: they
    may not act); `new_token` says that token is new, to be set as its cookie."""

    grant: Grant
    nonce: str | None = None
    csrf: str | None = None
    new_token: bool = False

    @property
    def acts(self) -> bool:
        """Whether the visitor may act on rows."""
        return self.grant is Grant.FULL and self.csrf is not None


_DONE = {
    "retried": ("Row {row} is queued again, from its first attempt.", False),
    "not_retried": ("Row {row} is not dead any more; nothing changed.", True),
    "cancelled": ("Row {row} was taken out of the queue.", False),
    "not_cancelled": (
        "Row {row} is not queued (a worker holds it, or it is gone); nothing changed.",
        True,
    ),
    "logged_in": ("Logged in: the actions are on.", False),
    "logged_out": ("Logged out.", False),
    "paused": ("{kind} is paused: no process starts its rows until it is resumed.", False),
    "was_paused": ("{kind} was paused already; nothing changed.", True),
    "resumed": ("{kind} is resumed: its rows start again.", False),
    "not_paused": ("{kind} was not paused; nothing changed.", True),
}


class Base:
    """What the handlers share: the queue, the sessions, the settings, and the helpers."""

    def __init__(
        self,
        jobs: Jobs,
        sessions: Sessions | None,
        *,
        title: str,
        limit: int,
        payloads: bool,
        origins: Sequence[str],
        access: Access,
    ) -> None:
        self.jobs = jobs
        self.sessions = sessions
        self.access = access
        self.title = title
        self.limit = limit
        self.payloads = payloads
        self.origins = frozenset(origin.rstrip("/").lower() for origin in origins)
        self.names = [kind.name for kind in jobs.kinds]

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

    async def visitor(self, request: Request) -> Visitor:
        """What `request` may do, and the token its forms carry."""
        nonce = self.session(request)
        grant = await self.access.grant(request, logged_in=nonce is not None)
        if grant is not Grant.FULL:
            return Visitor(grant)
        if nonce is not None and self.sessions is not None:
            return Visitor(grant, nonce, self.sessions.csrf(nonce))
        held = token_of(request.cookies.get(TOKEN_COOKIE))
        return Visitor(grant, None, held or new_token(), new_token=held is None)

    async def visit(self, request: Request) -> Visitor | Response:
        """The visitor of a page, or the page to answer instead: 401 with the login form
        when the secret must be given first, 403 when the access function refused or nothing
        opens the dashboard to a client elsewhere. No row is read for either."""
        visitor = await self.visitor(request)
        if visitor.grant.reads:
            return visitor
        if visitor.grant is Grant.LOGIN:
            chrome = self.chrome(request, visitor)
            text = (
                '<p class="problem" id="login-needed">Log in with the secret to see this '
                "dashboard.</p>"
            )
            return self.page(chrome, self.title, text, 401)
        chrome = self.chrome(request, visitor)
        why = LOCAL_ONLY if visitor.grant is Grant.LOCAL_ONLY else FORBIDDEN
        text = f'<p class="problem" id="closed">{esc(why)}</p>'
        return self.page(chrome, self.title, text, 403)

    def chrome(
        self,
        request: Request,
        visitor: Visitor,
        *,
        flash: str | None = None,
        refused: bool = False,
        problem: str | None = None,
        refresh: int | None = None,
    ) -> Chrome:
        """What this request's page shows around its main part; the flash, when not given, is
        the sentence the query's `did` names. The store is named to a visitor who may act
        only."""
        if visitor.nonce is not None:
            mode = Mode.OPERATOR
        elif visitor.acts:
            mode = Mode.GRANTED
        elif not visitor.grant.reads and visitor.grant is not Grant.LOGIN:
            mode = Mode.CLOSED
        elif self.sessions is not None:
            mode = Mode.LOGIN
        else:
            mode = Mode.READ_ONLY
        if flash is None:
            flash, refused = self.did(request.query_params)
        return Chrome(
            title=self.title,
            store=repr(self.jobs.store) if visitor.acts else "",
            base=self.base(request),
            now_us=now_us(),
            mode=mode,
            csrf=visitor.csrf,
            flash=flash,
            refused=refused,
            problem=problem,
            refresh=refresh,
            payloads=self.payloads,
            new_csrf=visitor.new_token,
            https=request.url.scheme == "https",
        )

    def unreadable(self, visitor: Visitor, error: Exception, what: str = "store") -> str:
        """The sentence a page shows when the `what` ("store", "flow") cannot be read, after
        logging it: a store that cannot be reached is one WARNING line; anything else, a bug,
        an ERROR with its traceback. Only a visitor who may act is shown the error itself (it
        may name the store's host or file)."""
        if isinstance(error, StoreUnavailable):
            log.warning("dashboard: the %s cannot be read: %s", what, error)
        else:
            log.error("dashboard: the %s cannot be read: %s", what, error, exc_info=True)
        if visitor.acts:
            return f"The {what} cannot be read: {type(error).__name__}: {error}"
        return f"The {what} cannot be read; the server's log says why."

    def did(self, query: Mapping[str, str]) -> tuple[str | None, bool]:
        """The sentence saying what the last action did, from the query it redirected to."""
        did = query.get("did", "")
        row, kind = query.get("row", ""), query.get("kind", "")
        if did == "bulk":
            verb, n, of = query.get("verb", ""), query.get("n", ""), query.get("of", "")
            digits = (n + of).isascii() and n.isdigit() and of.isdigit()
            if verb not in DONE_WORDS or not digits:
                return None, False
            done, asked = int(n), int(of)
            if done == asked:
                return f"{plural(done, 'row')} {DONE_WORDS[verb]}.", False
            return (
                f"{done:,} of {plural(asked, 'row')} {DONE_WORDS[verb]}: the others had "
                "changed meanwhile.",
                True,
            )
        if did not in _DONE:
            return None, False
        text, refused = _DONE[did]
        if "{row}" in text and not row.isdigit():
            return None, False
        if "{kind}" in text and kind not in self.names:
            return None, False
        return text.format(row=row, kind=kind), refused

    def page(
        self, chrome: Chrome, heading: str, main: str, status: int, here: str = ""
    ) -> Response:
        """An HTML response: `main` in the page skeleton, with the cookie of a new form token
        (HttpOnly, SameSite=Strict, Secure over https, for the prefix)."""
        response = HTMLResponse(layout(chrome, heading, main, here=here), status_code=status)
        if chrome.new_csrf and chrome.csrf is not None:
            response.set_cookie(
                TOKEN_COOKIE,
                chrome.csrf,
                path=f"{chrome.base}/",
                httponly=True,
                samesite="strict",
                secure=chrome.https,
            )
        return response

    def to(self, request: Request, path: str, query: Mapping[str, object]) -> RedirectResponse:
        """303 to `path` under the prefix, with `query`."""
        fields = {k: str(v) for k, v in query.items() if v is not None and v != ""}
        tail = f"?{urlencode(fields, errors='surrogateescape')}" if fields else ""
        return RedirectResponse(f"{self.base(request)}{path}{tail}", status_code=303)

    async def authorize(self, request: Request) -> tuple[Visitor, dict[str, list[str]]] | Response:
        """The visitor and the form of a request that may change rows; otherwise the refusal
        to send."""
        visitor = await self.visitor(request)
        if (refusal := self.closed(visitor)) is not None:
            return refusal
        if visitor.grant is not Grant.FULL and self.sessions is None:
            if self.access.hook is not None:
                return PlainTextResponse("refused: your access to this dashboard is to read", 403)
            return PlainTextResponse("this dashboard is read-only: no secret is configured", 403)
        if not same_origin(request, self.origins):
            return PlainTextResponse("refused: the form was not sent from this dashboard", 403)
        if not visitor.acts:
            return PlainTextResponse("log in with the secret first", 403)
        form = await read_form(request)
        if isinstance(form, Response):
            return form
        offered = first(form, "csrf")
        if visitor.nonce is not None and self.sessions is not None:
            if not self.sessions.csrf_matches(visitor.nonce, offered):
                return PlainTextResponse(
                    "refused: the form's CSRF token is not this session's", 403
                )
        elif visitor.new_token or not token_matches(request.cookies.get(TOKEN_COOKIE), offered):
            return PlainTextResponse("refused: the form's CSRF token is not this visitor's", 403)
        return visitor, form

    @staticmethod
    def closed(visitor: Visitor) -> Response | None:
        """The 403 to answer a POST of a visitor the access function refused, or of a client
        elsewhere when nothing opens the dashboard to it; None for any other."""
        if visitor.grant is Grant.FORBIDDEN:
            return PlainTextResponse(f"refused: {FORBIDDEN}", 403)
        if visitor.grant is Grant.LOCAL_ONLY:
            return PlainTextResponse(f"refused: {LOCAL_ONLY}", 403)
        return None

    # ----------------------------------------------------------------------------- pages


def first(form: Mapping[str, Sequence[str]], name: str) -> str:
    """The first value of a form field, "" without one."""
    values = form.get(name)
    return values[0] if values else ""
