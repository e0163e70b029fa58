"""PostgreSQL connections: the store's pools, the connections it keeps beside them, and forks.

`Connections` is where every statement of the PostgreSQL store finds its connection. A store
opened from a URL has

- the ordinary pool, for pushes, cancels, retries of dead rows and reads; they commit durably;
- the workers' pool, for claims and ends, whose sessions commit with `synchronous_commit = off`
  (losing one of those to a server crash can only make a row run again, which at-least-once
  allows) and turn bitmap scans off (a claim walks `nilo_jobs_due` in order and stops after
  `limit` rows; on a table not yet analysed the planner may otherwise fetch every due row and
  sort them, once per claim);
- three connections kept beside the pools (`Kept`): for one-row pushes, for serve's claims and
  for serve's groups of ends, calls that come one at a time and then skip the pool's checkout
  and return;
- while serve runs, one connection that listens for other processes' pushes (`listen`).

A store over an application's own pool checks every statement's connection out of that pool and
gives it back after the statement (claims and ends then commit durably, since a session setting
would outlive the checkout), so a pool of any size serves: nothing holds one of its connections
between calls. Serve's listener, which holds its connection for as long as serve runs, opens one
of its own with the pool's connection string and arguments (`listening`). After a fork, the
parent's pools and connections are replaced before anything reads them.

Behind a pooler in transaction mode (`pooler=True`, see `pooler`) nothing relies on a
session: no statement is prepared on the server, the workers' settings are taken by each claim's
and end's transaction, and LISTEN goes to the direct `listen_url`, or nowhere (the poll finds
every row). A store told neither way looks for one as it opens (one told `pooler=False` does
not), and at the first error only a pooler makes, and then does the same (`found_pooler`).

Every wait on the server is bounded (`bounds`): a call not answered within `answer_ms` has its
connection shut and raises `StoreUnavailable`, and the store's idle connections are replaced
then (`replace`), as after any lost connection, since what silenced or broke one has likely done
the same to them all. A server that cannot be reached within the connect timeout, and the
driver's errors that mean the table is missing or older than this version, are
`StoreUnavailable` with a sentence naming the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import getpass
import logging
import math
import os
import re
import shlex
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal, TypeVar

import psycopg
from psycopg import errors, pq
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ..._base.errors import StoreUnavailable
from .. import _schema
from .._target import scrubbed, shown
from .bounds import ANSWER_MS, ROWS_PER_BOUND, Deadline, bound_s, lost, shut, with_timeout
from .pooler import (
    WORK_LOCAL,
    collided,
    found_sentence,
    misfit,
    preparing_nothing,
    through_pooler,
    with_work_settings,
)

log = logging.getLogger("nilo_job")

DOWN = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)
"""The driver's exceptions that mean the server cannot be reached (or the pool gave up)."""

CLOSE_S = 1.0
"""How long closing one of the store's pools waits for its workers, which may be opening a
connection to a server that does not answer (psycopg_pool then says it gave up on them)."""

REPLACE_EVERY_S = 1.0
"""The store's idle connections are replaced at most once in this many seconds."""

WORK_SESSION = (
    "SELECT set_config('synchronous_commit', 'off', false), "
    "set_config('enable_bitmapscan', 'off', false), set_config('enable_seqscan', 'off', false)"
)
"""The workers' settings, taken by each of the workers' connections as it opens (a statement
rather than the `options` startup parameter, which would replace the URL's own `options` and
which PgBouncer refuses); behind a pooler in transaction mode, each transaction takes them for
itself instead (`pooler.WORK_LOCAL`)."""

_UNDEFINED = re.compile(r'"(?:[^"]*\.)?([^".]+)" does not exist')


def missing_table(error: errors.UndefinedTable) -> str | None:
    """The table PostgreSQL said is missing (`relation "nilo_jobs_done" does not exist`), or
    None when its words do not say (a server speaking another language)."""
    found = _UNDEFINED.search(error.diag.message_primary or str(error))
    return None if found is None else found[1]


Use = Literal["push", "claim", "end"]
"""What a kept connection is for: one-row pushes, serve's claims, serve's groups of ends."""
USES: tuple[Use, ...] = ("push", "claim", "end")

T = TypeVar("T")

Statement = Callable[[psycopg.AsyncCursor[Any]], Awaitable[T]]
"""One statement that commits on its own, run on a cursor: a kept connection's own cursor, made
once and used again."""


def _words(error: BaseException) -> str:
    """The server's words in `error`, without its CONTEXT and DETAIL lines."""
    return str(error).strip().partition("\n")[0]


def where(conninfo: str) -> str:
    """`host:port/dbname` of a connection string, for sentences: never its password (see
    `_target.shown`)."""
    return shown(conninfo, place=True)


class Connections:
    """The connections of one PostgreSQL store.

    Args:
        conninfo: the connection string.
        pool: the application's own pool, or None for pools of the store's own.
        max_size: the most connections the store's own ordinary pool opens.
        target: the URL `nilo-job migrate` is given for this database, for sentences.
        pooler: `conninfo` reaches the server through a pooler in transaction mode (True), or
            not (False: no look at open, as for a pooler in session mode); None: the store
            looks for one as it opens.
        listen_url: where LISTEN connects (a direct URL), or None: `conninfo` itself, or (with
            `pooler`) nowhere.
        answer_ms: how long the server has to answer one call, in milliseconds (`bound_s`).
    """

    def __init__(
        self,
        conninfo: str,
        pool: AsyncConnectionPool[Any] | None,
        max_size: int,
        target: str,
        *,
        pooler: bool | None = None,
        listen_url: str | None = None,
        answer_ms: int = ANSWER_MS,
    ) -> None:
        self.conninfo, self.timeout_s = with_timeout(conninfo, answer_ms)
        self.bound_s = bound_s(answer_ms, conninfo)
        self.answer_s = answer_ms / 1_000
        self.replaced_at = 0.0  # when the idle connections were last replaced (monotonic, s)
        self.replacing: set[asyncio.Task[None]] = set()
        self.where = where(conninfo)
        self.target = target
        self.pool = pool
        self.owns_pool = pool is None
        self.kwargs: dict[str, Any] = {}
        if pool is not None and isinstance(pool.kwargs, dict):
            self.kwargs = {k: v for k, v in pool.kwargs.items() if k != "autocommit"}
        self.max_size = max_size
        self.told = pooler is True  # the store was told of a pooler
        self.pooler = pooler is True  # told, or found (`found_pooler`)
        self.probed = pooler is not None  # looked for a pooler, or need not (told either way)
        self.looking = pooler is None  # told neither way: a pooler may yet be found
        self.listener: psycopg.AsyncConnection[Any] | None = None  # serve's, while it listens
        self.listen_to = None if listen_url is None else with_timeout(listen_url, answer_ms)[0]
        self.work_pool: AsyncConnectionPool[Any] | None = None
        self.loops: dict[int, asyncio.AbstractEventLoop] = {}  # id(own pool) -> its loop
        self.opening: asyncio.Lock | None = None
        self.kept = self._new_kept()
        self.pid = os.getpid()

    def options(self) -> dict[str, Any]:
        """The arguments of a new connection of the store's own: behind a pooler, that it
        prepares nothing."""
        return {"prepare_threshold": None} if self.pooler else {}

    async def take_work_settings(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Give a new connection of the workers the workers' settings for its session
        (`WORK_SESSION`); nothing behind a pooler, whose sessions are lent to others.

        Raises:
            psycopg.Error: the server did not answer.
        """
        if not self.pooler:
            await conn.execute(WORK_SESSION, prepare=False)

    def listening_where(self) -> str | None:
        """`host:port/dbname` where serve listens for other processes' pushes; None: nowhere
        (behind a pooler, without a `listen_url`)."""
        if self.listen_to is None and self.pooler:
            return None
        return where(self.listen_to or self.conninfo)

    def found_pooler(self, how: str) -> None:
        """A pooler is in between, which the store was not told of, found by `how` (for the
        log): from now on, as if told (`pooler`), said in one WARNING. serve's listener, if it
        listens through the pooler, stops (its connection is shut: `listen` then sees why).
        Calls already under way finish as they began."""
        if self.pooler:
            return
        self.pooler = True
        listens_direct = self.listen_to is not None
        log.warning(
            found_sentence(self.where, how, pool=not self.owns_pool, listen_url=listens_direct)
        )
        if self.listener is not None and not listens_direct:
            shut(self.listener)

    def collided(self, error: BaseException) -> bool:
        """Whether `error` is one only a pooler makes (`pooler.collided`); if so, the store
        carries on as behind one (`found_pooler`)."""
        if not collided(error):
            return False
        self.found_pooler(_words(error))
        return True

    def unsure(self, error: BaseException) -> bool:
        """Whether `error` may have come from a pooler the store has not found yet
        (`pooler.misfit`): the caller then makes the call again preparing nothing, and tells
        `found_pooler` should it run."""
        return self.looking and not self.pooler and misfit(error)

    async def _probe(self, conn: psycopg.AsyncConnection[Any], on: str) -> None:
        """Look for a pooler on `conn`, once per store (`through_pooler`).

        Raises:
            psycopg.Error: the server did not answer.
        """
        with self.deadline(conn, "the check for a pooler", on):
            behind = await through_pooler(conn)
        self.probed = True
        if behind:
            self.found_pooler(
                "the server process id a connection is given at its start is not the one that "
                "runs its statements"
            )

    def unavailable(self, error: Exception, conninfo: str | None = None) -> StoreUnavailable:
        """`error` from the driver, met on the store's server (or on `conninfo`'s), as the
        store's error, with a sentence that holds none of the connection string's secrets."""
        target = self.conninfo if conninfo is None else conninfo
        at = self.where if conninfo is None else where(conninfo)
        if isinstance(error, errors.UndefinedTable):  # the table it named
            return _schema.no_such_table(at, self.target, missing_table(error))
        if isinstance(error, errors.UndefinedColumn):
            return _schema.older(at, self.target, "1 or another older one")
        if isinstance(error, PoolTimeout):
            return StoreUnavailable(
                f"PostgreSQL at {at}: no connection could be had within "
                f"{self.timeout_s:g} s ({scrubbed(str(error), target)})"
            )
        refused = login_refused(error, target, at)
        if refused is not None:
            return refused
        return StoreUnavailable(f"cannot reach PostgreSQL at {at}: {scrubbed(str(error), target)}")

    async def connect(
        self, conninfo: str | None = None, **options: Any
    ) -> psycopg.AsyncConnection[Any]:
        """A new connection in autocommit to `conninfo` (default: the store's), within the
        connect timeout.

        Raises:
            StoreUnavailable: the server cannot be reached in time, or refused the login.
        """
        at = self.where if conninfo is None else where(conninfo)
        try:
            async with asyncio.timeout(self.timeout_s + 1):
                return await psycopg.AsyncConnection.connect(
                    conninfo or self.conninfo, autocommit=True, **options
                )
        except TimeoutError as error:
            raise StoreUnavailable(
                f"cannot reach PostgreSQL at {at}: no answer within {self.timeout_s:g} s"
            ) from error
        except DOWN as error:
            raise self.unavailable(error, conninfo) from error

    async def get_pool(self, *, work: bool = False) -> AsyncConnectionPool[Any]:
        """The ordinary pool, or (`work`) the workers' own (the application's pool, when the
        store was given one); opened on first use.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        if self.pid != os.getpid():
            # A forked child: the parent's pools and their connections are not ours.
            self.pid, self.work_pool, self.opening, self.loops = os.getpid(), None, None, {}
            self.kept = self._new_kept()
            if self.owns_pool:
                self.pool = None
        work = work and self.owns_pool
        current = self.work_pool if work else self.pool
        if current is not None and not current.closed and self.probed:
            return current
        if self.opening is None:
            self.opening = asyncio.Lock()
        async with self.opening:
            if not self.owns_pool and self.pool is not None and not self.probed:
                await self._probe_pool(self.pool)
            if work and (self.work_pool is None or self.work_pool.closed):
                self.work_pool = await self._open_pool("nilo-job-work", 4, work=True)
            if not work and (self.pool is None or self.pool.closed):
                self.pool = await self._open_pool("nilo-job", self.max_size, work=False)
                self.owns_pool = True
        pool = self.work_pool if work else self.pool
        assert pool is not None
        return pool

    async def _probe_pool(self, pool: AsyncConnectionPool[Any]) -> None:
        """Look for a pooler on a connection of the application's `pool`.

        Raises:
            StoreUnavailable: the server cannot be reached, or did not answer.
        """
        try:
            async with pool.connection(timeout=self.timeout_s) as conn:
                await self._probe(conn, "a connection of the application's pool")
        except DOWN as error:
            raise self.unavailable(error) from error

    async def _open_pool(self, name: str, max_size: int, *, work: bool) -> AsyncConnectionPool[Any]:
        # One plain connection first: a server that is down or a wrong password is said at
        # once, in the driver's words, instead of after the pool's timeout. The store looks
        # for a pooler on it, before any connection is given the workers' settings (which a
        # pooler refuses at connect).
        probe = await self.connect(**self.options())
        try:
            if not self.probed:
                await self._probe(probe, "the store's first connection")
        except DOWN as error:
            raise self.unavailable(error) from error
        finally:
            await probe.close()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.conninfo,
            min_size=1,
            max_size=max_size,
            kwargs={**self.kwargs, "autocommit": True, **self.options()},
            configure=self.take_work_settings if work else None,
            open=False,
            name=name,
            timeout=self.timeout_s,
        )
        try:
            await pool.open(wait=True, timeout=self.timeout_s)
        except DOWN as error:
            await pool.close()
            raise self.unavailable(error) from error
        self.loops[id(pool)] = asyncio.get_running_loop()
        return pool

    def deadline(
        self,
        conn: psycopg.AsyncConnection[Any],
        what: str,
        on: str,
        *,
        rows: int = 1,
        bounded: bool = True,
    ) -> Deadline:
        """The bound of one call of `what` on `conn` (`on` says which connection that is), for
        `rows` rows (the bound once per `ROWS_PER_BOUND`); none unless `bounded`."""
        seconds = self.bound_s if bounded else None
        if seconds is not None and rows > ROWS_PER_BOUND:
            seconds *= math.ceil(rows / ROWS_PER_BOUND)
        return Deadline(conn, what, on, seconds, self.where, self.replace_soon)

    async def run(
        self,
        fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]],
        what: str,
        *,
        work: bool = False,
        transaction: bool = True,
        rows: int = 1,
        bounded: bool = True,
        prepare: bool = True,
    ) -> T:
        """`fn(conn)`, the call `what` (for sentences: "a claim"), on a pooled connection, in
        one transaction unless `transaction` is False (a single statement commits on its own,
        saving two round trips), within the store's bound for `rows` rows (none unless
        `bounded`: a migration, which may wait for the application's locks), preparing nothing
        unless `prepare`. A call that met an error only a pooler makes (`collided`), or one of
        its data while a pooler may yet be found (`unsure`), is made again once, preparing
        nothing: a failed statement, or transaction, changed nothing.

        Raises:
            StoreUnavailable: the server cannot be reached, did not answer within the bound,
                or the table is missing or older.
        """
        once = functools.partial(self._run_once, fn, what, work, transaction, rows, bounded)
        try:
            if not prepare:
                return await once(prepare=False)
            try:
                return await once(prepare=True)
            except psycopg.Error as error:
                if self.collided(error):
                    return await once(prepare=False)
                if not self.unsure(error):
                    raise
                answer = await once(prepare=False)
                self.found_pooler(_words(error))
                return answer
        except (*DOWN, errors.UndefinedTable, errors.UndefinedColumn) as error:
            if lost(error):
                await self.replace()  # the server went away (a restart): the others are gone
            raise self.unavailable(error) from error

    async def _run_once(
        self,
        fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]],
        what: str,
        work: bool,
        transaction: bool,
        rows: int,
        bounded: bool,
        *,
        prepare: bool,
    ) -> T:
        """`run`'s call, once; the driver's errors as they come."""
        pool = await self.get_pool(work=work)
        local = work and self.pooler and self.owns_pool  # the workers' settings, per transaction
        on = (
            "a connection of the application's pool" if not self.owns_pool
            else "a connection of the workers' pool" if work
            else "a connection of the pool"
        )  # fmt: skip
        async with pool.connection(timeout=self.timeout_s) as conn:
            with (
                self.deadline(conn, what, on, rows=rows, bounded=bounded),
                preparing_nothing(conn) if self.pooler or not prepare else contextlib.nullcontext(),
            ):
                if not (transaction or local):
                    return await fn(conn)
                async with conn.transaction():
                    if local:
                        await conn.execute(WORK_LOCAL)
                    return await fn(conn)

    async def replace(self) -> None:
        """Replace the store's idle connections, kept and pooled (an application's pool is the
        application's): after one was found dead or silent, the others likely are too, and
        the next calls then get fresh ones instead of finding out one connection at a time.
        At most once every `REPLACE_EVERY_S`."""
        if time.monotonic() - self.replaced_at < REPLACE_EVERY_S or self.pid != os.getpid():
            return
        self.replaced_at = time.monotonic()
        for kept in self.kept.values():
            kept.drop_if_idle()
        for pool in (self.pool if self.owns_pool else None, self.work_pool):
            if pool is not None and not pool.closed:
                with contextlib.suppress(Exception):
                    await pool.drain()

    def replace_soon(self) -> None:
        """`replace()` in a task of its own (from a callback of the event loop)."""
        task = asyncio.get_running_loop().create_task(self.replace())
        self.replacing.add(task)
        task.add_done_callback(self.replacing.discard)

    def _new_kept(self) -> dict[Use, Kept]:
        return {use: Kept(self, use) for use in USES}

    async def kept_run(self, fn: Statement[T], use: Use, what: str, *, rows: int = 1) -> T:
        """`fn(cursor)`, one statement that commits on its own, on the connection kept for
        `use` (one-row pushes; serve's claims; serve's groups of ends, in the workers' session)
        and its cursor, when that is free, else on a new cursor of a pooled connection; the call
        `what` for `rows` rows, within the store's bound (see `run`). A store over an
        application's pool keeps no connection of its own: it opens nothing behind it. A call
        that met an error only a pooler makes, or one of its data while a pooler may yet be
        found, is made again once on a pooled connection, preparing nothing (see `run`).

        Raises:
            StoreUnavailable: the server cannot be reached, did not answer within the bound,
                or the table is missing or older.
        """
        work = use != "push"
        kept = self.kept[use]
        if (
            kept.conn is None or self.pid != os.getpid()
        ):  # (an open one came here on its first call)
            # An unreachable server is said in a sentence here; after a fork, the parent's
            # pools and kept connections are replaced before either is read below.
            await self.get_pool(work=work)
            kept = self.kept[use]
        if self.owns_pool:
            try:
                answer = await kept.run(
                    with_work_settings(fn) if work and self.pooler else fn, what, rows
                )
            except psycopg.Error as error:
                if self.collided(error):
                    answer = BUSY  # made again below, on a pooled connection
                elif self.unsure(error):
                    answer = await self.run(
                        lambda conn: fn(conn.cursor()),
                        what,
                        work=work,
                        transaction=False,
                        rows=rows,
                        prepare=False,
                    )
                    self.found_pooler(_words(error))
                    return answer
                else:
                    raise
            if not isinstance(answer, Busy):
                return answer
        return await self.run(
            lambda conn: fn(conn.cursor()), what, work=work, transaction=False, rows=rows
        )

    @contextlib.asynccontextmanager
    async def listening(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of its own in autocommit for LISTEN, for as long as the block lasts: to
        `listen_url` when given, else to the store's server (over an application's pool, with
        the pool's connection string and arguments: a connection held for as long as serve
        runs is never one of the pool's, which a pool of any size can then spare). Known as
        `listener` meanwhile.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        async with self.own() as conn:
            self.listener = conn
            try:
                yield conn
            finally:
                self.listener = None

    @contextlib.asynccontextmanager
    async def own(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of its own in autocommit, for as long as the block lasts: to
        `listen_url` when given, else to the store's server (over an application's pool, with
        the pool's connection string and arguments), never one of a pool's.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        if self.listen_to is not None:
            conn = await self.connect(self.listen_to)
        else:
            conn = await self.connect(**self.kwargs)
        try:
            yield conn
        finally:
            await conn.close()

    async def close(self) -> None:
        """Close what the store opened; an application's pool stays open."""
        await cancel_all(self.replacing)
        for kept in self.kept.values():
            await kept.close()
        pools = [self.work_pool]
        self.work_pool = None
        if self.owns_pool:
            pools.append(self.pool)
            self.pool = None
        await asyncio.gather(*(self._close_pool(pool) for pool in pools if pool is not None))

    async def _close_pool(self, pool: AsyncConnectionPool[Any]) -> None:
        """Close one of the store's own pools, also once the loop that opened it is closed
        (a pre-forking parent): `pool.close()` then fails waiting for its workers, tasks of
        that loop (RuntimeError on Python 3.11, CancelledError on 3.12+), before it closes the
        idle connections; those are closed here, so `close()` answers alike on every version."""
        opened_on = self.loops.pop(id(pool), None)
        if opened_on is None or not opened_on.is_closed():
            await pool.close(timeout=CLOSE_S)
            return
        idle = list(getattr(pool, "_pool", ()))  # what close() would have closed
        try:
            await pool.close(timeout=CLOSE_S)
        except (RuntimeError, asyncio.CancelledError):
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this close() itself is being cancelled
        for conn in idle:
            await conn.close()


REFUSED = {
    "database": re.compile(r'database "(?P<name>[^"]*)" does not exist'),
    "role": re.compile(r'role "(?P<name>[^"]*)" does not exist'),
    "password": re.compile(
        r'(?:password|SASL) authentication failed(?: for user "(?P<name>[^"]*)")?'
    ),
    "address": re.compile(r"no pg_hba\.conf entry for .*"),
}
"""What a server says when it refuses a login, in its own words (a failed connection carries
no SQLSTATE in psycopg, only the server's message): 3D000 invalid_catalog_name, 28000
invalid_authorization_specification (no such role; no pg_hba.conf line), 28P01
invalid_password (also PgBouncer's words for a wrong password)."""

STATES = {"3D000": "database", "28P01": "password"}


def login_refused(error: BaseException, conninfo: str, at: str) -> StoreUnavailable | None:
    """The sentence for a server that answered and refused to let `conninfo` in, at `at`
    (`host:port/dbname`): its database or role does not exist, its password is wrong, or no
    pg_hba.conf line lets it in; it names the database or the role (never the password) and
    says what to do. None for any other error.
    """
    text = str(error)
    try:
        read = conninfo_to_dict(conninfo)
    except psycopg.Error:
        read = {}
    user = str(read.get("user") or os.environ.get("PGUSER") or _os_user())
    dbname = str(read.get("dbname") or os.environ.get("PGDATABASE") or user)
    found = {why: pattern.search(text) for why, pattern in REFUSED.items()}
    why = STATES.get(getattr(error, "sqlstate", None) or "") or next(
        (why for why, match in found.items() if match is not None), None
    )
    match = found.get(why or "")
    name = match.groupdict().get("name") if match is not None else None
    if why == "database":
        name = name or dbname
        said = (
            f'PostgreSQL at {at} has no database "{name}": create it (CREATE DATABASE '
            f"{_ident(name)}, or `createdb {shlex.quote(name)}` on that server), or name one "
            "that exists in the URL"
        )
    elif why == "role":
        name = name or user
        said = (
            f'PostgreSQL at {at} has no role "{name}": create it (CREATE ROLE {_ident(name)} '
            f"LOGIN PASSWORD '…', or `createuser --pwprompt {shlex.quote(name)}` on that "
            "server), or name a role that exists in the URL"
        )
    elif why == "password":
        name = name or user
        said = (
            f'PostgreSQL at {at} refused the password of role "{name}": check the password '
            "given in the URL (or PGPASSWORD, or ~/.pgpass), or set the role's with ALTER ROLE "
            f"{_ident(name)} PASSWORD '…'"
        )
    elif why == "address" and match is not None:
        said = (
            f'PostgreSQL at {at} lets role "{user}" in to database "{dbname}" from no address '
            f"of this host ({match.group(0).strip()}): add a line for it to pg_hba.conf and "
            "reload the server (SELECT pg_reload_conf()), or connect from a host it lets in"
        )
    else:
        return None
    return StoreUnavailable(scrubbed(said, conninfo))


def _os_user() -> str:
    """The name of this process's user, which libpq takes for a role not given."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "?"


def _ident(name: str) -> str:
    """`name` as an SQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


class Busy:
    """The answer of `Kept.run` when its connection is in use (`BUSY`, the one instance)."""


BUSY = Busy()


class Kept:
    """A connection a store keeps beside its pools for calls that come one at a time (a single
    producer's pushes, serve's claims, serve's groups of ends), which then skip the pool's
    checkout and return.

    It is opened at the first call, with one cursor that every call uses, and serves one call
    at a time, on the event loop that opened it (or on another once that loop is closed); `run`
    says when it was not free, and the caller goes through its pool. If it breaks, or a call on
    it is cut off mid-statement, it is closed and the next call opens a fresh one. `close()`
    closes it, or leaves that to the call using it at that moment.
    """

    def __init__(self, connections: Connections, use: Use) -> None:
        self.connections = connections
        self.on = f"the connection kept for {_PURPOSE[use]}"
        self.work = use != "push"  # with the workers' settings
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.cur: psycopg.AsyncCursor[Any] | None = None  # the connection's one cursor
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock = threading.Lock()  # taken without waiting: one call at a time
        self.closing = False  # close() came while a call held the lock: that call closes it

    async def run(self, fn: Statement[T], what: str, rows: int = 1) -> T | Busy:
        """`fn(cursor)`, the call `what` over `rows` rows, on the kept connection's cursor
        within the store's bound, or `BUSY` when it is not free.

        Raises:
            StoreUnavailable: the connection could not be opened, broke, or did not answer
                within the bound.
        """
        loop = asyncio.get_running_loop()
        if not self.lock.acquire(blocking=False):
            return BUSY
        try:
            owner = self.loop
            if owner is not None and owner is not loop and not owner.is_closed():
                return BUSY
            conn, cur = self.conn, self.cur
            fresh = conn is None or cur is None or conn.closed
            if fresh:
                conn = await self.connections.connect(**self.connections.options())
                cur = conn.cursor()
                self.conn, self.cur = conn, cur
            assert conn is not None
            assert cur is not None
            self.loop = loop
            if self.connections.pooler:
                conn.prepare_threshold = None  # (opened before a pooler was found)
            try:
                with self.connections.deadline(conn, what, self.on, rows=rows):
                    if fresh and self.work:
                        await self.connections.take_work_settings(conn)
                    return await fn(cur)
            except BaseException as error:
                if conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    # Broken, or cut off mid-statement: the next call opens a fresh one.
                    self.conn, self.cur, self.loop = None, None, None
                    await conn.close()
                if collided(error):
                    raise  # the server is fine: the caller makes the call again, unprepared
                if lost(error):
                    await self.connections.replace()  # the server went away: the others too
                if isinstance(error, (*DOWN, errors.UndefinedTable, errors.UndefinedColumn)):
                    raise self.connections.unavailable(error) from error
                raise
            finally:
                if self.closing:  # close() came while this call held it (or was opening it)
                    self.conn, self.cur, self.loop, self.closing = None, None, None, False
                    await conn.close()
        finally:
            self.closing = False  # (a close() while the connection failed to open: nothing left)
            self.lock.release()

    def drop_if_idle(self) -> None:
        """Close the connection now, unless a call is using it (that call finds out itself)."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            conn, self.conn, self.cur, self.loop = self.conn, None, None, None
            if conn is not None:
                conn.pgconn.finish()  # closes the socket; no answer is awaited
        finally:
            self.lock.release()

    async def close(self) -> None:
        if not self.lock.acquire(blocking=False):
            self.closing = True  # a call is using it (or opening it): that call closes it
            return
        try:
            conn, self.conn, self.cur, self.loop = self.conn, None, None, None
        finally:
            self.lock.release()
        if conn is not None:
            await conn.close()


_PURPOSE: dict[Use, str] = {"push": "pushes", "claim": "claims", "end": "ends"}


async def cancel_all(tasks: set[asyncio.Task[None]]) -> None:
    """Cancel `tasks` and wait for them to end."""
    for task in list(tasks):
        task.cancel()
    if tasks:
        await asyncio.wait(set(tasks))
