"""Who may read the dashboard, and who may act on it: one `Grant` per request.

The operator chooses once, when the app is made; each request is then one of five grants:

    access=hook          the hook's answer: "full" (read and act), "read", or None (forbidden);
                         a visitor logged in with the secret may act where the hook says "read"
    logged in            full, with the secret's session
    public_reads=True    read; act after logging in with the secret
    a secret             log in first: 401, and no row is read
    none of these        read from this machine (a loopback client) only; anyone else 403

A client is on this machine when its address (`request.client.host`) is a loopback address and
the request carries no header a proxy adds (`Forwarded`, any `X-Forwarded-*` such as
`X-Forwarded-For`, `X-Forwarded-Host` or `X-Forwarded-Proto`, `X-Real-IP`, `Via`), whichever
one alone: behind a proxy on the same machine every request comes from loopback, and is not
local for that.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from enum import Enum
from inspect import isawaitable, iscoroutinefunction
from typing import Literal

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from .._base.errors import Refusal

log = logging.getLogger("nilo_job")

Level = Literal["full", "read"]
"""What an access hook grants: "full" (read and act) or "read"; None is forbidden."""

AccessHook = Callable[[Request], "Level | Awaitable[Level | None] | None"]
"""`access=`: a function of the request (sync, run in a thread, or async) that answers "full",
"read" or None (forbidden)."""

LOCAL_ONLY = (
    "This dashboard answers only on the machine it runs on: it has no secret, and no read access "
    "was chosen. To open it, set a secret and log in with it (dashboard_app(secret=...), or the "
    "command's --secret-env), let anyone who can reach it read (public_reads=True, or "
    "--public-reads), or let your application decide for each request "
    "(access=a function of the request answering 'full', 'read' or None)."
)
"""What a client not on this machine is told when nothing opens the dashboard to it."""

FORBIDDEN = "Your application's access check does not let you see this dashboard."
"""What a visitor the access hook answered None is told."""

_PROXY_HEADERS = frozenset({"forwarded", "x-real-ip", "via"})
"""The headers a proxy adds, beside every `X-Forwarded-*` one (`proxied`)."""


class Grant(Enum):
    """What one request may do."""

    FULL = "full"
    """Read every page and act on rows."""
    READ = "read"
    """Read every page; no action."""
    LOGIN = "login"
    """Nothing until logged in with the secret: 401."""
    FORBIDDEN = "forbidden"
    """The access hook answered None: 403."""
    LOCAL_ONLY = "local only"
    """Nothing was chosen and the client is not on this machine: 403."""

    @property
    def reads(self) -> bool:
        """Whether the pages may be shown."""
        return self in (Grant.FULL, Grant.READ)


class Access:
    """The dashboard's choice of who may read, applied to each request.

    Args:
        hook: `access=`, or None.
        public_reads: `public_reads=`.
        secret: whether a secret is configured (a visitor may log in).

    Raises:
        Refusal: the hook is not callable, or both a hook and public_reads were given.
    """

    def __init__(self, hook: AccessHook | None, *, public_reads: bool, secret: bool) -> None:
        if hook is not None and not callable(hook):
            raise Refusal(
                f"dashboard_app(access={hook!r}) takes a function of the request that answers "
                "'full', 'read' or None"
            )
        if not isinstance(public_reads, bool):
            raise Refusal(f"dashboard_app(public_reads={public_reads!r}) takes True or False")
        if hook is not None and public_reads:
            raise Refusal(
                "dashboard_app(access=..., public_reads=True): choose one; the access function "
                "decides who reads, so answer 'read' from it for everyone you want to let read"
            )
        self.hook = hook
        self.public_reads = public_reads
        self.secret = secret

    async def grant(self, request: Request, *, logged_in: bool) -> Grant:
        """What `request` may do; `logged_in` says it carries a live session of the secret.

        The hook, when there is one, is asked first and its None is final. An answer that is
        none of "full", "read" and None is logged as an error and forbidden.
        """
        if self.hook is not None:
            said = await self._ask(request)
            if said is None:
                return Grant.FORBIDDEN
            return Grant.FULL if said == "full" or logged_in else Grant.READ
        if logged_in:
            return Grant.FULL
        if self.public_reads:
            return Grant.READ
        if self.secret:
            return Grant.LOGIN
        return Grant.READ if on_this_machine(request) else Grant.LOCAL_ONLY

    async def _ask(self, request: Request) -> Level | None:
        hook = self.hook
        assert hook is not None
        if iscoroutinefunction(hook) or iscoroutinefunction(type(hook).__call__):
            said: object = await hook(request)  # type: ignore[misc]
        else:
            said = await run_in_threadpool(hook, request)
            if isawaitable(said):
                said = await said
        if said is None:
            return None
        if said == "full":
            return "full"
        if said == "read":
            return "read"
        log.error(
            "dashboard: access=%s answered %r; it answers 'full', 'read' or None; this request "
            "is refused",
            getattr(hook, "__qualname__", repr(hook)),
            said,
        )
        return None


def proxied(request: Request) -> bool:
    """Whether the request carries any header a proxy adds: `Forwarded`, any `X-Forwarded-*`
    (`-For`, `-Host`, `-Proto`, `-Port`, `-Prefix`, …), `X-Real-IP` or `Via`, alone or not."""
    return any(
        name in _PROXY_HEADERS or name.startswith("x-forwarded-") for name in request.headers
    )


def on_this_machine(request: Request) -> bool:
    """Whether the client is a loopback address (127.0.0.0/8, ::1, or ::ffff:127.x.x.x) and
    the request came through no proxy that says so in a header of its own (`proxied`)."""
    if proxied(request):
        return False
    host = request.client.host if request.client is not None else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
