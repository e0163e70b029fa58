"""Views that enqueue and read tasks through Django's own calls only."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.tasks.exceptions import TaskResultDoesNotExist
from django.views.decorators.http import require_GET, require_POST

from .models import Order
from .tasks import confirm_order


@require_POST
def place(request: HttpRequest) -> JsonResponse:
    item = str(json.loads(request.body or b"{}").get("item", ""))
    if not item:
        return JsonResponse({"error": "an item is required"}, status=400)
    with transaction.atomic():
        order = Order.objects.create(item=item)
        # In the same transaction as the order: both commit, or neither.
        confirmation = confirm_order.enqueue(order.id)
    return JsonResponse({"order": order.id, "task": confirmation.id}, status=201)


@require_GET
def result(request: HttpRequest, result_id: str) -> JsonResponse:
    try:
        found = confirm_order.get_result(result_id)
    except TaskResultDoesNotExist:
        return JsonResponse({"error": f"no task {result_id}"}, status=404)
    body: dict[str, object] = {"status": found.status.value, "attempts": found.attempts}
    if found.is_finished and not found.errors:
        body["return_value"] = found.return_value
    return JsonResponse(body)
