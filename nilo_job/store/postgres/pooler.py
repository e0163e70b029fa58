"""A pooler between the PostgreSQL store and its server: what `job.Table` is told about it.

Behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`) a client connection
is lent a server connection for one transaction at a time, so the store must rely on no session
(`prepare_threshold=None`: nothing is prepared on the server; the workers' settings, which
PgBouncer refuses as the `options` startup parameter, taken by each claim's and end's own
transaction; LISTEN, which needs a session of its own, on a direct URL or not at all). It cannot
tell from the connection that a pooler is there, so it is told: `job.Table(url, pooler=True,
listen_url=direct)`, or the same in the URL itself, for a deployment that has one setting for the
database, e.g.

    postgresql://app@bouncer:6432/app?nilo_pooler=true&nilo_listen_url=postgresql%3A%2F%2Fapp%40db%2Fapp

`nilo_pooler` and `nilo_listen_url` (percent-encoded) are read and taken out of the URL before
libpq sees it (libpq refuses parameters it does not know); every other parameter stays as it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ..._errors import Refusal

POOLER = "nilo_pooler"
LISTEN_URL = "nilo_listen_url"

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
    a pooler in transaction mode is in between; `listen_url`: the direct URL LISTEN uses, or
    None."""

    conninfo: str
    pooler: bool
    listen_url: str | None


def read_pooler(url: str, pooler: bool, listen_url: str | None) -> Pooler:
    """`url`'s own `nilo_pooler` / `nilo_listen_url`, merged with the keyword arguments.

    Raises:
        Refusal: `pooler` is not a bool or the URL's value not `true` or `false`, `listen_url`
            is given twice and differently, or it is not a URL PostgreSQL reads.
    """
    if not isinstance(pooler, bool):
        raise Refusal(f"job.Table(..., pooler={pooler!r}): pass True or False")
    conninfo, found = _split(url)
    said = found.get(POOLER)
    if said is not None:
        if said.lower() not in ("true", "false"):
            raise Refusal(f"{POOLER}={said!r} in the URL: write {POOLER}=true or {POOLER}=false")
        pooler = pooler or said.lower() == "true"
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
            raise Refusal(
                f"listen_url={listen_url!r}: pass the direct 'postgresql://user@host/db' of the "
                "server (not the pooler's)"
            )
        try:
            conninfo_to_dict(listen_url)
        except psycopg.ProgrammingError as error:
            raise Refusal(
                f"listen_url is not a connection string PostgreSQL reads: {str(error).strip()}"
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
