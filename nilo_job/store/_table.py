"""`job.Table(...)`: the queue's table in the database you already have, chosen by its URL."""

from __future__ import annotations

from typing import Any

from .._base.bounds import Span, whole
from .._base.errors import Refusal
from ._target import shown
from .contract import Store

POOL_SIZE = Span(1, 262_143, "a count of connections", "PostgreSQL's most connections")
"""`max_size` of a PostgreSQL table's own pool: checked here, before the pool is built, so that
0 or a bool is a sentence rather than psycopg_pool's error at the first call."""


def Table(target: object, **options: Any) -> Store:
    """The `nilo_jobs` table in your database, as a store for `job.Jobs(store=...)`.

    Args:
        target: `"sqlite:///relative.db"`, `"sqlite:////absolute.db"`, `"sqlite:///:memory:"`,
            `"postgresql://user@host/db"`, a `psycopg_pool.AsyncConnectionPool` of yours, or
            `"mysql://user:password@host/db"` (`"mariadb://…"`).
        **options: passed to the store (both: `max_payload`, the largest payload a row may
            carry, in bytes of JSON, 1 MiB by default; SQLite: `busy_timeout_ms`,
            `synchronous`; PostgreSQL: `max_size`; `answer_ms`, how long the server has to
            answer one call before its connection is given up, see docs/connections.md; and
            behind PgBouncer in transaction mode `pooler=True` with
            `listen_url="postgresql://…direct…"`, see docs/pgbouncer.md).

    Returns:
        A store; `await table.create_missing()` creates the table, `await table.check()` checks it.

    Raises:
        Refusal: the target is not a database this version can hold a queue in, or an option
            is out of its range.
    """
    if isinstance(target, str) and target.startswith("sqlite:"):
        from .sqlite.store import SqliteTable, path_from_url

        return SqliteTable(path_from_url(target), **options)
    postgres = isinstance(target, str) and target.startswith(("postgresql:", "postgres:"))
    if postgres or type(target).__module__.startswith("psycopg_pool"):
        try:
            from .postgres.store import PostgresTable
        except ImportError as error:
            raise Refusal(
                f"job.Table on PostgreSQL needs psycopg 3 and psycopg_pool ({error}): "
                "pip install 'nilo-job[postgres]'"
            ) from None
        if "max_size" in options:
            whole(options["max_size"], POOL_SIZE, "job.Table(..., max_size={})", "max_size")
        return PostgresTable(target, **options)  # type: ignore[arg-type]
    if isinstance(target, str) and target.startswith(("mysql:", "mariadb:")):
        try:
            from .mysql.store import MysqlTable
        except ImportError as error:
            raise Refusal(
                f"job.Table on MariaDB/MySQL needs asyncmy ({error}): pip install 'nilo-job[mysql]'"
            ) from None
        return MysqlTable(target, **options)
    raise Refusal(f"job.Table({_said(target)}): {_instead(target)}")


def _said(target: object) -> str:
    """`target` as the refusal names it, never with its password (`shown`)."""
    return repr(shown(target)) if isinstance(target, str) else shown(target)


def _instead(target: object) -> str:
    """What to pass instead of `target`."""
    accepted = (
        "pass a URL, 'sqlite:///app.db' (relative), 'sqlite:////var/lib/app.db' (absolute), "
        "'postgresql://user@host/db' or 'mysql://user@host/db' (MariaDB or MySQL), or a "
        "psycopg_pool.AsyncConnectionPool"
    )
    if not isinstance(target, str):
        return accepted
    scheme, sep, rest = target.partition("://")
    if sep and scheme.startswith(("postgresql+", "postgres+")):
        return (
            "this is a SQLAlchemy URL; job.Table takes libpq's, without the driver: "
            f"{shown('postgresql://' + rest)!r}"
        )
    if not sep and "=" in target:
        return (
            "this is a libpq keyword string; job.Table takes the same as a URL, "
            "'postgresql://user:password@host:port/dbname' (percent-encoded), or a "
            "psycopg_pool.AsyncConnectionPool opened with it"
        )
    return accepted
