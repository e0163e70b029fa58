"""MariaDB/MySQL connections: the server a URL names, the store's pool, forks, bounds, and the
driver's errors as sentences.

`Connections` is where every statement of the store finds its connection: a pool of the store's
own, up to `max_size` connections, one pool per event loop that calls the store (a connection
belongs to the loop that opened it: `jobs.sync`'s loop and the application's each get theirs).
Every connection is in autocommit, with the session `session`, `isolation` and `lock_wait` set
as it opens (UTC, strict, READ COMMITTED, row locks waited for no longer than `answer_ms`); a
call that needs a transaction opens one (`run(..., transaction=True)`) and commits it before the
connection goes back. After a fork the parent's
connections are left to it: the child opens its own.

Every wait on the server is bounded: a connection, and a free one when all `max_size` are in
use, within the URL's `connect_timeout` (10 s when it has none), a call's answer within
`answer_ms` (a deadline on the event loop's one timer, `_base.deadlines`: at it, the call is
cancelled, its connection is closed and the call raises `StoreUnavailable` naming it). A
connection that sat idle for a while is pinged before it is used, so that one the server dropped
(its `wait_timeout`, a restart) is replaced instead of failing the call. A deadlock, which the
server ends by undoing one transaction whole, is tried again twice before it is a
`StoreUnavailable`, each try within `answer_ms`: the longest a call waits for its answers is
`bound_ms`.

The server's errors are told apart by their numbers (`refused`). Those that mean it cannot be
reached, is going away or ended the session (`GONE`), is short of something for now (`BUSY`),
refused the login, has no such database or lacks a table are `StoreUnavailable` with a sentence
naming the server, never its password: the caller may try again. Any other error the server
answers a statement with is the statement refused outright (a trigger's `SIGNAL`, a privilege
the user lacks, a read-only server, a constraint): it is raised as the driver's own error, as
the other stores raise their driver's, and trying it again would meet the same answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import asyncmy
from asyncmy.connection import Connection
from asyncmy.constants import CLIENT
from asyncmy.cursors import Cursor
from asyncmy.errors import IntegrityError, MySQLError, NotSupportedError, ProgrammingError

from ..._base import deadlines
from ..._base.errors import Refusal, StoreUnavailable
from .. import _schema
from .._target import raw_in_userinfo, scrubbed, shown
from .statements import SQL, missing_table
from .tls import OPTIONS as TLS_OPTIONS
from .tls import Tls, failed_sentence, read_tls

T = TypeVar("T")

DEFAULT_PORT = 3306
CONNECT_S = 10.0
"""The connect timeout of a URL that does not give its own `connect_timeout` (seconds)."""

IDLE_S = 30.0
"""A connection idle longer than this is pinged before a call uses it."""

DUP_ENTRY = 1062
"""ER_DUP_ENTRY: a unique key (or a kind already paused) another row holds."""
DEADLOCK = 1213
"""ER_LOCK_DEADLOCK: the server undid this transaction whole; it may be made again."""
NO_TABLE = 1146
"""ER_NO_SUCH_TABLE."""
DENIED = frozenset({1142, 1143})
"""The user lacks a privilege on a table or a column (ER_TABLEACCESS_DENIED_ERROR,
ER_COLUMNACCESS_DENIED_ERROR)."""
LOGIN = {1044, 1045, 1698}
"""The server refused the login (ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_ERROR, and
ER_ACCESS_DENIED_NO_PASSWORD_ERROR)."""
NO_DATABASE = 1049
"""ER_BAD_DB_ERROR."""
CONN_HOST_ERROR = 2003
"""CR_CONN_HOST_ERROR: the driver could not reach the server (its words name the host)."""
TRIES = 3
"""How many times a call that met a deadlock is made in all."""
PAUSE_MS = 5
"""The pause before a call that met a deadlock is made again: this many milliseconds times the
tries made so far."""

DRIVER = range(2000, 3000)
"""The driver's own error numbers (CR_*: the server cannot be reached, the connection was lost or
is out of step). The server's are 1000 and up, but for these; MariaDB and MySQL share those up to
about 1900 and number their own errors past it each its own way."""

GONE = frozenset({
    1053,  # ER_SERVER_SHUTDOWN: the server is shutting down; it ends every session
    1152,  # ER_ABORTING_CONNECTION: the server aborted this connection
    1158,  # ER_NET_READ_ERROR: the server could not read this connection's packets; it ends it
    1159,  # ER_NET_READ_INTERRUPTED: the server timed out reading this connection; it ends it
    1160,  # ER_NET_ERROR_ON_WRITE: the server could not write to this connection; it ends it
    1161,  # ER_NET_WRITE_INTERRUPTED: the server timed out writing to this connection; it ends it
    1184,  # ER_NEW_ABORTING_CONNECTION: as 1152, in the words of newer servers
    1927,  # ER_CONNECTION_KILLED (MariaDB): the session was ended by KILL (or a shutdown)
    4031,  # ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+): the session was idle past wait_timeout
})  # fmt: skip
"""The server's errors that say it ended this session, or is going away: the connection is done
with (and the idle ones likely are too), and the call is `StoreUnavailable`. (4031 is also
MariaDB's ER_REFERENCED_TRG_DOES_NOT_EXIST, which only a CREATE TRIGGER meets; the store sends
none.)"""

BUSY = frozenset({
    1021,  # ER_DISK_FULL: the server's disk is full; it takes writes again once space is freed
    1037,  # ER_OUTOFMEMORY: the server is out of memory for now
    1040,  # ER_CON_COUNT_ERROR: max_connections reached; a connection comes free as others close
    1041,  # ER_OUT_OF_RESOURCES: the server is out of memory (or threads) for now
    1047,  # ER_UNKNOWN_COM_ERROR: a Galera node not (yet) in the cluster's primary component
    1114,  # ER_RECORD_FILE_FULL: the table's disk or tablespace is full; space may be freed
    1135,  # ER_CANT_CREATE_THREAD: the server's host is out of threads or memory for now
    1203,  # ER_TOO_MANY_USER_CONNECTIONS: max_user_connections reached; others will close
    1205,  # ER_LOCK_WAIT_TIMEOUT: another transaction held a row lock past the wait; it will end
    1206,  # ER_LOCK_TABLE_FULL: InnoDB's locks filled the buffer pool; freed as transactions end
    1213,  # ER_LOCK_DEADLOCK: the server undid this transaction whole (after `TRIES` tries)
    1226,  # ER_USER_LIMIT_REACHED: the user's max_queries (or updates) per hour; the hour resets it
    1317,  # ER_QUERY_INTERRUPTED: the statement was ended by KILL QUERY, not refused
    1969,  # ER_STATEMENT_TIMEOUT (MariaDB): the statement ran past max_statement_time
    3024,  # ER_QUERY_TIMEOUT (MySQL; MariaDB leaves it unused): it ran past max_execution_time
})  # fmt: skip
"""The server's errors that say it is short of something for now, or ended the statement for its
time rather than for what it says: the same call may pass later, so it is `StoreUnavailable`. A
timeout of the server's is one, as PostgreSQL's `statement_timeout` is on that store."""

SAID = frozenset({*LOGIN, NO_DATABASE, NO_TABLE})
"""The server's errors the store says in a sentence of its own (`Connections.unavailable`), as
`StoreUnavailable`: a login refused, no such database (at connect), no such table (the store's
tables missing or renamed away, which `nilo-job migrate` makes, as on the other stores)."""

QUERY = frozenset({"connect_timeout", "unix_socket", *TLS_OPTIONS})
"""What a URL's query may say."""


@dataclass(frozen=True, slots=True)
class Server:
    """Where a `mysql://` or `mariadb://` URL leads: `flavor` is "MariaDB" or "MySQL", as its
    scheme says (for sentences), `connect_timeout` in seconds."""

    flavor: str
    host: str
    port: int
    user: str
    password: str
    database: str
    connect_timeout: float = CONNECT_S
    unix_socket: str | None = None
    tls: Tls | None = None

    @property
    def address(self) -> str:
        """`host:port` (an IPv6 address in brackets), as the URL names the server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def place(self) -> str:
        """Where the store connects, for sentences: `host:port`, or `PATH (unix_socket)` when
        the URL names a socket (the host and the port are then not used)."""
        if self.unix_socket is not None:
            return f"{self.unix_socket} (unix_socket)"
        return self.address

    @property
    def where(self) -> str:
        """`host:port/database` (`PATH (unix_socket)/database` through a socket), for sentences
        (never the password)."""
        return f"{self.place}/{self.database}"


def server_of(url: str) -> Server:
    """The server `url` names: `mysql://user:password@host:port/database` (or `mariadb://…`),
    the user and password percent-encoded, with `?connect_timeout=S`, `?unix_socket=PATH` and
    TLS (`ssl_mode`, `ssl_ca`, `ssl_cert`, `ssl_key`: see `read_tls`) as options.

    Raises:
        Refusal: the URL names no database, has a port that is not one, or an option that is
            not one of those, or TLS options `read_tls` refuses; or its user or password
            holds an `@`, `/`, `?` or `#` that is not percent-encoded (as PostgreSQL's store
            refuses it).
    """
    said = shown(url)
    raw = raw_in_userinfo(url)
    if raw:
        held = " and ".join(f"{'an' if char == '@' else 'a'} '{char}'" for char in raw)
        raise Refusal(
            f"job.Table({said!r}) cannot be read as meant: its user or password holds {held} "
            f"that {'is' if len(raw) == 1 else 'are'} not percent-encoded, so a piece of the "
            "password may be read as the host; percent-encode the user and the password "
            "(urllib.parse.quote(password, safe='') writes '@' as %40, ':' as %3A and '/' as "
            "%2F)"
        )
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORT
    except ValueError as error:
        raise Refusal(
            f"job.Table({said!r}) is not a URL MariaDB/MySQL can use: {scrubbed(str(error), url)}"
        ) from None
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise Refusal(
            f"job.Table({said!r}) names no database: write "
            f"'{parts.scheme}://user:password@host:3306/database'"
        )
    options: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in QUERY:
            raise Refusal(
                f"job.Table({said!r}): {name!r} is not an option a MariaDB/MySQL URL takes "
                f"here; it takes {', '.join(sorted(QUERY))}"
            )
        options[name] = value
    timeout = CONNECT_S
    if "connect_timeout" in options:
        try:
            timeout = float(options["connect_timeout"])
        except ValueError:
            timeout = 0.0
        if not 0 < timeout <= 3_600:
            raise Refusal(
                f"job.Table({said!r}): connect_timeout is seconds, more than 0 and at most 3600"
            )
    return Server(
        flavor="MariaDB" if parts.scheme == "mariadb" else "MySQL",
        host=parts.hostname or "localhost",
        port=port,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        database=database,
        connect_timeout=timeout,
        unix_socket=options.get("unix_socket") or None,
        tls=read_tls(options, said),
    )


def code_of(error: BaseException) -> int | None:
    """The server's (or the driver's) error number of `error`, or None."""
    args = getattr(error, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def refused(error: BaseException) -> bool:
    """Whether `error` is the server (or the driver) refusing the statement itself, so that the
    same call would be refused again: it is raised as it is, the driver's error, and is not tried
    again (an end the database refuses is left to its row's lease). Among them:

    - 1142 ER_TABLEACCESS_DENIED_ERROR, 1143 ER_COLUMNACCESS_DENIED_ERROR: the user lacks a
      privilege on the table or a column (INSERT, UPDATE, DELETE, SELECT);
    - 1227 ER_SPECIFIC_ACCESS_DENIED_ERROR: the user lacks a privilege of the server's;
    - 1290 ER_OPTION_PREVENTS_STATEMENT: an option forbids the write (`read_only`);
    - 1792 ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION: the session's transactions are read only;
    - 1836 ER_READ_ONLY_MODE: the server runs read only (MySQL's `innodb_read_only`);
    - 1644 ER_SIGNAL_EXCEPTION: a trigger (or a routine) refused the row with `SIGNAL`;
    - 4025 ER_CONSTRAINT_FAILED: a CHECK constraint refused the row;
    - 1062 ER_DUP_ENTRY and the other integrity, data and syntax errors;
    - the driver's own refusals of a call, which carry no number (a closed cursor).

    Not refused, and so `StoreUnavailable`: the driver's numbers (`DRIVER`), its errors without
    a number other than those (a packet out of sequence), and the server's `GONE`, `BUSY` and
    `SAID`: the server out of reach, or short of something for now."""
    code = code_of(error)
    if code is None:
        return isinstance(error, ProgrammingError | NotSupportedError)
    return code >= 1000 and code not in DRIVER and code not in GONE | BUSY | SAID


def is_dup(error: BaseException) -> bool:
    """Whether `error` is a unique key another row holds (which undoes its statement alone)."""
    return isinstance(error, IntegrityError) and code_of(error) == DUP_ENTRY


class Pool:
    """The idle connections of one event loop, and a bound on how many are open at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_size: int) -> None:
        self.loop = loop
        self.idle: list[Connection] = []
        self.slots = asyncio.Semaphore(max_size)
        self.closed = False

    def close_idle(self) -> None:
        """Close the idle connections (on this pool's loop, or from a thread where the loop is
        not running: then by the loop's thread when it runs again, or never, once it is
        closed)."""
        idle, self.idle = self.idle, []
        for conn in idle:
            _shut(conn)


class Connections:
    """The connections of one MariaDB/MySQL store.

    Args:
        server: where the URL leads.
        max_size: the most connections open at once, per event loop.
        target: the URL `nilo-job migrate` is given for this database, for sentences.
        answer_ms: how long the server has to answer one call, in milliseconds.
    """

    def __init__(self, server: Server, max_size: int, target: str, answer_ms: int) -> None:
        self.server = server
        self.max_size = max_size
        self.target = target
        self.answer_ms = answer_ms
        self.bound_s = answer_ms / 1_000
        self.pid = os.getpid()
        self.pools: dict[asyncio.AbstractEventLoop, Pool] = {}
        self.lock = threading.Lock()
        self.version: str | None = None
        """The server's version string, once a connection has opened ("10.11.6-MariaDB")."""

    @property
    def where(self) -> str:
        return self.server.where

    @property
    def bound_ms(self) -> int:
        """The longest one call waits for the server's answers, in milliseconds: `answer_ms` for
        each of the `TRIES` tries a deadlock allows, and the pauses between them. (Taking a
        connection for a try is bounded apart, by the URL's `connect_timeout`.)"""
        pauses_ms = sum(PAUSE_MS * tried for tried in range(1, TRIES))
        return TRIES * self.answer_ms + pauses_ms

    @property
    def mariadb(self) -> bool:
        """Whether the server is MariaDB (as its version says; by the URL until one opened)."""
        if self.version is None:
            return self.server.flavor == "MariaDB"
        return "mariadb" in self.version.lower()

    def _forked(self) -> None:
        """In a forked child, forget the parent's connections (under `lock`): the child's
        copies of their sockets are closed, which leaves the parent's open."""
        if self.pid != os.getpid():
            for inherited in self.pools.values():
                for conn in inherited.idle:
                    _shut(conn, inherited=True)
            self.pid, self.pools = os.getpid(), {}

    def _pool(self) -> Pool:
        loop = asyncio.get_running_loop()
        with self.lock:
            self._forked()
            pool = self.pools.get(loop)
            if pool is None:
                for other in [known for known in self.pools if known.is_closed()]:
                    self.pools.pop(other).close_idle()  # their loop is gone
                pool = self.pools[loop] = Pool(loop, self.max_size)
            return pool

    def unavailable(self, error: BaseException, what: str = "a call") -> StoreUnavailable:
        """`error` (the driver's, or the network's) as a sentence that names the server."""
        flavor, at = self.server.flavor, self.where
        said = scrubbed(str(error.args[1] if len(error.args) > 1 else error), self.target)
        code = code_of(error)
        if code == CONN_HOST_ERROR and self.server.unix_socket is not None:
            # The driver names the host, which a socket does not use: name the socket instead.
            said = said.replace(f"on {self.server.host!r}", f"on {self.server.unix_socket!r}", 1)
        if self.server.tls is not None and what == "a connection":
            why = failed_sentence(said, self.server.tls)
            if why is not None:
                return StoreUnavailable(f"cannot reach {flavor} at {at} over TLS: {why}")
        if code in LOGIN:
            return StoreUnavailable(
                f"{flavor} at {at} refused the login of user {self.server.user!r}: check the "
                f"user, its password and its grants ({said})"
            )
        if code == NO_DATABASE:
            return StoreUnavailable(
                f"{flavor} at {self.server.place} has no database "
                f"{self.server.database!r}: create it (CREATE DATABASE "
                f"{self.server.database}), then `nilo-job migrate {self.target}`"
            )
        if code == NO_TABLE:
            return _schema.no_such_table(f"{flavor} at {at}", self.target, missing_table(said))
        if isinstance(error, OSError | TimeoutError) or code in DRIVER or code == 0:
            return StoreUnavailable(f"cannot reach {flavor} at {at}: {said}")
        return StoreUnavailable(f"{flavor} at {at} failed {what}: {said}")

    async def connect(self) -> Connection:
        """A new connection in autocommit, its session set, within the connect timeout.

        Raises:
            StoreUnavailable: the server cannot be reached in time, or refused the login.
        """
        server = self.server
        try:
            async with asyncio.timeout(server.connect_timeout + 1):
                conn: Connection = await asyncmy.connect(
                    host=server.host, port=server.port, user=server.user,
                    password=server.password, database=server.database,
                    unix_socket=server.unix_socket, charset="utf8mb4", autocommit=True,
                    client_flag=CLIENT.FOUND_ROWS, connect_timeout=server.connect_timeout,
                    max_allowed_packet=1 << 30,
                    ssl=None if server.tls is None else server.tls.context,
                )  # fmt: skip
                try:
                    async with conn.cursor() as cur:
                        await cur.execute(SQL["session"], ())
                        await cur.execute(SQL["isolation"], ())
                        await cur.execute(SQL["lock_wait"], (math.ceil(self.bound_s),))
                except BaseException:
                    _shut(conn)
                    raise
        except TimeoutError as error:
            raise StoreUnavailable(
                f"cannot reach {server.flavor} at {self.where}: no answer within "
                f"{server.connect_timeout:g} s"
            ) from error
        except (MySQLError, OSError) as error:
            raise self.unavailable(error, "a connection") from error
        self.version = conn.get_server_info()
        return conn

    async def _take(self, pool: Pool) -> Connection:
        """A connection of `pool`'s (idle, or new), its slot taken.

        Raises:
            StoreUnavailable: no slot came free within the connect timeout, or no connection
                could be opened.
        """
        try:
            if pool.slots.locked():  # (a free slot is taken at once)
                async with asyncio.timeout(self.server.connect_timeout):
                    await pool.slots.acquire()
            else:
                await pool.slots.acquire()
        except TimeoutError:
            raise StoreUnavailable(
                f"{self.server.flavor} at {self.where}: no connection of the store's "
                f"{self.max_size} came free within {self.server.connect_timeout:g} s"
            ) from None
        try:
            while pool.idle:
                conn = pool.idle.pop()
                if not conn.connected:
                    _shut(conn)
                    continue
                # (asyncmy stamps its last use with the event loop's clock)
                if asyncio.get_running_loop().time() - conn.last_usage > IDLE_S:
                    try:
                        async with asyncio.timeout(min(self.bound_s, 5.0)):
                            await conn.ping(reconnect=False)
                    except (MySQLError, OSError, TimeoutError):
                        _shut(conn)
                        continue
                return conn
            return await self.connect()
        except BaseException:
            pool.slots.release()
            raise

    @staticmethod
    def _give(pool: Pool, conn: Connection, healthy: bool) -> None:
        pool.slots.release()
        if healthy and conn.connected and not pool.closed and len(pool.idle) < 64:
            pool.idle.append(conn)
        else:
            _shut(conn)

    async def run(
        self,
        fn: Callable[[Cursor], Awaitable[T]],
        what: str,
        *,
        transaction: bool = False,
        bounded: bool = True,
    ) -> T:
        """`fn(cursor)`, the call `what` (for sentences: "a claim"), on a connection of the pool,
        in one transaction when `transaction` (else each statement commits on its own), within
        `answer_ms` (unless not `bounded`: a migration, which may wait for other sessions'
        locks). A deadlock is tried again, twice, each try within `answer_ms` (`bound_ms`).

        Raises:
            StoreUnavailable: the server cannot be reached, did not answer within the bound, met
                a deadlock three times, is short of something for now, or lacks the table.
            MySQLError: the server refused the statement outright (`refused`): the driver's
                error, as the server said it.
        """
        for tried in range(1, TRIES + 1):
            try:
                return await self._run_once(fn, what, transaction, bounded)
            except MySQLError as error:
                if code_of(error) == DEADLOCK and tried < TRIES:
                    await asyncio.sleep(PAUSE_MS * tried / 1_000)
                    continue
                if refused(error):
                    raise  # trying it again would meet the same answer
                raise self.unavailable(error, what) from error
            except OSError as error:
                raise self.unavailable(error, what) from error
        raise AssertionError("unreachable")  # pragma: no cover

    async def _run_once(
        self, fn: Callable[[Cursor], Awaitable[T]], what: str, transaction: bool, bounded: bool
    ) -> T:
        pool = self._pool()
        conn = await self._take(pool)
        healthy = False
        deadline = None
        try:
            if bounded:
                deadline = deadlines.start(self.bound_s)
            async with conn.cursor() as cur:
                if not transaction:
                    found = await fn(cur)
                else:
                    await conn.begin()
                    try:
                        found = await fn(cur)
                        await conn.commit()
                    except MySQLError as error:
                        if not _lost(error):
                            await conn.rollback()
                        raise
            healthy = True
            return found
        except asyncio.CancelledError:
            expired, deadline = deadline is not None and deadline.end(), None
            if expired:
                raise StoreUnavailable(
                    f"{self.server.flavor} at {self.where} did not answer {what} within "
                    f"{self.bound_s:g} s; its connection was closed"
                ) from None
            raise
        except MySQLError as error:
            # A statement the server refused leaves its connection as it was. A connection lost
            # (a restart, a KILL, a network cut) has likely taken the idle ones with it: they
            # are replaced, so that the next calls do not find that out one by one.
            healthy = not _lost(error) and conn.connected
            if not healthy:
                pool.close_idle()
            raise
        except OSError:
            pool.close_idle()
            raise
        finally:
            if deadline is not None:
                deadline.end()
            self._give(pool, conn, healthy)

    async def close(self) -> None:
        """Close every idle connection (those in use close as their call ends)."""
        with self.lock:
            self._forked()
            pools, self.pools = list(self.pools.values()), {}
        for pool in pools:
            pool.closed = True
            if (
                pool.loop.is_closed()
                or pool.loop is asyncio.get_running_loop()
                or not pool.loop.is_running()
            ):
                pool.close_idle()
            else:
                pool.loop.call_soon_threadsafe(pool.close_idle)


def _lost(error: MySQLError) -> bool:
    """Whether `error` says the connection itself is gone or out of step (the driver's own
    errors, and the server's that say it ended the session: `GONE`), rather than a statement
    the server answered."""
    code = code_of(error)
    return code is None or code < 1000 or code in DRIVER or code in GONE


def _shut(conn: Connection, *, inherited: bool = False) -> None:
    """Close `conn`'s socket, without a word to the server (which ends the session when it sees
    the socket close). A connection whose event loop is closed (an `asyncio.run` that ended)
    cannot close its transport through that loop, and one a forked child `inherited` must not
    touch its parent's loop: its socket is closed directly (in a child, its copy of it alone)."""
    loop = getattr(conn, "loop", None)
    if inherited or (isinstance(loop, asyncio.AbstractEventLoop) and loop.is_closed()):
        transport = getattr(conn, "_transport", None)
        sock = getattr(transport, "_sock", None)
        if sock is not None:
            with contextlib.suppress(Exception):
                sock.close()
                transport._sock = None  # type: ignore[union-attr]  # (no "unclosed" warning)
        return
    with contextlib.suppress(Exception):
        conn.close()
