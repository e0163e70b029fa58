"""What every handler of the dashboard shares: the queue, the sessions, the settings, and the
helpers that build a page around its main part, redirect after an action, and check that a POST
may change rows (origin, session, CSRF token)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from .. import Jobs, now_us
from ._bulk import DONE_WORDS
from ._guard import read_form, same_origin
from ._render import Chrome, Mode, layout, plural
from ._session import Sessions

COOKIE = "nilo_job_dashboard"
"""The session cookie's name."""

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
    ) -> None:
        self.jobs = jobs
        self.sessions = sessions
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

    def chrome(
        self,
        request: Request,
        *,
        flash: str | None = None,
        refused: bool = False,
        problem: str | None = None,
        refresh: int | None = None,
    ) -> Chrome:
        """What this request's page shows around its main part; the flash, when not given, is
        the sentence the query's `did` names."""
        nonce = self.session(request)
        if self.sessions is None:
            mode = Mode.READ_ONLY
        elif nonce is None:
            mode = Mode.LOGIN
        else:
            mode = Mode.OPERATOR
        if flash is None:
            flash, refused = self.did(request.query_params)
        return Chrome(
            title=self.title,
            store=repr(self.jobs.store),
            base=self.base(request),
            now_us=now_us(),
            mode=mode,
            csrf=None if nonce is None or self.sessions is None else self.sessions.csrf(nonce),
            flash=flash,
            refused=refused,
            problem=problem,
            refresh=refresh,
            payloads=self.payloads,
        )

    def did(self, query: Mapping[str, str]) -> tuple[str | None, bool]:
        """The sentence saying what the last action did, from the query it redirected to."""
        did = query.get("did", "")
        row, kind = query.get("row", ""), query.get("kind", "")
        if did == "bulk":
            verb, n, of = query.get("verb", ""), query.get("n", ""), query.get("of", "")
            if verb not in DONE_WORDS or not n.isdigit() or not of.isdigit():
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
        """An HTML response: `main` in the page skeleton."""
        return HTMLResponse(layout(chrome, heading, main, here=here), status_code=status)

    def to(self, request: Request, path: str, query: Mapping[str, object]) -> RedirectResponse:
        """303 to `path` under the prefix, with `query`."""
        fields = {k: str(v) for k, v in query.items() if v is not None and v != ""}
        tail = f"?{urlencode(fields, errors='surrogateescape')}" if fields else ""
        return RedirectResponse(f"{self.base(request)}{path}{tail}", status_code=303)

    async def authorize(self, request: Request) -> dict[str, list[str]] | Response:
        """The form of a request that may change rows; otherwise the refusal to send."""
        if self.sessions is None:
            return PlainTextResponse("this dashboard is read-only: no secret is configured", 403)
        if not same_origin(request, self.origins):
            return PlainTextResponse("refused: the form was not sent from this dashboard", 403)
        nonce = self.session(request)
        if nonce is None:
            return PlainTextResponse("log in with the secret first", 403)
        form = await read_form(request)
        if isinstance(form, Response):
            return form
        if not self.sessions.csrf_matches(nonce, first(form, "csrf")):
            return PlainTextResponse("refused: the form's CSRF token is not this session's", 403)
        return form

    # ----------------------------------------------------------------------------- pages


def first(form: Mapping[str, Sequence[str]], name: str) -> str:
    """The first value of a form field, "" without one."""
    values = form.get(name)
    return values[0] if values else ""
