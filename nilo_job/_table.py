"""`job.Table(...)`: the queue's table in the database you already have, chosen by its URL."""

from __future__ import annotations

from typing import Any

from ._errors import Refusal
from .store.contract import Store


def Table(target: object, **options: Any) -> Store:
    """The `nilo_jobs` table in your database, as a store for `job.Jobs(store=...)`.

    Args:
        target: `"sqlite:///relative.db"`, `"sqlite:////absolute.db"` or `"sqlite:///:memory:"`.
        **options: passed to the store (for SQLite: `busy_timeout_ms`, `synchronous`).

    Returns:
        A store; `await table.create_missing()` creates the table, `await table.check()` checks it.

    Raises:
        Refusal: the target is not a database this version can hold a queue in.
    """
    if isinstance(target, str) and target.startswith("sqlite:"):
        from .store.sqlite import SqliteTable, path_from_url

        return SqliteTable(path_from_url(target), **options)
    if isinstance(target, str) and target.startswith(("postgresql:", "postgres:")):
        raise Refusal(
            "this version of nilo-job has no PostgreSQL store yet: use job.Table('sqlite:///…') "
            "or job.Memory() until it lands"
        )
    raise Refusal(
        f"job.Table({target!r}): pass a URL, 'sqlite:///app.db' (relative) or "
        "'sqlite:////var/lib/app.db' (absolute)"
    )
