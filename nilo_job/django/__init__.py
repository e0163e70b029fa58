"""Django's Tasks framework (`django.tasks`, Django 6) on nilo-job: a task backend.

```python
TASKS = {
    "default": {
        "BACKEND": "nilo_job.django.TaskBackend",
        "OPTIONS": {"retry": {"times": 3, "backoff_ms": 5_000}, "timeout_ms": 60_000},
    }
}
```

A project's `@task` functions then enqueue rows in the `nilo_jobs` table (by default in the
Django database itself, inside the caller's `transaction.atomic()` when there is one), and
`nilo-job worker nilo_job.django:jobs` runs them. `docs/django.md` tells the whole story: the
options, what maps to what, the limits.

Django itself is imported only when the backend is used, and this module needs Django 6 (Python
3.12 or newer); on an older Django, importing it raises ImportError with that sentence.
"""

from __future__ import annotations

import os
import threading
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any

from .._base.clock import now_us
from .._base.errors import Refusal
from .._queue.jobs import Jobs
from ..store._table import Table
from ._kinds import TaskCall, find_task, kind_name, make_kinds
from ._options import Options, read
from ._results import enqueued, from_row, micros, moment, row_of

if TYPE_CHECKING:
    BaseTaskBackend = object
else:
    try:
        from django.tasks.backends.base import BaseTaskBackend  # type: ignore[import-untyped,unused-ignore]
    except ImportError as error:
        raise ImportError(
            f"nilo_job.django needs Django 6 or newer, whose django.tasks it plugs into: {error}"
        ) from None

__all__ = ["TaskBackend", "TaskCall", "jobs", "jobs_for"]

_queues: dict[tuple[str, str], Jobs] = {}
_lock = threading.Lock()


class TaskBackend(BaseTaskBackend):
    """A `django.tasks` backend whose tasks are rows of a nilo-job table.

    `TASKS[alias]["OPTIONS"]`: `store` (the table's URL; default: the Django database
    `database`), `database` (a DATABASES alias, default `"default"`), `retry` (`{"times": n,
    "backoff_ms": m}`, `{"times": n, "from_ms": a, "to_ms": b}` or a `job.Retry`; default no
    retry), `timeout_ms` (ms one run may take; default 60,000), and the queue's `workers`,
    `poll_ms` and `retention_ms` (ms a finished task's result is kept; default an hour).
    `QUEUES` (default `["default"]`) names the queues; each is a pair of nilo-job kinds.

    Raises:
        Refusal: an option that cannot work, or `QUEUES` empty (when Django builds the backend).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)  # type: ignore[call-arg,unused-ignore]
        if not self.queues:
            raise Refusal(
                f"TASKS[{alias!r}]['QUEUES'] is empty: name the queues, like ['default'], since "
                "each queue is a kind of its own in the nilo_jobs table"
            )
        self.settings: Options = read(alias, self.options)
        self.kinds = make_kinds(alias, self.queues, self.settings.retry)

    # The attributes Django's BaseTaskBackend sets, for the type checker.
    alias: str
    queues: set[str]
    options: dict[str, Any]

    @property
    def jobs(self) -> Jobs:
        """This backend's queue (one per alias in a process, however many threads ask).

        Raises:
            Refusal: a `workers`, `poll_ms`, `retention_ms` or `max_payload` option that
                `job.Jobs` or `job.Table` refuses.
        """
        key = (self.alias, repr((self.settings, sorted(self.kinds))))
        with _lock:
            found = _queues.get(key)
            if found is None:
                given: dict[str, Any] = dict(self.settings.queue)
                if self.settings.timeout_ms is not None:
                    given["timeout_ms"] = self.settings.timeout_ms
                store = Table(self.settings.store, **self.settings.table)
                found = Jobs(kinds=list(self.kinds.values()), store=store, **given)
                _queues[key] = found
        return found

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Queue `task` with `args` and `kwargs`, answering its `TaskResult` (READY).

        Inside `transaction.atomic()` on the backend's database, the row is written in that
        transaction: it exists once that commits (a worker of this process is woken then) and
        not at all if it rolls back. Elsewhere it is pushed at once.

        Raises:
            django.tasks.exceptions.InvalidTask: what Django's `validate_task` refuses (a
                priority, a queue not in QUEUES, a naive `run_after`, …).
            Refusal: arguments that are not JSON values.
            StoreUnavailable: the table cannot be reached, or is missing.
        """
        from django.db import connections, transaction  # type: ignore[import-untyped,unused-ignore]
        from django.tasks.signals import task_enqueued  # type: ignore[import-untyped,unused-ignore]
        from django.utils.json import normalize_json  # type: ignore[import-untyped,unused-ignore]

        self.validate_task(task)  # type: ignore[attr-defined,unused-ignore]
        try:
            args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        except (TypeError, ValueError) as error:
            raise Refusal(
                f"the arguments of the task {task.module_path} must be JSON values (str, int, "
                f"float, bool, None, lists and dicts of them): {error}"
            ) from None
        kind = self.kinds[kind_name(self.alias, task.queue_name, iscoroutinefunction(task.func))]
        value = kind(
            task=task.module_path,
            args=args,
            kwargs=kwargs,
            queue=task.queue_name,
            run_after=None if task.run_after is None else micros(task.run_after),
        )
        at = None if task.run_after is None else micros(task.run_after)
        queue = self.jobs
        database = self.settings.database
        if database is not None and connections[database].in_atomic_block:
            row = queue.sync.push_in(connections[database], value, at=at)
            transaction.on_commit(queue.wake, using=database)
        else:
            row = queue.sync.push(value, at=at)
        assert row is not None  # no unique key: every push makes a row
        result = enqueued(task, row, self.alias, args, kwargs, now_us())
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """The `TaskResult` of the task whose result id is `result_id`, read from the table, so
        from any process: while it waits, runs, has failed, or has finished (for `retention_ms`
        after it finished).

        Raises:
            django.tasks.exceptions.TaskResultDoesNotExist: no row of this backend has that id
                (or a finished one was pruned).
            django.tasks.exceptions.InvalidTask: the row's task cannot be imported here.
            StoreUnavailable: the table cannot be reached.
        """
        from django.tasks.exceptions import (  # type: ignore[import-untyped,unused-ignore]
            InvalidTask,
            TaskResultDoesNotExist,
        )

        text = str(result_id)
        row_id = row_of(self.alias, text)
        row = None if row_id is None else self.jobs.sync.row(row_id)
        if row is None or row.kind not in self.kinds:
            raise TaskResultDoesNotExist(result_id)
        payload = row.payload if isinstance(row.payload, dict) else {}
        path = payload.get("task")
        try:
            if not isinstance(path, str):
                raise Refusal(f"its payload names no task ({row.unreadable or 'no task field'})")
            found = find_task(path)
        except Refusal as error:
            raise InvalidTask(f"the task result {text} cannot be read here: {error}") from None
        run_after = payload.get("run_after")
        task = found.using(
            backend=self.alias,
            queue_name=str(payload.get("queue") or found.queue_name),
            run_after=moment(run_after) if isinstance(run_after, int) else None,
        )
        return from_row(task, row, self.alias)


def _setup() -> None:
    """Django set up from DJANGO_SETTINGS_MODULE, once."""
    from django.apps import apps  # type: ignore[import-untyped,unused-ignore]
    from django.conf import settings  # type: ignore[import-untyped,unused-ignore]

    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise Refusal(
            "nilo_job.django needs Django's settings: set DJANGO_SETTINGS_MODULE, like "
            "DJANGO_SETTINGS_MODULE=mysite.settings nilo-job worker nilo_job.django:jobs"
        )
    if not apps.ready:
        import django  # type: ignore[import-untyped,unused-ignore]

        django.setup()


def jobs_for(alias: str = "default") -> Jobs:
    """The queue of the task backend `alias` (sets Django up from DJANGO_SETTINGS_MODULE
    first, when that has not happened). A worker module of yours for another alias:
    `jobs = nilo_job.django.jobs_for("emails")`, run as `nilo-job worker mymodule:jobs`.

    Raises:
        Refusal: Django is not configured, TASKS has no such alias, or its backend is not
            `nilo_job.django.TaskBackend`.
    """
    _setup()
    from django.conf import settings  # type: ignore[import-untyped,unused-ignore]
    from django.tasks import task_backends  # type: ignore[import-untyped,unused-ignore]

    configured = getattr(settings, "TASKS", {})
    if alias not in configured:
        raise Refusal(
            f"settings.TASKS has no backend {alias!r}: it has "
            f"{', '.join(map(repr, configured)) or 'none'}"
        )
    backend = task_backends[alias]
    if not isinstance(backend, TaskBackend):
        raise Refusal(
            f"TASKS[{alias!r}] uses {type(backend).__module__}.{type(backend).__name__}, not "
            "nilo_job.django.TaskBackend"
        )
    return backend.jobs


def jobs() -> Jobs:
    """The queue of the task backend `"default"`: `nilo-job worker nilo_job.django:jobs` (with
    DJANGO_SETTINGS_MODULE set) runs its tasks; see `jobs_for`.

    Raises:
        Refusal: as `jobs_for`.
    """
    return jobs_for("default")
