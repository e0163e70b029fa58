"""The bounds on every wait of the PostgreSQL store on its server, so that a connection that
went silent (a NAT or a firewall that forgot it, a partition, a server host that stopped
answering) never stalls a caller:

- a connection opens within `connect_timeout` from the URL, or `CONNECT_TIMEOUT_S`;
- every call (a statement, or one transaction) is answered within `answer_ms` (`ANSWER_MS`
  unless the store is told; once per `ROWS_PER_BOUND` rows for a call over many rows; none for a
  migration; the URL's own `statement_timeout` and a second when that is longer: `bound_s`). A
  call not answered in time has its connection's socket shut (`Deadline`, `shut`): the wait
  ends at once, the connection is discarded, and the caller gets `StoreUnavailable` saying which
  call, after how long, on which connection;
- TCP keepalives and libpq's `tcp_user_timeout` are on unless the URL sets them
  (`with_timeout`), so the kernel also finds a dead flow under a call that has no bound, and
  under idle connections.

`connections` applies them to every call, and replaces the store's idle connections when one
was found dead or silent (`lost`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
from collections.abc import Callable
from types import TracebackType
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import PoolTimeout

from ..._base.errors import Refusal, StoreUnavailable, is_int

CONNECT_TIMEOUT_S = 10
"""How long a connection may take to open, in seconds, unless the URL says (`connect_timeout`)."""

ANSWER_MS = 10_000
"""How long the server has to answer one call, in milliseconds, unless the store is told
(`answer_ms`)."""

ROWS_PER_BOUND = 10_000
"""A call over many rows is given the bound once for every this many rows."""

KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}
"""libpq's TCP keepalives (seconds), set unless the URL sets its own: a flow that went dead under
an idle connection is found within about a minute."""


TCP_USER_TIMEOUT_MS = 30_000
"""libpq's `tcp_user_timeout` unless the URL sets it (or `answer_ms` when longer): data the
server's host has not acknowledged for that long means the flow is dead. It is the kernel's
bound under calls that have none of their own (a migration) and under idle connections; the
bound on a call is `Deadline`'s. (Not shorter: it also counts while a busy server is slow to
read a large statement.)"""

MOST_ANSWER_MS = 86_400_000
"""The longest `answer_ms`: a day."""

_WHOLE = {
    "connect_timeout": (1, None, "whole seconds, 1 or more (0, which waits for ever, is refused)"),
    "tcp_user_timeout": (0, None, "whole milliseconds, 0 or more"),
    "keepalives": (0, 1, "1 (on) or 0 (off)"),
    "keepalives_idle": (0, None, "whole seconds, 0 or more"),
    "keepalives_interval": (0, None, "whole seconds, 0 or more"),
    "keepalives_count": (0, None, "a count, 0 or more"),
}
"""The URL's TCP settings: the least and most value libpq takes for each, and what it takes."""


def with_timeout(conninfo: str, answer_ms: int = ANSWER_MS) -> tuple[str, float]:
    """`conninfo` with a connect timeout (the URL's own, or `CONNECT_TIMEOUT_S`), TCP keepalives
    (`KEEPALIVES`) and `tcp_user_timeout` (`TCP_USER_TIMEOUT_MS`, or `answer_ms` when longer),
    each where the URL sets none; and the connect timeout in seconds.

    Raises:
        Refusal: the URL gives one of those a value libpq would refuse at connect time, or
            `connect_timeout=0` (no bound).
    """
    given = conninfo_to_dict(conninfo)
    for name, (least, most, what) in _WHOLE.items():
        value = given.get(name)
        if value is not None and not (
            str(value).isdigit() and is_int(int(str(value)), least, most)
        ):
            raise Refusal(f"{name}={value} in the URL: {what}")
    defaults: dict[str, Any] = {
        name: value for name, value in KEEPALIVES.items() if given.get(name) is None
    }
    if given.get("tcp_user_timeout") is None:
        defaults["tcp_user_timeout"] = max(answer_ms, TCP_USER_TIMEOUT_MS)
    if given.get("connect_timeout") is None:
        defaults["connect_timeout"] = CONNECT_TIMEOUT_S
        timeout_s: float = CONNECT_TIMEOUT_S
    else:
        timeout_s = max(2.0, float(str(given["connect_timeout"])))  # libpq waits 2 s at least
    return (make_conninfo(conninfo, **defaults) if defaults else conninfo), timeout_s


_UNITS_MS = {
    "us": 0.001, "": 1, "ms": 1, "s": 1_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000
}  # fmt: skip


def statement_timeout_ms(conninfo: str) -> int | None:
    """The `statement_timeout` the URL's `options` give the server (`-c statement_timeout=30s`,
    `1.5s`, `90000`), in milliseconds (0: none); None when they give none, or one this cannot
    read (the server then says what is wrong with it)."""
    options = conninfo_to_dict(conninfo).get("options") or ""
    found = re.search(
        r"statement_timeout\s*=\s*'?(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d|)(?![\w.])", str(options)
    )
    if found is None:
        return None
    return round(float(found[1]) * _UNITS_MS[found[2]])


def bound_s(answer_ms: int, conninfo: str) -> float | None:
    """How long one call may wait for its answer, in seconds: `answer_ms`, or the URL's own
    `statement_timeout` and a second more when that is longer (the server cuts the statement
    and says so); None when the URL turns `statement_timeout` off (0): a statement may then
    run as long as it likes, and only TCP finds a dead flow."""
    statement_ms = statement_timeout_ms(conninfo)
    if statement_ms == 0:
        return None
    if statement_ms is None:
        return answer_ms / 1_000
    return max(answer_ms, statement_ms + 1_000) / 1_000


def lost(error: BaseException) -> bool:
    """Whether `error` says a connection was lost: the driver's own (no SQLSTATE), a connection
    exception (class 08) or the server shutting sessions down (57P); not the pool's wait for a
    free connection running out, not an error of a statement (a lock not available)."""
    if not isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    if isinstance(error, PoolTimeout):
        return False
    state = error.sqlstate
    return state is None or state.startswith(("08", "57P"))


def shut(conn: psycopg.AsyncConnection[Any]) -> None:
    """Shut `conn`'s socket both ways, without a word to the server and without waiting: what
    waits on it ends at once, as if the server had closed it, and the connection is broken
    (closed by whoever holds it, as any broken connection). The descriptor stays open until
    then, so nothing else can be handed its number meanwhile."""
    with (
        contextlib.suppress(OSError, psycopg.Error),
        socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock,
    ):
        sock.shutdown(socket.SHUT_RDWR)


class Deadline:
    """The bound of one call on one connection, entered around the call (`with`): `seconds`
    after it began (None: no bound), the connection's socket is shut (`shut`), so the call
    fails at once, `expired()` is called (the store replaces its other idle connections), and
    the call's error becomes `StoreUnavailable` saying which call had no answer (`what`), after
    how long, on which connection (`on`) of the server at `where`. Costs one timer of the event
    loop, and no round trip.
    """

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        what: str,
        on: str,
        seconds: float | None,
        where: str,
        expired: Callable[[], None],
    ) -> None:
        self.conn, self.what, self.on, self.where = conn, what, on, where
        self.seconds, self.expired = seconds, expired
        self.timer: asyncio.TimerHandle | None = None
        self.fired = False
        self.backend = 0

    def __enter__(self) -> Deadline:
        if self.seconds is not None:
            self.timer = asyncio.get_running_loop().call_later(self.seconds, self._expire)
        return self

    def _expire(self) -> None:
        self.fired = True
        with contextlib.suppress(psycopg.Error):
            self.backend = self.conn.info.backend_pid
        shut(self.conn)
        self.expired()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if not self.fired:
            return
        if error is None:  # answered just as the bound passed: its socket is shut all the same
            self.conn.pgconn.finish()
            return
        if isinstance(error, Exception):
            assert self.seconds is not None
            raise StoreUnavailable(
                f"PostgreSQL at {self.where} did not answer {self.what} within "
                f"{self.seconds:g} s on {self.on} (server process {self.backend}); that "
                "connection was closed, and the next call opens a new one"
            ) from error
