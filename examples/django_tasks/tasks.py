"""The project's tasks: plain Django `@task` functions, nothing of nilo-job's in sight.

Each runs in a worker process (`nilo-job worker nilo_job.django:jobs`); what it returns is kept
as the result (`get_result(id).return_value`), and what it raises is the result's error.
"""

from __future__ import annotations

import asyncio
import os
import time

from django.tasks import TaskContext, task
from django.utils import timezone

from .models import Order


class OutOfStock(Exception):
    """The shop has none left: the order cannot be confirmed."""


@task
def confirm_order(order_id: int) -> int:
    """Mark the order confirmed; answers its id. Safe to run twice (the queue is at least
    once): an order confirmed already stays as it is."""
    Order.objects.filter(id=order_id, confirmed_at=None).update(confirmed_at=timezone.now())
    return order_id


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="reports")
async def greet(name: str) -> dict[str, object]:
    """An async task: awaited on the worker's event loop (the ORM's async calls work here)."""
    await asyncio.sleep(0)
    orders = await Order.objects.acount()
    return {"greeting": f"hello, {name}", "orders": orders}


@task
def reserve(item: str) -> None:
    raise OutOfStock(f"no {item} left")


@task(takes_context=True)
def flaky(context: TaskContext, succeed_on: int) -> int:
    """Fails until attempt `succeed_on`, then answers the attempt it succeeded on."""
    if context.attempt < succeed_on:
        raise ConnectionError(f"attempt {context.attempt}: the service did not answer")
    return context.attempt


@task
def wait_for(path: str) -> str:
    """Runs until the file `path` exists (at most 30 s), so its RUNNING state can be seen."""
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.05)
    return "opened"
