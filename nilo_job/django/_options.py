"""A Django task backend's `OPTIONS`, read once: where the table is, how a task is retried, how
long it may run, and the queue's own settings.

Django is imported only inside the functions here, so the module imports on any Django (and
without one).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit

from .._base.bounds import POSITIVE_MS, whole
from .._base.errors import Refusal
from .._base.values import Exponential, Fixed, Retry

KNOWN = (
    "store", "database", "retry", "timeout_ms", "workers", "poll_ms", "retention_ms",
    "max_payload",
)  # fmt: skip
"""The option names this backend reads."""

_LIBPQ = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "application_name")
"""The keys of a PostgreSQL database's Django `OPTIONS` that go into the store's URL."""

_MYSQL = ("connect_timeout", "unix_socket", "ssl_mode")
"""The keys of a MariaDB/MySQL database's Django `OPTIONS` that go into the store's URL."""

_MYSQL_SSL = {"ca": "ssl_ca", "cert": "ssl_cert", "key": "ssl_key"}
"""The keys of the `ssl` dict of a MariaDB/MySQL database's `OPTIONS` (mysqlclient's) that go
into the store's URL, and their names there."""

_MYSQL_UNCARRIED = ("read_default_file",)
"""The keys of a MariaDB/MySQL database's Django `OPTIONS` that change where or how Django
connects and that the store's URL cannot say (an option file; an `ssl` key but `ca`, `cert`
and `key`): with one, the store is not derived from the database, lest it reach another server
or connect with less of TLS than Django does."""


@dataclass(frozen=True, slots=True)
class Options:
    """What a backend's `OPTIONS` say.

    `store` is the table's URL; `database` the Django database alias whose transactions an
    enqueue joins, or None when the table is in another database; `retry` and `timeout_ms` (ms,
    None: the queue's 60,000) apply to every task of the backend; `queue` holds the keyword
    arguments of `job.Jobs` given (`workers`, `poll_ms`, `retention_ms`), `table` those of
    `job.Table` (`max_payload`).
    """

    store: str
    database: str | None
    retry: Retry
    timeout_ms: int | None
    queue: dict[str, int]
    table: dict[str, int]


def read(alias: str, options: Mapping[str, Any]) -> Options:
    """The backend `alias`'s `OPTIONS`, checked.

    Raises:
        Refusal: an unknown option, a value of the wrong type, a database alias Django does not
            have, or with no `store` given: a database engine other than SQLite, PostgreSQL and
            MariaDB/MySQL, or a MariaDB/MySQL database whose `OPTIONS` the store's URL cannot
            carry.
    """
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, Mapping):
        raise Refusal(f"{where} must be a dict, not {type(options).__name__}")
    unknown = sorted(str(name) for name in options if name not in KNOWN)
    if unknown:
        raise Refusal(
            f"{where} has no option {', '.join(unknown)}: the options are {', '.join(KNOWN)}"
        )
    database = options.get("database", "default")
    if not isinstance(database, str) or not database:
        raise Refusal(f"{where}['database'] must name a database of DATABASES, like 'default'")
    derived = django_database_url(alias, database)
    store = options.get("store")
    if store is None:
        joined: str | None = database
        store = derived
        _carried(alias, database)
    elif not isinstance(store, str):
        raise Refusal(
            f"{where}['store'] must be a URL (sqlite:///db.sqlite3, postgresql://…, "
            f"mysql://…), not {type(store).__name__}"
        )
    else:
        joined = database if derived is not None and same_database(store, derived) else None
    if store is None:
        raise Refusal(
            f"DATABASES[{database!r}] is neither SQLite, PostgreSQL nor MariaDB/MySQL, where "
            f"nilo-job keeps its table: set {where}['store'] to a sqlite:///, postgresql:// or "
            "mysql:// URL"
        )
    timeout_ms = options.get("timeout_ms")
    if timeout_ms is not None:
        _positive(f"{where}['timeout_ms']", timeout_ms)
    queue: dict[str, int] = {}
    for name in ("workers", "poll_ms", "retention_ms"):
        if name in options:
            queue[name] = options[name]  # job.Jobs refuses a bad value with its own sentence
    table = {"max_payload": options["max_payload"]} if "max_payload" in options else {}
    return Options(
        store=store,
        database=joined,
        retry=retry_of(where, options.get("retry")),
        timeout_ms=timeout_ms,
        queue=queue,
        table=table,
    )


def retry_of(where: str, given: object) -> Retry:
    """The `job.Retry` that `OPTIONS['retry']` says: None (no retry), a `job.Retry`, or a dict
    `{"times": n}` with `"backoff_ms": m` (a fixed wait) or `"from_ms"`/`"to_ms"` (doubling).

    Raises:
        Refusal: any other value or key, or a number out of range.
    """
    if given is None:
        return Retry.NONE
    if isinstance(given, Retry):
        return given
    said = (
        f"{where}['retry'] must be a dict like {{'times': 3, 'backoff_ms': 1000}} or "
        "{'times': 3, 'from_ms': 1000, 'to_ms': 60000}, or a job.Retry"
    )
    if not isinstance(given, Mapping):
        raise Refusal(f"{said}, not {type(given).__name__}")
    keys = set(given)
    if "times" not in keys or not keys <= {"times", "backoff_ms", "from_ms", "to_ms"}:
        raise Refusal(f"{said}; got the keys {', '.join(sorted(map(str, keys))) or 'none'}")
    times = given["times"]
    if "backoff_ms" in keys:
        if keys & {"from_ms", "to_ms"}:
            raise Refusal(f"{said}: backoff_ms, or from_ms and to_ms, not both")
        return Retry(times=times, backoff=Fixed(ms=given["backoff_ms"]))
    if keys & {"from_ms", "to_ms"}:
        if not {"from_ms", "to_ms"} <= keys:
            raise Refusal(f"{said}: from_ms and to_ms go together")
        return Retry(
            times=times, backoff=Exponential(from_ms=given["from_ms"], to_ms=given["to_ms"])
        )
    return Retry(times=times)


def _positive(name: str, value: object) -> None:
    whole(value, POSITIVE_MS, f"{name} = {{}}", name)


def django_database_url(alias: str, database: str) -> str | None:
    """The URL of the Django database `database` as a nilo-job store: `sqlite:////abs/path` for
    SQLite's `NAME`, `postgresql://USER:PASSWORD@HOST:PORT/NAME` (with `sslmode` and the like
    from its `OPTIONS`) for PostgreSQL, `mysql://USER:PASSWORD@HOST:PORT/NAME` (with
    `connect_timeout`, `unix_socket`, `ssl_mode` and the `ssl` dict's `ca`, `cert` and `key`
    from its `OPTIONS`, or a `HOST` that is a socket's path)
    for MariaDB and MySQL, which Django's one backend serves both (the store tells them apart by
    the server's version once it connects); None for another engine.

    Raises:
        Refusal: `database` is not in DATABASES, or is an in-memory SQLite database, which a
            worker process cannot share.
    """
    from django.conf import settings  # type: ignore[import-untyped,unused-ignore]

    databases: Mapping[str, Mapping[str, Any]] = settings.DATABASES
    if database not in databases:
        raise Refusal(
            f"TASKS[{alias!r}]['OPTIONS']['database'] is {database!r}, which DATABASES does not "
            f"have: it has {', '.join(map(repr, databases)) or 'none'}"
        )
    db = databases[database]
    engine = str(db.get("ENGINE", ""))
    if engine.endswith(".sqlite3"):
        name = str(db.get("NAME", ""))
        if not name or name == ":memory:" or name.startswith("file:") or "mode=memory" in name:
            raise Refusal(
                f"DATABASES[{database!r}] is an in-memory SQLite database, which no worker "
                "process can share: give it a file NAME, or set OPTIONS['store']"
            )
        return "sqlite:///" + os.path.abspath(name)
    if engine.endswith((".postgresql", ".postgis")):
        netloc = _netloc(db, str(db.get("HOST") or ""))
        extra = {k: str(v) for k, v in (db.get("OPTIONS") or {}).items() if k in _LIBPQ}
        query = f"?{urlencode(extra)}" if extra else ""
        return f"postgresql://{netloc}/{quote(str(db.get('NAME') or ''), safe='')}{query}"
    if engine.endswith(".mysql"):
        host = str(db.get("HOST") or "")
        options = db.get("OPTIONS") or {}
        extra = {k: str(v) for k, v in options.items() if k in _MYSQL}
        ssl = options.get("ssl")
        if isinstance(ssl, Mapping):
            extra.update({_MYSQL_SSL[k]: str(v) for k, v in ssl.items() if k in _MYSQL_SSL})
        if host.startswith("/"):  # Django's MySQL backend: a HOST from "/" is a Unix socket
            extra.setdefault("unix_socket", host)
            host = "localhost"
        query = f"?{urlencode(extra)}" if extra else ""
        return f"mysql://{_netloc(db, host)}/{quote(str(db.get('NAME') or ''), safe='')}{query}"
    return None


def _netloc(db: Mapping[str, Any], host: str) -> str:
    """`USER:PASSWORD@HOST:PORT` of the Django database `db`, percent-encoded, an IPv6 `host`
    in brackets."""
    user = quote(str(db.get("USER") or ""), safe="")
    password = quote(str(db.get("PASSWORD") or ""), safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    netloc = auth + (f"[{host}]" if ":" in host else quote(host, safe="/"))
    if db.get("PORT"):
        netloc += f":{db['PORT']}"
    return netloc


def _carried(alias: str, database: str) -> None:
    """Refuse a MariaDB/MySQL `database` whose `OPTIONS` the store's URL cannot carry, when
    the store would be derived from it.

    Raises:
        Refusal: its `OPTIONS` name an option file, or TLS the URL cannot say (an `ssl` that
            is not a dict, or has keys but `ca`, `cert` and `key`).
    """
    from django.conf import settings  # type: ignore[import-untyped,unused-ignore]

    db: Mapping[str, Any] = settings.DATABASES[database]
    if not str(db.get("ENGINE", "")).endswith(".mysql"):
        return
    options = db.get("OPTIONS") or {}
    left = [k for k in _MYSQL_UNCARRIED if k in options]
    ssl = options.get("ssl")
    if isinstance(ssl, Mapping):
        left += [f"ssl[{k!r}]" for k in ssl if k not in _MYSQL_SSL]
    elif ssl is not None:
        left.append("ssl")
    if left:
        raise Refusal(
            f"DATABASES[{database!r}]['OPTIONS'] has {', '.join(left)}, which the URL of "
            "nilo-job's MariaDB/MySQL store cannot carry (it takes USER, PASSWORD, HOST, PORT, "
            "NAME, connect_timeout, unix_socket, ssl_mode and ssl's ca, cert and key): set "
            f"TASKS[{alias!r}]['OPTIONS']['store'] to a mysql:// URL of that database"
        )


def same_database(url: str, other: str) -> bool:
    """Whether the store URLs `url` and `other` name one database: one SQLite file (by its
    absolute path), or one PostgreSQL host, port and database name, or one MariaDB/MySQL host,
    port and database name (`mysql://` and `mariadb://` alike)."""
    if url.startswith("sqlite:///") and other.startswith("sqlite:///"):

        def path(u: str) -> str:
            return os.path.realpath(u.removeprefix("sqlite:///").split("?", 1)[0])

        return path(url) == path(other)
    if url.startswith(("postgresql://", "postgres://")) and other.startswith("postgresql://"):
        a, b = urlsplit(url), urlsplit(other)

        def where(u: Any) -> tuple[str, int, str]:
            return (u.hostname or "localhost", u.port or 5432, unquote(u.path.lstrip("/")))

        return where(a) == where(b)
    mysql = ("mysql://", "mariadb://")
    if url.startswith(mysql) and other.startswith(mysql):
        a, b = urlsplit(url), urlsplit(other)

        def server(u: Any) -> tuple[str, int, str]:
            return (u.hostname or "localhost", u.port or 3306, unquote(u.path.lstrip("/")))

        return server(a) == server(b)
    return False
