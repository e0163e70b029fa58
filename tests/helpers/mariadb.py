"""A MariaDB/MySQL connection of a test's own, beside the store's."""

from __future__ import annotations

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
