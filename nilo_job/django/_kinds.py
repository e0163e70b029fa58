"""The nilo-job kinds that carry Django tasks, and what their runs do.

A backend alias has two kinds per queue name: `django:<alias>:<queue>` for plain functions, run
in a thread of their own (closing that thread's Django connections after), and
`django:<alias>:<queue>:async` for coroutine functions, awaited on the worker's event loop (so a
timeout cancels them). The payload is a `TaskCall`: the task's module path, its arguments as
JSON, its queue name and its `run_after`. A run imports the task by its path, calls it, sends
Django's `task_started` and `task_finished` signals, and returns the task's return value as
JSON, which the row keeps as its result.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._base.errors import Refusal
from .._base.process import worker
from .._base.values import Retry, Tick


@dataclass
class TaskCall:
    """One enqueued Django task, as a row's payload: `task` (the module path of the `@task`
    function), `args` and `kwargs` (JSON values), `queue` (its queue name) and `run_after`
    (µs since the epoch, None when it was not deferred)."""

    task: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str = "default"
    run_after: int | None = None


def kind_name(alias: str, queue: str, is_async: bool) -> str:
    """The kind that carries a task of backend `alias` on `queue`."""
    return f"django:{alias}:{queue}" + (":async" if is_async else "")


def make_kinds(alias: str, queues: Iterable[str], retry: Retry) -> dict[str, type[TaskCall]]:
    """The kinds of backend `alias`, by name: a sync and an async one per queue name (their
    timeout is the queue's, so that the lease is that timeout and a second)."""
    kinds: dict[str, type[TaskCall]] = {}
    for queue in sorted(queues):
        for is_async in (False, True):
            name = kind_name(alias, queue, is_async)
            settings: dict[str, Any] = {"nilo_job": name, "retry": retry}
            settings["run"] = _async_run(alias) if is_async else _sync_run(alias)
            settings["__doc__"] = f"A Django task of backend {alias!r} on queue {queue!r}."
            title = "".join(p.capitalize() for p in name.replace("-", "_").split(":"))
            kind: type[TaskCall] = dataclass(type(title.replace("_", ""), (TaskCall,), settings))
            kinds[name] = kind
    return kinds


def _sync_run(alias: str) -> Any:
    def run(self: TaskCall, tick: Tick) -> object:
        from django.db import connections  # type: ignore[import-untyped,unused-ignore]

        try:
            return _call(alias, self, tick)
        finally:
            connections.close_all()  # this thread's, which ends with the run

    return run


def _async_run(alias: str) -> Any:
    async def run(self: TaskCall, tick: Tick) -> object:
        from asgiref.sync import sync_to_async  # type: ignore[import-untyped,unused-ignore]
        from django.db import close_old_connections  # type: ignore[import-untyped,unused-ignore]

        try:
            return await _acall(alias, self, tick)
        finally:
            # The async ORM's connections live in one shared thread: closed as a request's
            # are at its end (CONN_MAX_AGE), and dropped when broken.
            await sync_to_async(close_old_connections, thread_sensitive=True)()

    return run


def find_task(path: str) -> Any:
    """The `django.tasks.Task` at the module path `path`.

    A row names its task by path, and a row is data anyone with write access to the table can
    write: its module is imported only when it is imported already, or lies in an installed app
    or the package of the project's settings (`_of_project`), so a row cannot make a worker run
    the top of any other module.

    Raises:
        Refusal: not a path of this project's, nothing importable there, or not a task.
    """
    from django.tasks import Task  # type: ignore[import-untyped,unused-ignore]
    from django.utils.module_loading import import_string  # type: ignore[import-untyped,unused-ignore]

    module = path.rpartition(".")[0]
    if module not in sys.modules and not _of_project(module):
        raise Refusal(
            f"{path} is not in an installed app or the project's package: a task is imported "
            "from this project's own modules only"
        )
    try:
        found = import_string(path)
    except ImportError as error:
        raise Refusal(f"cannot import the task {path}: {error}") from None
    if not isinstance(found, Task):
        raise Refusal(f"{path} is a {type(found).__name__}, not a task made by @task")
    return found


def _of_project(module: str) -> bool:
    """Whether `module` is in an installed app's package or the package of the settings."""
    from django.apps import apps  # type: ignore[import-untyped,unused-ignore]
    from django.conf import settings  # type: ignore[import-untyped,unused-ignore]

    roots = [config.name for config in apps.get_app_configs()]
    settings_module = getattr(settings, "SETTINGS_MODULE", None) or ""
    if "." in settings_module:
        roots.append(settings_module.rpartition(".")[0])
    return any(module == root or module.startswith(root + ".") for root in roots)


def _prepared(alias: str, call: TaskCall, tick: Tick) -> tuple[Any, Any, Any]:
    from django.tasks import task_backends  # type: ignore[import-untyped,unused-ignore]

    from ._results import running

    task = find_task(call.task).using(backend=alias, queue_name=call.queue)
    backend = task_backends[alias]
    result = running(task, call, tick, alias, worker())
    return task, backend, result


def _arguments(task: Any, call: TaskCall, result: Any) -> list[Any]:
    from django.tasks import TaskContext  # type: ignore[import-untyped,unused-ignore]

    head = [TaskContext(task_result=result)] if task.takes_context else []
    return [*head, *call.args]


def _call(alias: str, call: TaskCall, tick: Tick) -> object:
    from django.tasks.signals import task_finished, task_started  # type: ignore[import-untyped,unused-ignore]
    from django.utils.json import normalize_json  # type: ignore[import-untyped,unused-ignore]

    from ._results import failed, succeeded

    task, backend, result = _prepared(alias, call, tick)
    task_started.send(sender=type(backend), task_result=result)
    try:
        value = normalize_json(task.call(*_arguments(task, call, result), **call.kwargs))
    except BaseException as error:
        if tick.last:
            task_finished.send(sender=type(backend), task_result=failed(result, error))
        raise
    task_finished.send(sender=type(backend), task_result=succeeded(result, value))
    return value


async def _acall(alias: str, call: TaskCall, tick: Tick) -> object:
    from django.tasks.signals import task_finished, task_started  # type: ignore[import-untyped,unused-ignore]
    from django.utils.json import normalize_json  # type: ignore[import-untyped,unused-ignore]

    from ._results import failed, succeeded

    task, backend, result = _prepared(alias, call, tick)
    await task_started.asend(sender=type(backend), task_result=result)
    try:
        value = normalize_json(await task.acall(*_arguments(task, call, result), **call.kwargs))
    except asyncio.CancelledError:
        raise  # a timeout or a stop: the queue records it, and the task has not finished
    except BaseException as error:
        if tick.last:
            await task_finished.asend(sender=type(backend), task_result=failed(result, error))
        raise
    await task_finished.asend(sender=type(backend), task_result=succeeded(result, value))
    return value
