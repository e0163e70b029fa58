"""What stands between a request and the queue: the security headers on every response, a
sentence and 503 instead of a traceback and 500, the Host check, the origin check, and the
bounded form reader.
"""

from __future__ import annotations

import ipaddress
import logging
import string
from collections.abc import Collection, Iterable
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import JobError
from ._bulk import MOST_IDS

log = logging.getLogger("nilo_job")

MAX_FORM_BYTES = 40_960
"""The largest form accepted, in bytes: room for a page of 1,000 ticked row ids."""
MAX_FORM_FIELDS = MOST_IDS + 16
"""The most fields a form may have: the ticked ids and a few more."""

CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
"""The Content-Security-Policy of every response: the stylesheet and the one script of this
dashboard, nothing inline, no frames."""

SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """Adds `SECURITY_HEADERS` to every response of the wrapped app, and answers a failure
    inside it (a store that fails mid-action, say) with a sentence and 503 rather than a
    traceback and 500."""

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
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
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


class HostCheck:
    """Answers 400 with a sentence to a request whose `Host` header names none of `hosts`
    (lower case; an IPv6 address without its brackets), whatever its port: a page whose DNS
    name was rebound to this server's address sends its own name, and is refused. A request
    without a `Host` is refused too."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app = app
        self.hosts = frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = Headers(scope=scope).get("host", "")
        if host_name(given) in self.hosts:
            await self.app(scope, receive, send)
            return
        log.warning("dashboard: a request for the Host %r refused", given[:200])
        names = ", ".join(sorted(self.hosts))
        answer = PlainTextResponse(
            f"refused: this dashboard answers to the names {names}, not to the Host "
            f"{given[:200]!r}; to open it under another name, allow that name (--allow-host "
            "NAME for the command, hosts=[...] for dashboard_app)",
            400,
        )
        await answer(scope, receive, send)


def host_name(header: str) -> str | None:
    """The name in a `Host` header, lower case, without its port and an IPv6 address's
    brackets ("[::1]:8900" is "::1"); None when it names none, or holds what no Host holds (a
    user part, a path, a space)."""
    if any(c in header for c in "@/?#\\ \t") or not header:
        return None
    try:
        name = urlsplit(f"//{header}").hostname
    except ValueError:
        return None
    return name or None


HOST_FORMS = (
    "a host is a name (letters, digits, '-' and '.') or an IP address, optionally with a port: "
    "'ops.example.com', 'ops.example.com:8900', '10.0.0.5', '::1' or '[::1]:8900'"
)
"""How a host is written, for the sentences that refuse one."""

_NAME_CHARS = frozenset(string.ascii_letters + string.digits + "-._")


def host_problem(host: object) -> str | None:
    """What is wrong with `host` as a name the `Host` header may name (a host name, an IPv4
    address, an IPv6 address with or without brackets, each optionally with a port), in a
    few words; None when nothing is."""
    if not isinstance(host, str):
        return f"it is {type(host).__name__}, not a str"
    if not host.strip():
        return "it is empty"
    if host.startswith("["):
        address, closed, port = host[1:].partition("]")
        if not closed:
            return "it opens an IPv6 address with '[' but never closes it with ']'"
        if (problem := _ipv6_problem(address)) is not None:
            return problem
        if port and not port.startswith(":"):
            return f"{port[0]!r} follows the IPv6 address, where only ':' and a port may"
        return _port_problem(port[1:]) if port else None
    if host.count(":") > 1:
        return _ipv6_problem(host)
    name, colon, port = host.partition(":")
    if colon and (problem := _port_problem(port)) is not None:
        return problem
    if not name:
        return "it has no name before its port"
    for index, char in enumerate(name):
        if char not in _NAME_CHARS:
            said = f"{'a space' if char == ' ' else repr(char)} (at index {index})"
            if not char.isascii():
                return f"it holds {said}: write a name that is not ASCII in its IDNA form (xn--…)"
            return f"it holds {said}, which no host name holds"
    return None


def _ipv6_problem(address: str) -> str | None:
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return f"{address!r} has more than one ':', but is not an IPv6 address"
    return None


def _port_problem(port: str) -> str | None:
    if not (port.isascii() and port.isdigit() and 0 < int(port) <= 65_535):
        return f"its port {port!r} is not a number from 1 to 65535"
    return None


def same_origin(request: Request, trusted: Collection[str]) -> bool:
    """Whether the request says it comes from this server's own origin (or one of `trusted`,
    lower case, no final slash): its `Origin` header, or without one its `Referer`; False when
    it has neither."""
    host = request.headers.get("host")
    allowed = set(trusted)
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


async def read_form(request: Request) -> dict[str, list[str]] | Response:
    """The request's url-encoded form (every value of each field), or the refusal to send: 415
    for another content type, 413 past `MAX_FORM_BYTES` bytes or `MAX_FORM_FIELDS` fields, 400
    for a form that cannot be read."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return PlainTextResponse("send an application/x-www-form-urlencoded form", 415)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return PlainTextResponse(f"a form is at most {MAX_FORM_BYTES} bytes", 413)
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return PlainTextResponse("the form cannot be read", 400)
    if text.count("&") >= MAX_FORM_FIELDS:
        return PlainTextResponse(f"a form has at most {MAX_FORM_FIELDS} fields", 413)
    try:
        return parse_qs(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:
        return PlainTextResponse("the form cannot be read", 400)
