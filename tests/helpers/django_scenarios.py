"""The Django example's views, through Django's test client, in a process of their own.

Django's settings are global to a process, so `tests/integrations/test_sync_frameworks.py` runs
this module with `python -m pytest tests/helpers/django_scenarios.py` and
`DJANGO_APP_DATABASE_URL` naming a fresh database (SQLite or PostgreSQL). The file does not match
`test_*.py`: the main run never collects it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_app.settings")
os.environ["DJANGO_APP_EMAIL_BACKEND"] = "django.core.mail.backends.locmem.EmailBackend"

import django

django.setup()

import pytest  # noqa: E402
from django.core import mail  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402

import nilo_job as job  # noqa: E402
from examples.django_app.jobs import SendWelcome, jobs  # noqa: E402
from examples.django_app.models import Member  # noqa: E402


class Boom(Exception):
    """Something after the push fails, so the transaction rolls back."""


@pytest.fixture(scope="module", autouse=True)
def tables() -> None:
    call_command("migrate", run_syncdb=True, verbosity=0)

    async def create() -> None:
        try:
            await jobs.store.create_missing()
        finally:
            await jobs.store.close()

    asyncio.run(create())


@pytest.fixture(autouse=True)
def empty() -> Iterator[None]:
    mail.outbox = []
    yield
    Member.objects.all().delete()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM nilo_jobs")


def post(client: Client, path: str, body: object = None) -> tuple[int, object]:
    answer = client.post(path, data=json.dumps(body or {}), content_type="application/json")
    return answer.status_code, json.loads(answer.content)


def test_joining_commits_the_member_and_its_welcome_together() -> None:
    status, body = post(Client(), "/members", {"email": "ada@example.com"})
    assert status == 201
    member = Member.objects.get(email="ada@example.com")
    assert isinstance(body, dict)
    welcome = body["welcome"]
    assert body == {"id": member.id, "welcome": welcome}
    assert isinstance(welcome, int)
    assert jobs.sync.stats() == (1, 0, 0)

    assert jobs.sync.drain() == 1
    assert [(m.subject, m.to) for m in mail.outbox] == [("Welcome", ["ada@example.com"])]
    member.refresh_from_db()
    assert member.welcomed_at is not None
    assert jobs.sync.stats() == (0, 0, 0)


def test_joining_twice_is_refused_and_pushes_nothing() -> None:
    assert post(Client(), "/members", {"email": "ada@example.com"})[0] == 201
    assert post(Client(), "/members", {"email": "ada@example.com"}) == (
        409,
        {"error": "ada@example.com has joined already"},
    )
    assert jobs.sync.stats() == (1, 0, 0)


def join_then_fail(email: str) -> None:
    with transaction.atomic():
        member = Member.objects.create(email=email)
        row = jobs.sync.push_in(connection, SendWelcome(member_id=member.id))
        assert isinstance(row, int)
        raise Boom


def test_a_rolled_back_atomic_takes_the_push_with_it() -> None:
    with pytest.raises(Boom):
        join_then_fail("grace@example.com")
    assert Member.objects.count() == 0
    assert jobs.sync.stats() == (0, 0, 0)


def test_push_in_outside_a_transaction_is_refused() -> None:
    connection.ensure_connection()
    said = (
        "push_in got a sqlite3.Connection with no open transaction"
        if connection.vendor == "sqlite"
        else "push_in got a psycopg connection with no open transaction"
    )
    with pytest.raises(job.Refusal, match=said):
        jobs.sync.push_in(connection.connection, SendWelcome(member_id=1))
    with pytest.raises(job.Refusal, match=r"outside transaction\.atomic\(\)"):
        jobs.sync.push_in(connection, SendWelcome(member_id=1))
    assert jobs.sync.stats() == (0, 0, 0)


def test_a_reminder_is_pushed_once_and_cancelled() -> None:
    client = Client()
    status, body = post(client, "/members/7/remind")
    assert status == 201
    assert isinstance(body, dict)
    row = body["reminder"]
    assert body == {"reminder": row, "already": False}
    assert post(client, "/members/7/remind") == (200, {"reminder": None, "already": True})
    assert json.loads(client.get("/ops/stats").content) == {"queued": 1, "running": 0, "dead": 0}

    assert client.delete(f"/jobs/{row}").status_code == 204
    again = client.delete(f"/jobs/{row}")
    assert again.status_code == 409
    assert json.loads(again.content) == {
        "error": f"job {row} is not queued: a worker holds it, or it is gone"
    }
    assert json.loads(client.get("/ops/stats").content) == {"queued": 0, "running": 0, "dead": 0}
    # The key went with the row: a new reminder may be queued.
    assert post(client, "/members/7/remind")[0] == 201
