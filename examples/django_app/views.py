"""Views that use the queue without asyncio: `jobs.sync` blocks the request's thread for the
answer, and `push_in` writes through Django's own connection inside `transaction.atomic()`."""

from __future__ import annotations

import json

from django.db import IntegrityError, connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .jobs import DAY_MS, Remind, SendWelcome, jobs
from .models import Member


@require_POST
def join(request: HttpRequest) -> JsonResponse:
    email = str(json.loads(request.body or b"{}").get("email", ""))
    if "@" not in email:
        return JsonResponse({"error": "an email address is required"}, status=400)
    try:
        with transaction.atomic():
            member = Member.objects.create(email=email)
            # Django's connection wraps a DB-API connection (sqlite3 or psycopg), which is what
            # push_in writes through: the row commits or rolls back with the member.
            welcome = jobs.sync.push_in(connection, SendWelcome(member_id=member.id))
    except IntegrityError:
        return JsonResponse({"error": f"{email} has joined already"}, status=409)
    jobs.sync.wake()  # after the commit: a worker in this process starts it at once
    return JsonResponse({"id": member.id, "welcome": welcome}, status=201)


@require_POST
def remind(request: HttpRequest, member_id: int) -> JsonResponse:
    row = jobs.sync.push(Remind(member_id=member_id), after_ms=DAY_MS, unique=f"remind:{member_id}")
    if row is None:
        return JsonResponse({"reminder": None, "already": True}, status=200)
    return JsonResponse({"reminder": row, "already": False}, status=201)


@require_http_methods(["DELETE"])
def cancel(request: HttpRequest, row_id: int) -> HttpResponse:
    if not jobs.sync.cancel(row_id):
        return JsonResponse(
            {"error": f"job {row_id} is not queued: a worker holds it, or it is gone"}, status=409
        )
    return HttpResponse(status=204)


@require_GET
def stats(request: HttpRequest) -> JsonResponse:
    found = jobs.sync.stats()
    return JsonResponse({"queued": found.queued, "running": found.running, "dead": found.dead})
