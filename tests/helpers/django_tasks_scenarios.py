"""Django's Tasks framework on nilo-job, in the example project (`examples/django_tasks`), with a
real worker process (`nilo-job worker nilo_job.django:jobs`).

Django's settings are global to a process, so `tests/integrations/test_django_tasks.py` runs this
module with `python -m pytest tests/helpers/django_tasks_scenarios.py` and
`DJANGO_TASKS_DATABASE_URL` naming a fresh database (SQLite or PostgreSQL). The file does not
match `test_*.py`: the main run never collects it. Every wait is a poll with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_tasks.settings")

import django

django.setup()

import pytest  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.tasks import TaskResultStatus, task, task_backends  # noqa: E402
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist  # noqa: E402
from django.tasks.signals import task_enqueued  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

import nilo_job as job  # noqa: E402
from examples.django_tasks.models import Order  # noqa: E402
from examples.django_tasks.tasks import (  # noqa: E402
    OutOfStock,
    add,
    confirm_order,
    flaky,
    greet,
    reserve,
    wait_for,
)
from nilo_job.django import TaskBackend, jobs_for  # noqa: E402
from nilo_job.django._results import result_id  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 30.0
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


class Boom(Exception):
    """Something after the enqueue fails, so the transaction rolls back."""


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    """The project's tables, then one worker process serving the `default` backend."""
    call_command("migrate", run_syncdb=True, verbosity=0)
    made = subprocess.run(
        [sys.executable, "-m", "nilo_job", "migrate", "nilo_job.django:jobs"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("nilo_jobs is ready in job.Table(")
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nilo_job", "worker", "nilo_job.django:jobs", "--workers", "4"],
            cwd=ROOT,
            env=ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        text = log.read_text(errors="replace")
        assert proc.returncode == 0, text
        assert "SIGTERM: stopping after running rows finish" in text, text


def row_id(result: Any) -> int:
    """The row of a task result, for the operator's calls: the part of its id before the dot."""
    return int(result.id.split(".")[0])


def worker_id(proc: subprocess.Popen[bytes]) -> str:
    return f"{socket.gethostname()}:{proc.pid}"


def until(read: Callable[[], Any], done: Callable[[Any], bool], what: str) -> Any:
    """`read()` again and again until `done` says yes, for DEADLINE_S at most."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {DEADLINE_S} s: last {value!r}")
        time.sleep(0.05)


def finished(t: Any, result_id: str) -> Any:
    return until(lambda: t.get_result(result_id), lambda r: r.is_finished, f"{result_id} finished")


def test_enqueue_runs_in_the_worker_and_get_result_reads_it_back(
    worker: subprocess.Popen[bytes],
) -> None:
    before = timezone.now()
    queued = add.enqueue(2, 3)
    assert queued.status == TaskResultStatus.READY
    assert re.fullmatch(r"[1-9][0-9]*\.[0-9a-f]{32}", queued.id), queued.id
    assert queued.task == add
    assert (queued.args, queued.kwargs, queued.backend) == ([2, 3], {}, "default")
    assert queued.errors == []
    assert queued.worker_ids == []
    assert queued.started_at is None
    assert queued.finished_at is None
    assert queued.enqueued_at is not None
    assert before <= queued.enqueued_at <= timezone.now()

    result = finished(add, queued.id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.attempts == 1
    assert result.worker_ids == [worker_id(worker)]
    assert result.errors == []
    assert result.task.func is add.func
    assert (result.args, result.kwargs) == ([2, 3], {})
    assert result.enqueued_at is not None
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert result.enqueued_at.tzinfo is not None

    # The async face reads the same row; refresh() reads it again into the READY object.
    again = asyncio.run(add.aget_result(queued.id))
    assert (again.status, again.return_value, again.finished_at) == (
        TaskResultStatus.SUCCESSFUL,
        5,
        result.finished_at,
    )
    queued.refresh()
    assert (queued.status, queued.return_value) == (TaskResultStatus.SUCCESSFUL, 5)


def test_an_async_task_enqueued_with_aenqueue_runs_on_its_queue(
    worker: subprocess.Popen[bytes],
) -> None:
    queued = asyncio.run(greet.aenqueue(name="ada"))
    assert queued.status == TaskResultStatus.READY
    assert queued.task.queue_name == "reports"
    assert queued.kwargs == {"name": "ada"}
    result = finished(greet, queued.id)
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == {"greeting": "hello, ada", "orders": Order.objects.count()}
    assert result.task.queue_name == "reports"
    assert jobs_for("default").sync.row(row_id(queued)).kind == "django:default:reports:async"


def test_enqueue_inside_atomic_commits_with_the_order(worker: subprocess.Popen[bytes]) -> None:
    with transaction.atomic():
        order = Order.objects.create(item="tea")
        queued = confirm_order.enqueue(order.id)
        # Written in this transaction: no other connection sees it before the commit.
        with pytest.raises(TaskResultDoesNotExist):
            confirm_order.get_result(queued.id)
    result = finished(confirm_order, queued.id)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, order.id)
    order.refresh_from_db()
    assert order.confirmed_at is not None


def test_a_rolled_back_atomic_takes_the_task_with_it(worker: subprocess.Popen[bytes]) -> None:
    queued: list[Any] = []

    def order_then_fail() -> None:
        with transaction.atomic():
            order = Order.objects.create(item="coffee")
            queued.append(confirm_order.enqueue(order.id))
            raise Boom

    with pytest.raises(Boom):
        order_then_fail()
    assert not Order.objects.filter(item="coffee").exists()
    with pytest.raises(TaskResultDoesNotExist):
        confirm_order.get_result(queued[0].id)
    assert jobs_for("default").sync.row(row_id(queued[0])) is None


def test_run_after_waits_until_its_moment(worker: subprocess.Popen[bytes]) -> None:
    later = timezone.now() + timedelta(hours=1)
    waiting = add.using(run_after=later).enqueue(1, 1)
    soon = timezone.now() + timedelta(seconds=1.5)
    quick = add.using(run_after=soon).enqueue(2, 2)

    result = add.get_result(waiting.id)
    assert result.status == TaskResultStatus.READY
    assert result.task.run_after == later
    assert result.started_at is None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value
    row = jobs_for("default").sync.row(row_id(waiting))
    assert row is not None
    assert row.state == "queued"
    assert abs(row.run_at - int(later.timestamp() * 1_000_000)) <= 1

    done = finished(add, quick.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 4)
    assert done.started_at >= soon
    assert add.get_result(waiting.id).status == TaskResultStatus.READY
    assert jobs_for("default").sync.cancel(row_id(waiting)) is True


def test_a_task_that_raises_fails_with_its_error_and_traceback(
    worker: subprocess.Popen[bytes],
) -> None:
    queued = reserve.enqueue("tea")
    result = finished(reserve, queued.id)
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3  # the backend's retry: {"times": 2, ...}
    assert result.worker_ids == [worker_id(worker)] * 3
    assert result.finished_at is not None
    assert len(result.errors) == 3  # each attempt's, oldest first
    assert {e.traceback for e in result.errors} == {result.errors[0].traceback}
    error = result.errors[-1]
    assert error.exception_class_path == "examples.django_tasks.tasks.OutOfStock"
    assert error.exception_class is OutOfStock
    assert error.traceback.startswith("Traceback (most recent call last):\n")
    assert 'raise OutOfStock(f"no {item} left")' in error.traceback
    assert error.traceback.endswith("examples.django_tasks.tasks.OutOfStock: no tea left\n")
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value


def test_a_task_that_fails_once_succeeds_on_its_retry(worker: subprocess.Popen[bytes]) -> None:
    queued = flaky.enqueue(succeed_on=2)
    result = finished(flaky, queued.id)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 2)
    assert result.attempts == 2
    [error] = result.errors  # the earlier attempt's, which a done row keeps
    assert error.exception_class_path == "builtins.ConnectionError"
    assert error.exception_class is ConnectionError
    assert error.traceback.endswith("ConnectionError: attempt 1: the service did not answer\n")


def test_running_then_successful(worker: subprocess.Popen[bytes], tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    queued = wait_for.enqueue(str(gate))
    running = until(
        lambda: wait_for.get_result(queued.id),
        lambda r: r.status != TaskResultStatus.READY,
        "RUNNING",
    )
    assert running.status == TaskResultStatus.RUNNING
    assert running.started_at is not None
    assert running.finished_at is None
    assert running.worker_ids == [worker_id(worker)]
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = running.return_value
    gate.touch()
    result = finished(wait_for, queued.id)
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "opened")
    # The same attempt: the running row's start (its claim) and the done row's agree closely.
    assert abs(result.started_at - running.started_at) < timedelta(seconds=1)


def test_a_view_enqueues_in_its_transaction_and_reads_the_result(
    worker: subprocess.Popen[bytes],
) -> None:
    client = Client()
    placed = client.post(
        "/orders", data=json.dumps({"item": "jam"}), content_type="application/json"
    )
    assert placed.status_code == 201
    body = json.loads(placed.content)
    assert body == {"order": body["order"], "task": body["task"]}
    answer = until(
        lambda: json.loads(client.get(f"/tasks/{body['task']}").content),
        lambda b: b.get("status") == "SUCCESSFUL",
        "the view's SUCCESSFUL",
    )
    assert answer == {"status": "SUCCESSFUL", "attempts": 1, "return_value": body["order"]}
    assert client.get("/tasks/99999999").status_code == 404


def test_an_unknown_result_id_does_not_exist() -> None:
    for unknown in ("99999999", "nope", "", "-1", "1" * 40, "1." + "0" * 32, "." * 33):
        with pytest.raises(TaskResultDoesNotExist):
            add.get_result(unknown)


def test_a_result_id_cannot_be_guessed_from_another(worker: subprocess.Popen[bytes]) -> None:
    mine = add.enqueue(1, 1)
    theirs = add.enqueue(40, 2)
    assert finished(add, theirs.id).return_value == 42
    number, tag = theirs.id.split(".")
    # The row's id alone (what the ids were), a neighbour's tag, an altered tag: none reads it.
    altered = f"{number}.{tag[:-1]}{'1' if tag[-1] == '0' else '0'}"
    for guess in (number, f"{number}.{mine.id.split('.')[1]}", altered):
        with pytest.raises(TaskResultDoesNotExist):
            add.get_result(guess)
    # A key rotated into SECRET_KEY_FALLBACKS still reads the ids it signed; another key does not.
    rotated = {"SECRET_KEY": "a-new-key-" * 5, "SECRET_KEY_FALLBACKS": [settings.SECRET_KEY]}
    with override_settings(**rotated):
        assert add.get_result(theirs.id).return_value == 42
    with (
        override_settings(SECRET_KEY="a-new-key-" * 5, SECRET_KEY_FALLBACKS=[]),
        pytest.raises(TaskResultDoesNotExist),
    ):
        add.get_result(theirs.id)


def module_level(x: int) -> int:
    return x


def test_a_priority_is_refused_as_django_says_for_a_backend_without_priorities() -> None:
    with pytest.raises(
        InvalidTask, match=r"^Backend does not support setting priority of tasks\.$"
    ):
        add.using(priority=5)
    with pytest.raises(
        InvalidTask, match=r"^Backend does not support setting priority of tasks\.$"
    ):
        task(priority=-1)(module_level)
    assert add.using(priority=0).priority == 0  # the default is no priority at all


def test_bad_arguments_and_a_naive_run_after_are_refused_before_anything_is_written() -> None:
    count = jobs_for("default").sync.stats()
    with pytest.raises(job.Refusal, match=r"arguments of the task .*add must be JSON values"):
        add.enqueue(object(), 1)
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        add.using(run_after=timezone.now().replace(tzinfo=None))
    with pytest.raises(InvalidTask, match="Queue 'nightly' is not valid for backend"):
        add.using(queue_name="nightly")
    assert jobs_for("default").sync.stats() == count


def test_enqueue_sends_djangos_task_enqueued_signal() -> None:
    seen: list[Any] = []

    def receiver(sender: Any, task_result: Any, **_: Any) -> None:
        seen.append(task_result)

    task_enqueued.connect(receiver)
    try:
        queued = add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(3, 4)
    finally:
        task_enqueued.disconnect(receiver)
    assert [r.id for r in seen] == [queued.id]
    assert jobs_for("default").sync.cancel(row_id(queued)) is True


def test_a_retrys_wait_is_ready_with_the_error() -> None:
    """The `patient` backend waits a minute before its retry; its queue is drained here."""
    patient = jobs_for("patient")
    queued = flaky.using(backend="patient").enqueue(succeed_on=2)
    assert patient.sync.drain() == 1
    waiting = flaky.using(backend="patient").get_result(queued.id)
    assert waiting.status == TaskResultStatus.READY
    assert waiting.attempts == 1
    assert [e.exception_class_path for e in waiting.errors] == ["builtins.ConnectionError"]
    assert waiting.finished_at is None
    assert waiting.started_at is not None
    # Each backend reads its own rows only.
    with pytest.raises(TaskResultDoesNotExist):
        flaky.get_result(queued.id)
    assert patient.sync.cancel(row_id(queued)) is True


RUNS: dict[str, int] = {}


@task
def answers_on_the_fourth_run(name: str) -> str:
    """Fails its first three runs of `name` (whatever the attempt), then answers."""
    n = RUNS[name] = RUNS.get(name, 0) + 1
    if n <= 3:
        raise ConnectionError(f"run {n}: the service did not answer")
    return "answered"


def test_errors_holds_every_failed_attempts_error_in_order() -> None:
    """Failed, died, retried by an operator, failed, then done: three errors, oldest first. The
    `patient` backend (one retry, a minute apart) is drained here, on the drains' clock."""
    patient = jobs_for("patient")
    queued = answers_on_the_fourth_run.using(backend="patient").enqueue("four")
    now = job.now_us()
    minute = 61_000_000
    assert patient.sync.drain_at(now) == 1  # run 1: retrying
    assert patient.sync.drain_at(now + minute) == 1  # run 2: dead
    assert patient.sync.retry_many([row_id(queued)]) == 1
    again = job.now_us()
    assert patient.sync.drain_at(again) == 1  # run 3: retrying
    assert patient.sync.drain_at(again + minute) == 1  # run 4: done
    result = answers_on_the_fourth_run.using(backend="patient").get_result(queued.id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "answered"
    assert [e.exception_class_path for e in result.errors] == ["builtins.ConnectionError"] * 3
    for n, error in enumerate(result.errors, 1):
        assert error.traceback.startswith("Traceback (most recent call last):\n")
        assert error.traceback.endswith(f"ConnectionError: run {n}: the service did not answer\n")
    row = patient.sync.row(row_id(queued))
    assert row is not None
    assert [a.outcome for a in row.attempts_log] == ["retrying", "dead", "retrying", "done"]


def test_a_commit_wakes_a_worker_of_this_process_at_once() -> None:
    """The `patient` backend polls once a minute: only the commit's wake can start it sooner."""
    patient = jobs_for("patient")
    ready = threading.Event()
    stop: list[Callable[[], None]] = []

    async def serve() -> None:
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        stop.append(lambda: loop.call_soon_threadsafe(stopped.set))
        async with patient.serving(grace_ms=5_000):
            ready.set()
            await stopped.wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    try:
        assert ready.wait(DEADLINE_S)
        # A first task, pushed outside a transaction, shows the workers are up and idle.
        first = add.using(backend="patient").enqueue(1, 2)
        assert finished(add.using(backend="patient"), first.id).return_value == 3
        started = time.monotonic()
        with transaction.atomic():
            order = Order.objects.create(item="honey")
            queued = confirm_order.using(backend="patient").enqueue(order.id)
        result = finished(confirm_order.using(backend="patient"), queued.id)
        assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, order.id)
        assert time.monotonic() - started < 20  # the poll would have taken 60 s
    finally:
        stop[0]()
        thread.join(DEADLINE_S)
    assert not thread.is_alive()


def test_options_that_cannot_work_are_refused_in_a_sentence() -> None:
    def build(params: dict[str, Any]) -> TaskBackend:
        return TaskBackend("extra", params)

    with pytest.raises(job.Refusal, match=r"has no option retries: the options are store, "):
        build({"OPTIONS": {"retries": 3}})
    with pytest.raises(job.Refusal, match=r"\['retry'\] must be a dict like"):
        build({"OPTIONS": {"retry": 3}})
    with pytest.raises(job.Refusal, match=r"got the keys backoff, times"):
        build({"OPTIONS": {"retry": {"times": 3, "backoff": 10}}})
    with pytest.raises(job.Refusal, match=r"Retry\(times=-1\)"):
        build({"OPTIONS": {"retry": {"times": -1}}})
    with pytest.raises(job.Refusal, match=r"'reporting', which DATABASES does not have"):
        build({"OPTIONS": {"database": "reporting"}})
    with pytest.raises(job.Refusal, match=r"timeout_ms'\] = 0 is below 1: .* whole milliseconds"):
        build({"OPTIONS": {"timeout_ms": 0}})
    with pytest.raises(job.Refusal, match=r"\['QUEUES'\] is empty"):
        build({"QUEUES": []})
    with pytest.raises(job.Refusal, match=r"settings.TASKS has no backend 'nightly'"):
        jobs_for("nightly")

    # The table in the Django database: an enqueue joins its transactions. Another store: not.
    assert build({}).settings.database == "default"
    elsewhere = build({"OPTIONS": {"store": "sqlite:////nowhere/other.db"}})
    assert (elsewhere.settings.store, elsewhere.settings.database) == (
        "sqlite:////nowhere/other.db",
        None,
    )
    same = build({"OPTIONS": {"store": build({}).settings.store}})
    assert same.settings.database == "default"
    retry = build({"OPTIONS": {"retry": {"times": 4, "from_ms": 100, "to_ms": 800}}}).settings.retry
    assert retry == job.Retry(times=4, backoff=job.Exponential(from_ms=100, to_ms=800))


def test_max_payload_bounds_a_tasks_arguments_and_a_larger_enqueue_writes_nothing() -> None:
    tiny = TaskBackend("tiny", {"OPTIONS": {"max_payload": 64}})
    before = jobs_for("default").sync.stats()
    with pytest.raises(job.PayloadTooLarge, match=r"over the store's max_payload of 64 bytes;"):
        tiny.enqueue(add, ("x" * 100, 1), {})
    assert jobs_for("default").sync.stats() == before
    with pytest.raises(job.Refusal, match=r"max_payload"):
        TaskBackend("tiny", {"OPTIONS": {"max_payload": 0}}).enqueue(add, (1, 2), {})


def test_a_row_naming_a_module_outside_the_project_does_not_import_it(
    worker: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    # A module with a side effect at import, on sys.path: a row written by anyone with access
    # to the table names it as its task.
    marker = tmp_path / "imported"
    (tmp_path / "nilo_side_effect.py").write_text(
        f"open({str(marker)!r}, 'w').close()\ndef task(): pass\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        backend = task_backends["default"]
        kind = backend.kinds["django:default:default"]
        row = backend.jobs.sync.push(kind(task="nilo_side_effect.task"))
        with pytest.raises(InvalidTask) as raised:
            add.get_result(result_id("default", row))
        assert str(raised.value) == (
            f"the task result {result_id('default', row)} cannot be read here: "
            "nilo_side_effect.task is not in an installed app or the project's package: a task "
            "is imported from this project's own modules only"
        )
        assert not marker.exists()
        assert "nilo_side_effect" not in sys.modules
        # The worker process does not import it either: the row dies, saying why.
        dead = until(lambda: backend.jobs.sync.row(row), lambda r: r.state == "dead", "dead")
        assert "is not in an installed app or the project's package" in (dead.message or "")
        assert not marker.exists()
    finally:
        sys.path.remove(str(tmp_path))
