"""A pooler between the PostgreSQL store and its server: what `job.Table` is told about it, and
what the store finds out by itself.

Behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`) a client connection
is lent a server connection for one transaction at a time, so the store must rely on no session
(`prepare_threshold=None`: nothing is prepared on the server; the workers' settings, which
PgBouncer refuses as the `options` startup parameter, taken by each claim's and end's own
transaction; LISTEN, which needs a session of its own, on a direct URL or not at all). It is told
so with `job.Table(url, pooler=True, listen_url=direct)`, or the same in the URL itself, for a
deployment that has one setting for the database, e.g.

    postgresql://app@bouncer:6432/app?nilo_pooler=true&nilo_listen_url=postgresql%3A%2F%2Fapp%40db%2Fapp

`nilo_pooler` and `nilo_listen_url` (percent-encoded) are read and taken out of the URL before
libpq sees it (libpq refuses parameters it does not know); every other parameter stays as it is.

A store told neither way (`pooler=None`, the default) finds out (`Connections.found_pooler`),
and from then on does the same, saying so in one WARNING (`found_sentence`):

- when it opens (not when told `pooler=False`, as for a pooler in session mode, which keeps
  sessions): a pooler hands its clients a server process id of its own making (it must, to
  route their cancels), so the id a connection was given at its start is not the
  `pg_backend_pid()` that runs its statements (`through_pooler`);
- at the first error that only a pooler lending sessions to several clients makes, should one
  keep the server's process ids (`collided`): a statement psycopg prepared meeting another
  client's of the same name, or missing from the session it was lent. Those errors come before
  the statement runs, and a failed transaction commits nothing, so the call is made again once;
- at the first call that fails with an error of the data it was given (`misfit`: our values
  bound to another client's statement of the same name, which read them as other types or
  broke a constraint with them) and then runs when made again preparing nothing. A failed
  statement changed nothing, so making it again is safe; one that fails again was refused for
  itself, and is said as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ..._base.errors import Refusal
from .._target import misread, scrubbed, shown

POOLER = "nilo_pooler"
LISTEN_URL = "nilo_listen_url"

COLLIDED = frozenset({"42P05", "26000"})
"""SQLSTATEs of a prepared statement on a session a pooler lends to several clients: `prepared
statement "_pg3_0" already exists` (another client's), `… does not exist` (prepared on another
session)."""

WORK_LOCAL = (
    "SELECT set_config('synchronous_commit', 'off', true), "
    "set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)"
)
"""The workers' settings for one transaction: what their sessions are given at connect when no
pooler is in between (a setting of a session would stay on a server connection the pooler lends
to others)."""


@dataclass(frozen=True)
class Pooler:
    """What the store knows of a pooler: `conninfo` without nilo-job's parameters; `pooler`:
    a pooler in transaction mode is in between (True), is not (False), or the store looks
    (None); `listen_url`: the direct URL LISTEN uses, or None."""

    conninfo: str
    pooler: bool | None
    listen_url: str | None


def read_pooler(url: str, pooler: bool | None, listen_url: str | None) -> Pooler:
    """`url`'s own `nilo_pooler` / `nilo_listen_url`, merged with the keyword arguments: a
    pooler said to be there by either is there; else one said not to be by either is not; else
    None (the store looks).

    Raises:
        Refusal: `pooler` is not a bool or None, or the URL's value not `true` or `false`,
            `listen_url` is given twice and differently, or it is not a URL PostgreSQL reads.
    """
    if pooler is not None and not isinstance(pooler, bool):
        raise Refusal(f"job.Table(..., pooler={pooler!r}): pass True, False or None")
    conninfo, found = _split(url)
    said = found.get(POOLER)
    if said is not None:
        if said.lower() not in ("true", "false"):
            raise Refusal(f"{POOLER}={said!r} in the URL: write {POOLER}=true or {POOLER}=false")
        pooler = bool(pooler) or said.lower() == "true"
    in_url = found.get(LISTEN_URL)
    if in_url is not None and listen_url is not None and in_url != listen_url:
        raise Refusal(
            f"job.Table got two listen URLs, {LISTEN_URL} in the URL and listen_url=: give one"
        )
    listen_url = listen_url if listen_url is not None else in_url
    if listen_url is not None:
        if not isinstance(listen_url, str) or not listen_url.startswith(
            ("postgresql://", "postgres://")
        ):
            said = repr(shown(listen_url)) if isinstance(listen_url, str) else shown(listen_url)
            raise Refusal(
                f"listen_url={said}: pass the direct 'postgresql://user@host/db' of the "
                "server (not the pooler's)"
            )
        if (wrong := misread(listen_url)) is not None:
            raise Refusal(f"listen_url={shown(listen_url)!r} cannot be read as meant: {wrong}")
        try:
            conninfo_to_dict(listen_url)
        except psycopg.ProgrammingError as error:
            raise Refusal(
                f"listen_url={shown(listen_url)!r} is not a connection string PostgreSQL reads: "
                f"{scrubbed(str(error).strip(), listen_url)}"
            ) from None
    return Pooler(conninfo, pooler, listen_url)


T = TypeVar("T")


def with_work_settings(
    fn: Callable[[psycopg.AsyncCursor[Any]], Awaitable[T]],
) -> Callable[[psycopg.AsyncCursor[Any]], Awaitable[T]]:
    """`fn` (a claim or ends on a kept connection's cursor) in a transaction of its own that
    first takes the workers' settings for itself alone (`WORK_LOCAL`): a commit that need not
    wait for the disk (losing one to a server crash can only make a row run again) and a plan
    without bitmap scans. Two statements and a BEGIN and COMMIT, but each claim and end is then
    as fast as on a session of its own. (A pooled connection's transaction takes the same
    settings in `Connections.run`.)"""

    async def run(cur: psycopg.AsyncCursor[Any]) -> T:
        async with cur.connection.transaction():
            await cur.execute(WORK_LOCAL)
            return await fn(cur)

    return run


async def through_pooler(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether `conn` reaches its server through a pooler: the server process id it was given at
    its start (which a pooler makes up) is not the one that runs its statements. One round trip;
    nothing is prepared.

    Raises:
        psycopg.Error: the server did not answer.
    """
    cur = await conn.execute("SELECT pg_backend_pid()", prepare=False)
    found = await cur.fetchone()
    return found is not None and found[0] != conn.info.backend_pid


MISREAD = frozenset({"22021", "22P03"})
"""character_not_in_repertoire and invalid_binary_representation: a binary parameter read as
another type, by a statement of the same name another client prepared with other types."""


def collided(error: BaseException) -> bool:
    """Whether `error` is a statement psycopg prepared meeting a session a pooler lends to several
    clients: another client's of the same name, none of that name (`COLLIDED`), one whose
    parameters are not the bind message's (08P01, `bind message supplies 5 parameters, but
    prepared statement "_pg3_0" requires 4`), or one whose parameters have other types, so that
    the bind's binary values are read as another type (`MISREAD`: `invalid byte sequence for
    encoding "UTF8": 0x00`; psycopg never sends a NUL in text). Each comes before the statement
    runs."""
    if not isinstance(error, psycopg.Error):
        return False
    if error.sqlstate in COLLIDED or error.sqlstate in MISREAD:
        return True
    return error.sqlstate == "08P01" and "prepared statement" in str(error)


MISFIT = frozenset({"22", "23"})
"""SQLSTATE classes of the data a statement was given: a data exception (`invalid input syntax
for type json`), an integrity constraint violation."""


def misfit(error: BaseException) -> bool:
    """Whether `error` is the server refusing the values a statement was given (`MISFIT`), as
    it does when they are bound to another client's statement of the same name on a session a
    pooler lends to both: a sign of a pooler only if the same call then runs preparing nothing."""
    return isinstance(error, psycopg.Error) and (error.sqlstate or "")[:2] in MISFIT


@contextlib.contextmanager
def preparing_nothing(conn: psycopg.AsyncConnection[Any]) -> Iterator[None]:
    """`conn` prepares no statement on the server for the block, and is given back as it was
    found (a connection of the application's pool stays the application's)."""
    threshold = conn.prepare_threshold
    conn.prepare_threshold = None
    try:
        yield
    finally:
        conn.prepare_threshold = threshold


def found_sentence(where: str, how: str, *, pool: bool, listen_url: bool) -> str:
    """The one WARNING of a store that found a pooler it was not told of, at `where`, by `how`;
    `pool`: the store is over the application's pool; `listen_url`: it has a direct URL for
    LISTEN."""
    listening = (
        "" if listen_url else
        ", and serve does not LISTEN through it (other processes' rows are found by the poll)"
    )  # fmt: skip
    if pool:
        say = (
            "pass job.Table(pool, pooler=True), open the pool with "
            "AsyncConnectionPool(url, kwargs={'prepare_threshold': None}) for your own "
            "statements through it"
        )
    else:
        say = f"put {POOLER}=true in the URL (or pass pooler=True)"
    if not listen_url:
        say += f", and {LISTEN_URL}=<the server's direct URL, percent-encoded> (or listen_url=) "
        say += "for serve to be woken by other processes' pushes at once"
    session = "job.Table(pool, pooler=False)" if pool else f"{POOLER}=false (or pooler=False)"
    return (
        f"PostgreSQL at {where} answers through a pooler ({how}), which nilo-job was not told: "
        "the store now prepares no statement on the server and keeps no setting on a session, "
        f"as with {POOLER}=true{listening}; to say so yourself, {say}; a pooler in session "
        f"mode keeps sessions: {session} keeps them in use"
    )


def check_pool(kwargs: Any) -> None:
    """Refuse an application's pool, said to be behind a pooler, whose connections prepare
    statements on the server.

    Raises:
        Refusal: the pool's `kwargs` do not set `prepare_threshold` to None.
    """
    if not isinstance(kwargs, dict) or kwargs.get("prepare_threshold", 5) is not None:
        raise Refusal(
            "job.Table(pool, pooler=True): the pool's connections prepare statements on the "
            "server, which a pooler in transaction mode cannot keep: open it with "
            "AsyncConnectionPool(url, kwargs={'prepare_threshold': None})"
        )


def _split(url: str) -> tuple[str, dict[str, str]]:
    """`url` without nilo-job's query parameters, and their values (percent-decoded)."""
    if not url.startswith(("postgresql://", "postgres://")) or "?" not in url:
        return url, {}
    head, _, query = url.partition("?")
    query, hash_, fragment = query.partition("#")
    kept, found = [], {}
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if unquote(key) in (POOLER, LISTEN_URL):
            found[unquote(key)] = unquote(value)
        elif part:
            kept.append(part)
    rest = "&".join(kept)
    return head + ("?" + rest if rest else "") + hash_ + fragment, found
