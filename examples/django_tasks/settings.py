"""Settings of the example project: one app, one database, and its tasks on nilo-job.

`DJANGO_TASKS_DATABASE_URL` (this project's own variable) picks the database: a SQLite file by
default, `postgresql://user@host/db`, or `mariadb://user@host/db` (or `mysql://…`, on Django's
MySQL backend, with PyMySQL standing in for mysqlclient where that is not installed). The tasks'
table, `nilo_jobs`, is in that same database: no `store` option is given, so the backend uses
Django's `default` database, and a task enqueued inside `transaction.atomic()` commits or rolls
back with it.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit

DATABASE_URL = os.environ.get("DJANGO_TASKS_DATABASE_URL", "sqlite:///django_tasks.db")


def _database(url: str) -> dict[str, Any]:
    if url.startswith("sqlite:///"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url.removeprefix("sqlite:///")}
    parts = urlsplit(url)
    mysql = parts.scheme in ("mariadb", "mysql")
    if mysql:
        _mysql_driver()
    return {
        "ENGINE": f"django.db.backends.{'mysql' if mysql else 'postgresql'}",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        **({"OPTIONS": {"charset": "utf8mb4"}} if mysql else {}),
    }


def _mysql_driver() -> None:
    """Django's MySQL backend imports mysqlclient (`MySQLdb`), a C extension; where it is not
    installed, PyMySQL stands in for it."""
    try:
        import MySQLdb  # noqa: F401
    except ImportError:
        import pymysql

        pymysql.install_as_MySQLdb()


DATABASES = {"default": _database(DATABASE_URL)}

TASKS = {
    # The project's tasks: three attempts, a fifth of a second apart, 30 s each at most.
    "default": {
        "BACKEND": "nilo_job.django.TaskBackend",
        "QUEUES": ["default", "reports"],
        "OPTIONS": {
            "retry": {"times": 2, "backoff_ms": 200},
            "timeout_ms": 30_000,
            "poll_ms": 500,
        },
    },
    # A second backend on the same table, with a retry policy of its own: a task that names it
    # (`@task(backend="patient")`, or `.using(backend="patient")`) waits a minute before its
    # one retry. `nilo_job.django.jobs_for("patient")` is its queue, for a worker.
    "patient": {
        "BACKEND": "nilo_job.django.TaskBackend",
        "OPTIONS": {"retry": {"times": 1, "backoff_ms": 60_000}, "poll_ms": 60_000},
    },
}

INSTALLED_APPS = ["examples.django_tasks"]
ROOT_URLCONF = "examples.django_tasks.urls"
MIDDLEWARE: list[str] = []
SECRET_KEY = os.environ.get("DJANGO_TASKS_SECRET_KEY", "an example, not a secret")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
