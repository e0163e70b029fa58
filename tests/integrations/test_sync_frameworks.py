"""Sync producers: the Flask and Django examples push, cancel and read stats with no asyncio.

Flask runs here, through its test client. Django's settings are global to a process, so its
scenarios (`tests/helpers/django_scenarios.py`) run in a pytest process of their own, once on
SQLite and once on PostgreSQL, where `push_in` writes through Django's psycopg connection.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

import nilo_job as job
from examples.flask_app import create_app
from tests.helpers import ROOT

DAY_US = 24 * 3_600_000_000


@pytest.fixture
def flask_app(tmp_path: Path) -> Iterator[tuple[FlaskClient, job.Jobs]]:
    app = create_app(str(tmp_path / "app.db"))
    jobs: job.Jobs = app.extensions["nilo_job"]
    yield app.test_client(), jobs
    asyncio.run(jobs.store.close())


def test_flask_views_push_in_a_transaction_and_a_drain_delivers(
    flask_app: tuple[FlaskClient, job.Jobs],
) -> None:
    client, jobs = flask_app
    answer = client.post("/users", json={"email": "ada@example.com"})
    assert (answer.status_code, answer.json) == (201, {"id": 1, "welcome": 1})
    again = client.post("/users", json={"email": "ada@example.com"})
    assert (again.status_code, again.json) == (
        409,
        {"error": "ada@example.com has signed up already"},
    )
    assert client.get("/ops/stats").json == {"queued": 1, "running": 0, "dead": 0}

    assert jobs.sync.drain() == 1
    assert client.get("/users/1").json == {"id": 1, "email": "ada@example.com", "sent": ["welcome"]}
    assert client.get("/ops/stats").json == {"queued": 0, "running": 0, "dead": 0}


def test_flask_views_push_once_cancel_and_read_stats(
    flask_app: tuple[FlaskClient, job.Jobs],
) -> None:
    client, jobs = flask_app
    t = job.now_us()
    assert client.post("/users", json={"email": "ada@example.com"}).status_code == 201
    assert jobs.sync.drain() == 1

    first = client.post("/users/1/nudge")
    assert (first.status_code, first.json) == (201, {"nudge": 2, "already": False})
    second = client.post("/users/1/nudge")
    assert (second.status_code, second.json) == (200, {"nudge": None, "already": True})
    assert client.get("/ops/stats").json == {"queued": 1, "running": 0, "dead": 0}

    gone = client.delete("/jobs/2")
    assert (gone.status_code, gone.data) == (204, b"")
    twice = client.delete("/jobs/2")
    assert (twice.status_code, twice.json) == (
        409,
        {"error": "job 2 is not queued: a worker holds it, or it is gone"},
    )
    assert client.get("/ops/stats").json == {"queued": 0, "running": 0, "dead": 0}

    # The key left with the cancelled row; the new nudge goes out three days later.
    third = client.post("/users/1/nudge")
    assert third.status_code == 201
    assert third.json is not None
    assert third.json == {"nudge": third.json["nudge"], "already": False}
    assert third.json["nudge"] > 2  # ids are never reused
    assert jobs.sync.drain_at(t + 3 * DAY_US - 1) == 0
    assert jobs.sync.drain_at(job.now_us() + 3 * DAY_US) == 1
    assert client.get("/users/1").json == {
        "id": 1,
        "email": "ada@example.com",
        "sent": ["welcome", "nudge"],
    }


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_django_views_push_in_inside_atomic_on_djangos_connection(
    database: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if database == "postgres":
        url: str = request.getfixturevalue("pg_url")
    else:
        url = f"sqlite:///{tmp_path}/django.db"
    env = {**os.environ, "DJANGO_APP_DATABASE_URL": url}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/helpers/django_scenarios.py",
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
    assert done.stdout.splitlines()[-1].startswith("5 passed in ")
