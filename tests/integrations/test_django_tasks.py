"""Django's Tasks framework (`django.tasks`) on nilo-job: `nilo_job.django.TaskBackend` in the
example project `examples/django_tasks`, with a real worker process, on SQLite, PostgreSQL and
MariaDB (Django's MySQL backend, with PyMySQL standing in for mysqlclient, as the example's
settings let it).

Django's settings are global to a process, so each database runs
`tests/helpers/django_tasks_scenarios.py` in a pytest process of its own (the scenarios are
there). Django 6 needs Python 3.12 or newer: on an older Python this module skips, whatever CI
says, and imports nothing of Django's; the 3.12 run covers it. On 3.12 a Django without
`django.tasks` skips too, except in CI (CI=true), where it is a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT

if sys.version_info < (3, 12):
    pytest.skip("Django's Tasks framework needs Django 6 (Python 3.12+)", allow_module_level=True)

if importlib.util.find_spec("django") is None or importlib.util.find_spec("django.tasks") is None:
    if os.environ.get("CI") == "true":
        pytest.fail("CI needs Django 6.1 on Python 3.12+: pip install 'django>=6.1'")
    pytest.skip(
        "Django's Tasks framework needs Django 6: pip install 'django>=6.1'",
        allow_module_level=True,
    )

SCENARIOS = 20


@pytest.mark.procs
@pytest.mark.parametrize("database", ["sqlite", "postgres", "mariadb"])
def test_djangos_tasks_run_on_nilo_job(
    database: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if database in ("postgres", "mariadb"):
        url: str = request.getfixturevalue("pg_url" if database == "postgres" else "mariadb_url")
    else:
        url = f"sqlite:///{tmp_path}/tasks.db"
    env = {**os.environ, "DJANGO_TASKS_DATABASE_URL": url}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/helpers/django_tasks_scenarios.py",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.splitlines()[-1]
    assert re.match(rf"^{SCENARIOS} passed in [\d.]+s", last), done.stdout


DATABASES = """\
import json

import django
from django.conf import settings

CA = "/etc/ssl/certs/ca-certificates.crt"  # Debian's bundle of the authorities it trusts
mysql = {"ENGINE": "django.db.backends.mysql", "NAME": "shop", "USER": "app"}
settings.configure(
    DATABASES={
        "default": {
            **mysql, "PASSWORD": "p@ss:w/rd", "HOST": "db.internal", "PORT": 3307,
            "OPTIONS": {"charset": "utf8mb4", "connect_timeout": 5, "init_command": "SET x=1"},
        },
        "socket": {**mysql, "HOST": "/run/mysqld/mysqld.sock"},
        "tls": {
            **mysql, "HOST": "db.internal",
            "OPTIONS": {"ssl": {"ca": CA}, "ssl_mode": "VERIFY_IDENTITY"},
        },
        "capath": {**mysql, "HOST": "db.internal", "OPTIONS": {"ssl": {"capath": "/etc/ssl"}}},
        "oracle": {"ENGINE": "django.db.backends.oracle", "NAME": "xe", "USER": "app"},
    },
)
django.setup()

import nilo_job as job
from nilo_job.django import TaskBackend
from nilo_job.store.mysql.connections import server_of

seen = {}
for name, options in {
    "default": {},
    "socket": {"database": "socket"},
    "same_on_mariadb": {"store": "mariadb://other@db.internal:3307/shop"},
    "another_port": {"store": "mariadb://app@db.internal:3306/shop"},
    "tls_with_a_store": {"database": "tls", "store": "mysql://app@db.internal/shop"},
    "tls": {"database": "tls"},
    "capath": {"database": "capath"},
    "oracle": {"database": "oracle"},
}.items():
    try:
        given = TaskBackend("extra", {"OPTIONS": options}).settings
    except job.Refusal as refused:
        seen[name] = str(refused)
        continue
    seen[name] = [given.store, given.database]
    if name in ("default", "socket"):  # what the store reads in the URL
        server = server_of(given.store)
        seen[name] += [
            server.host, server.port, server.user, server.password, server.database,
            server.unix_socket, server.connect_timeout,
        ]
    if name == "tls":
        tls = server_of(given.store).tls
        seen[name] += [tls.mode, tls.ca]
print(json.dumps(seen))
"""
"""Django settings with MariaDB/MySQL databases, and Oracle's, read by the backend (no server)."""
SOCKET_PATH = "/run/mysqld/mysqld.sock"


def test_a_mysql_database_gives_the_store_and_an_engine_without_one_is_refused() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", DATABASES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    url = "mysql://app:p%40ss%3Aw%2Frd@db.internal:3307/shop?connect_timeout=5"
    socket = "mysql://app@localhost/shop?unix_socket=%2Frun%2Fmysqld%2Fmysqld.sock"
    assert json.loads(done.stdout) == {
        "default": [url, "default", "db.internal", 3307, "app", "p@ss:w/rd", "shop", None, 5.0],
        "socket": [socket, "socket", "localhost", 3306, "app", "", "shop", SOCKET_PATH, 10.0],
        # A store named by another URL of the same database joins its transactions; not another.
        "same_on_mariadb": ["mariadb://other@db.internal:3307/shop", "default"],
        "another_port": ["mariadb://app@db.internal:3306/shop", None],
        "tls_with_a_store": ["mysql://app@db.internal/shop", "tls"],
        "tls": [
            "mysql://app@db.internal/shop?ssl_mode=VERIFY_IDENTITY"
            "&ssl_ca=%2Fetc%2Fssl%2Fcerts%2Fca-certificates.crt",
            "tls",
            "VERIFY_IDENTITY",
            "/etc/ssl/certs/ca-certificates.crt",
        ],
        "capath": (
            "DATABASES['capath']['OPTIONS'] has ssl['capath'], which the URL of nilo-job's "
            "MariaDB/MySQL store cannot carry (it takes USER, PASSWORD, HOST, PORT, NAME, "
            "connect_timeout, unix_socket, ssl_mode and ssl's ca, cert and key): set "
            "TASKS['extra']['OPTIONS']['store'] to a mysql:// URL of that database"
        ),
        "oracle": (
            "DATABASES['oracle'] is neither SQLite, PostgreSQL nor MariaDB/MySQL, where nilo-job "
            "keeps its table: set TASKS['extra']['OPTIONS']['store'] to a sqlite:///, "
            "postgresql:// or mysql:// URL"
        ),
    }


def test_the_backend_says_what_it_supports_as_djangos_contract_asks() -> None:
    import nilo_job.django as backend

    assert backend.TaskBackend.supports_defer is True
    assert backend.TaskBackend.supports_async_task is True
    assert backend.TaskBackend.supports_get_result is True
    assert backend.TaskBackend.supports_priority is False


def test_the_worker_without_djangos_settings_says_what_to_set() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-m", "nilo_job", "worker", "nilo_job.django:jobs"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == (
        "Error: nilo_job.django:jobs builds a queue that cannot work: nilo_job.django needs "
        "Django's settings: set DJANGO_SETTINGS_MODULE, like "
        "DJANGO_SETTINGS_MODULE=mysite.settings nilo-job worker nilo_job.django:jobs\n"
    )


def test_check_lists_a_kind_per_queue_and_the_lease_from_timeout_ms(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "examples.django_tasks.settings",
        "DJANGO_TASKS_DATABASE_URL": f"sqlite:///{tmp_path}/tasks.db",
    }
    done = subprocess.run(
        [sys.executable, "-m", "nilo_job", "check", "nilo_job.django:jobs"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        "ok: 4 kinds (django:default:default, django:default:default:async, "
        "django:default:reports, django:default:reports:async), lease 31000 ms\n"
    )


@pytest.mark.procs
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_with_debug_on_the_workers_log_prints_each_django_line_once(
    log_format: str, tmp_path: Path
) -> None:
    # What `startproject` writes: DEBUG = True, which gives Django's `django` logger a console
    # handler of its own, besides the worker's.
    (tmp_path / "debug_settings.py").write_text(
        "from examples.django_tasks.settings import *  # noqa: F403\nDEBUG = True\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "debug_settings",
        "DJANGO_TASKS_DATABASE_URL": f"sqlite:///{tmp_path}/tasks.db",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run("-m", "examples.django_tasks", "migrate", "--run-syncdb", "--verbosity", "0")
    run("-m", "nilo_job", "migrate", "nilo_job.django:jobs")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        command = ["worker", "nilo_job.django:jobs", "--log-format", log_format]
        worker = subprocess.Popen(
            [sys.executable, "-m", "nilo_job", *command],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        run(
            "-c",
            "import django; django.setup(); "
            "from examples.django_tasks.tasks import add; add.enqueue(2, 3)",
        )
        deadline = time.monotonic() + 30
        while "state=SUCCESSFUL" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)  # a poll for the worker's line, with a deadline
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    lines = log.read_text().splitlines()
    tasks = [line for line in lines if "path=examples.django_tasks.tasks.add state=" in line]
    assert len(tasks) == 2, lines
    assert "state=RUNNING" in tasks[0], lines
    assert "state=SUCCESSFUL" in tasks[1], lines
    if log_format == "json":
        assert [json.loads(line)["logger"] for line in tasks] == ["django.tasks"] * 2
    else:
        said = re.compile(r".* INFO django\.tasks: Task id=1\.[0-9a-f]{32} path=.*")
        assert all(said.fullmatch(line) for line in tasks), lines
