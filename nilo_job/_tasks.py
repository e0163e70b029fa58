"""Stopping serve's background tasks for sure, even when a library swallowed the cancel.

On Python 3.11 `asyncio.wait_for` (which psycopg_pool uses to wait for a connection) returns its
result instead of raising when a cancel arrives just as the wait ends, so a task that was told to
stop may carry on. Such a task still counts the cancel it was asked for (`Task.cancelling()`), so
serve's claim loop, in the task serve cancels as it stops, looks at it each time round
(`stop_if_cancelled`), and serve stops its claim loop, helpers and workers by sending the cancel
again until each has ended (`cancel_and_wait`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

AGAIN_S = 0.05  # how long `cancel_and_wait` gives a task before it cancels it once more


def stop_if_cancelled() -> None:
    """Raise `asyncio.CancelledError` when the running task was asked to stop and is still
    going (a library in between swallowed the cancel); for the top of a background loop."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_and_wait(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel `tasks` and wait until every one has ended, cancelling again each `AGAIN_S`
    seconds any that carries on; what they raised is not raised here."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=AGAIN_S)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" at exit
