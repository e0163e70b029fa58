"""A row's story as Django's `TaskResult`: its status, times, attempts, errors and return value.

| row | `TaskResult.status` |
| --- | --- |
| `queued` (a retry's wait included) | `READY` |
| `running` | `RUNNING` |
| `done` | `SUCCESSFUL` |
| `dead` | `FAILED` |

A row keeps the worker of its last attempt and the last failure only, so `worker_ids` holds
that worker once per attempt (Django counts `attempts` as `len(worker_ids)`), and `errors` holds
the last failure, if any.

A result's id is `ROW.TAG`: the row's id, then 32 hex characters of an HMAC of the backend's
alias and the row id under the project's `SECRET_KEY` (Django's `salted_hmac`, SHA-256). A
caller handed one id cannot make another's; an id signed with a key in `SECRET_KEY_FALLBACKS`
is still read, so keys can be rotated. The row id alone is for operators (`nilo-job show`).
"""

from __future__ import annotations

import builtins
import dataclasses
import re
import traceback
from datetime import UTC, datetime, timedelta
from typing import Any

from .._base.values import Row, Tick

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_STATUS = {"queued": "READY", "running": "RUNNING", "done": "SUCCESSFUL", "dead": "FAILED"}


def moment(us: int | None) -> datetime | None:
    """µs since the epoch as the datetime Django uses: aware in UTC with USE_TZ, naive in the
    current time zone without it; None stays None."""
    if us is None:
        return None
    from django.conf import settings  # type: ignore[import-untyped,unused-ignore]
    from django.utils import timezone  # type: ignore[import-untyped,unused-ignore]

    at = _EPOCH + timedelta(microseconds=us)
    return at if settings.USE_TZ else timezone.make_naive(at)


def micros(at: datetime) -> int:
    """A datetime as µs since the epoch (a naive one read in the current time zone)."""
    from django.utils import timezone  # type: ignore[import-untyped,unused-ignore]

    if timezone.is_naive(at):
        at = timezone.make_aware(at)
    return (at - _EPOCH) // timedelta(microseconds=1)


TAG_CHARS = 32
"""Hex characters of a result id's tag (128 bits)."""
_SALT = "nilo_job.django.result"


def result_id(alias: str, row_id: int, secret: str | bytes | None = None) -> str:
    """The result id of row `row_id` of backend `alias`: `ROW.TAG` (see the module), signed
    with `secret` (default: `SECRET_KEY`)."""
    from django.utils.crypto import salted_hmac  # type: ignore[import-untyped,unused-ignore]

    tag = salted_hmac(_SALT, f"{alias}:{row_id}", secret=secret, algorithm="sha256")
    return f"{row_id}.{tag.hexdigest()[:TAG_CHARS]}"


def row_of(alias: str, text: str) -> int | None:
    """The row id a result id of backend `alias` names, or None when `text` is not one this
    project signed (under `SECRET_KEY` or a key of `SECRET_KEY_FALLBACKS`)."""
    from django.conf import settings  # type: ignore[import-untyped,unused-ignore]
    from django.utils.crypto import constant_time_compare  # type: ignore[import-untyped,unused-ignore]

    row, dot, tag = text.partition(".")
    if not dot or not (row.isascii() and row.isdigit()) or len(tag) != TAG_CHARS:
        return None
    row_id = int(row)
    if not 0 < row_id < 1 << 63 or str(row_id) != row:
        return None
    for secret in (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())):
        if constant_time_compare(result_id(alias, row_id, secret), text):
            return row_id
    return None


def _result(task: Any, row_id: int, alias: str, **fields: Any) -> Any:
    from django.tasks import TaskResult  # type: ignore[import-untyped,unused-ignore]

    return TaskResult(task=task, id=result_id(alias, row_id), backend=alias, **fields)


def enqueued(task: Any, row_id: int, alias: str, args: Any, kwargs: Any, now_us: int) -> Any:
    """The `TaskResult` enqueue answers: READY, enqueued now."""
    from django.tasks import TaskResultStatus  # type: ignore[import-untyped,unused-ignore]

    return _result(
        task,
        row_id,
        alias,
        status=TaskResultStatus.READY,
        enqueued_at=moment(now_us),
        started_at=None,
        finished_at=None,
        last_attempted_at=None,
        args=args,
        kwargs=kwargs,
        errors=[],
        worker_ids=[],
    )


def running(task: Any, call: Any, tick: Tick, alias: str, worker: str) -> Any:
    """The `TaskResult` a running task's context and the signals carry: RUNNING, started now,
    attempt `tick.attempts` (its `enqueued_at` is not known to the run: None)."""
    from django.tasks import TaskResultStatus  # type: ignore[import-untyped,unused-ignore]
    from django.utils import timezone  # type: ignore[import-untyped,unused-ignore]

    now = timezone.now()
    return _result(
        task,
        tick.id,
        alias,
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=call.args,
        kwargs=call.kwargs,
        errors=[],
        worker_ids=[worker] * tick.attempts,
    )


def failed(result: Any, error: BaseException) -> Any:
    """`result` FAILED by `error`, finished now."""
    from django.tasks.base import TaskError, TaskResultStatus  # type: ignore[import-untyped,unused-ignore]
    from django.utils import timezone  # type: ignore[import-untyped,unused-ignore]

    kind = type(error)
    said = TaskError(
        exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
        traceback="".join(traceback.format_exception(error)),
    )
    return dataclasses.replace(
        result, status=TaskResultStatus.FAILED, finished_at=timezone.now(), errors=[said]
    )


def succeeded(result: Any, value: object) -> Any:
    """`result` SUCCESSFUL with the return value `value`, finished now."""
    from django.tasks import TaskResultStatus  # type: ignore[import-untyped,unused-ignore]
    from django.utils import timezone  # type: ignore[import-untyped,unused-ignore]

    done = dataclasses.replace(
        result, status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now()
    )
    object.__setattr__(done, "_return_value", value)
    return done


def from_row(task: Any, row: Row, alias: str) -> Any:
    """The `TaskResult` of the row `row`, whose payload is the task call of `task`: its
    `errors` are every failed attempt's (the newest 20 attempts a row keeps), oldest first."""
    from django.tasks.base import TaskError, TaskResultStatus  # type: ignore[import-untyped,unused-ignore]

    status = TaskResultStatus(_STATUS[row.state])
    payload = row.payload if isinstance(row.payload, dict) else {}
    # Every failed attempt the row keeps, in order; a row whose attempts were not recorded
    # (ended by an older nilo-job) has its last failure only.
    failures = [(a.error, a.message, a.traceback) for a in row.attempts_log if a.error]
    if not failures and row.error:
        failures = [(row.error, row.message, row.traceback)]
    errors = [
        TaskError(
            exception_class_path=class_path(name, trace or ""),
            traceback=trace or f"{name}: {message or ''}\n",
        )
        for name, message, trace in failures
        if name
    ]
    result = _result(
        task,
        row.id,
        alias,
        status=status,
        enqueued_at=moment(row.pushed_at),
        started_at=moment(row.started_at),
        finished_at=moment(row.finished_at if row.state == "done" else row.died_at),
        last_attempted_at=moment(row.started_at),
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        errors=errors,
        worker_ids=[row.worker or "unknown"] * row.attempts,
    )
    if row.state == "done":
        object.__setattr__(result, "_return_value", row.result)
    return result


def class_path(name: str, text: str) -> str:
    """The module path of the exception class `name` that the traceback `text` ends with, as
    Python prints it (`module.Class: message`; a builtin without its module): the last line of
    `text` naming it. Without one, `nilo_job.<name>` for the queue's own errors (`TimedOut`,
    `BadPayload`), `builtins.<name>` for a builtin, else `name` as it is."""
    said = re.compile(rf"^((?:[A-Za-z_]\w*\.)*){re.escape(name)}(?::|$)")
    for line in reversed(text.splitlines()):
        found = said.match(line)
        if found:
            return f"{found.group(1)}{name}" if found.group(1) else f"builtins.{name}"
    import nilo_job

    if isinstance(getattr(nilo_job, name, None), type):
        return f"nilo_job.{name}"
    if isinstance(getattr(builtins, name, None), type):
        return f"builtins.{name}"
    return name
