"""MariaDB/MySQL connections of a test's own, beside the store's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any


def connect(url: str) -> Any:
    """A PyMySQL connection in autocommit to the database at `url` (a `mariadb://` URL, read as
    the store reads it); the caller closes it."""
    import pymysql

    from nilo_job.store.mysql.connections import server_of

    server = server_of(url)
    return pymysql.connect(
        host=server.host, port=server.port, user=server.user, password=server.password,
        database=server.database, autocommit=True,
    )  # fmt: skip


@contextlib.asynccontextmanager
async def side(url: str, *, autocommit: bool = True) -> AsyncIterator[Any]:
    """An asyncmy connection to the database at `url` (a `mariadb://` URL, read as the store
    reads it), closed after."""
    import asyncmy

    from nilo_job.store.mysql.connections import server_of

    server = server_of(url)
    conn = await asyncmy.connect(
        host=server.host, port=server.port, user=server.user, password=server.password,
        database=server.database, autocommit=autocommit, connect_timeout=3,
    )  # fmt: skip
    try:
        yield conn
    finally:
        conn.close()
