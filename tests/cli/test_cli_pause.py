"""`nilo-job pause | resume`, `stats` showing the paused kinds, and a real `nilo-job worker`
process that stops claiming a paused kind and claims it again once resumed, on SQLite and
PostgreSQL. The worker also shows `--kinds`, `--log-format json` and `--log-level debug` (its
runs' start and end, with the duration) given after the subcommand."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from nilo_job.cli._text import utc
from tests.helpers import ROOT
from tests.helpers.cli_ops import nilo_job
from tests.helpers.cli_ops_queue import POLL_ENV, URL_ENV, Mail, Note, make

POLL_MS = 100
WAIT_S = 30  # the bound on every wait for a worker; each normally ends in well under a second


@pytest.fixture
def migrated_url(url: str) -> str:
    """`url` with its table made: migrated on SQLite (PostgreSQL's has it from the template)."""
    if url.startswith("sqlite:"):
        assert nilo_job("migrate", url).exit_code == 0
    return url


def stats(target: str) -> dict[str, Any]:
    done = nilo_job("stats", target, "--json")
    assert done.exit_code == 0, done.output
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def push(url: str, *values: object) -> list[int]:
    async def go() -> list[int]:
        jobs = make(url)
        try:
            ids = [await jobs.push(value) for value in values]
            assert all(row_id is not None for row_id in ids)
            return [row_id for row_id in ids if row_id is not None]
        finally:
            await jobs.store.close()

    return asyncio.run(go())


def test_pause_and_resume_over_a_url_and_module_attr(
    migrated_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, migrated_url)
    module = "tests.helpers.cli_ops_queue:make"
    push(migrated_url, Mail("a@example.com"))

    done = nilo_job("pause", module, "ops-mail")
    assert (done.exit_code, done.stdout, done.stderr) == (
        0,
        "paused ops-mail: workers stop claiming its rows within their poll_ms\n",
        "",
    )
    assert nilo_job("pause", migrated_url, "ops-mail").stdout == "ops-mail was paused already\n"
    done = nilo_job("pause", migrated_url, "ops-mail", "--json")
    assert json.loads(done.stdout) == {"kind": "ops-mail", "paused": True, "changed": False}
    # A URL knows no kinds: any name is a pause, and one with no rows in the table is said.
    done = nilo_job("pause", migrated_url, "ops-note")
    assert (done.exit_code, done.stdout, done.stderr) == (
        0,
        "paused ops-note: workers stop claiming its rows within their poll_ms\n",
        "note: the table holds no rows of 'ops-note'; check the name\n",
    )
    done = nilo_job("pause", module, "nope")
    assert (done.exit_code, done.stdout, done.stderr) == (
        1,
        "",
        "Error: tests.helpers.cli_ops_queue:make has no kind 'nope': its kinds are ops-mail, "
        "ops-note\n",
    )
    assert nilo_job("resume", module, "nope").exit_code == 1
    done = nilo_job("pause", migrated_url, "x" * 65)
    assert (done.exit_code, done.stderr) == (
        1,
        f"Error: '{'x' * 65}' cannot be a kind's name: it is 65 bytes, and at most 64 bytes are "
        "kept\n",
    )

    found = stats(migrated_url)
    paused = found.pop("paused")
    assert found == {"queued": 1, "running": 0, "dead": 0, "done": 0}
    assert sorted(paused) == ["ops-mail", "ops-note"]
    assert nilo_job("stats", module).stdout == (
        "queued   1\n"
        "running  0\n"
        "dead     0\n"
        "done     0\n"
        f"paused   ops-mail (since {utc(paused['ops-mail'])} UTC)\n"
        f"paused   ops-note (since {utc(paused['ops-note'])} UTC)\n"
    )

    done = nilo_job("resume", migrated_url, "ops-note")
    assert (done.exit_code, done.stdout) == (
        0,
        "resumed ops-note: workers claim its rows again within their poll_ms\n",
    )
    assert nilo_job("resume", migrated_url, "ops-note").stdout == "ops-note was not paused\n"
    done = nilo_job("resume", module, "ops-mail", "--json")
    assert json.loads(done.stdout) == {"kind": "ops-mail", "paused": False, "changed": True}
    assert stats(migrated_url)["paused"] == {}


class Worker:
    """A `python -m nilo_job worker` process, its stderr lines read as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        stderr = proc.stderr
        assert stderr is not None
        self.reader = threading.Thread(
            target=lambda: [self.lines.put(line) for line in stderr], daemon=True
        )
        self.reader.start()

    def wait_for(self, wanted: Callable[[str], bool]) -> str:
        """The first line from now on that is `wanted`, within WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and self.lines.empty()):
                raise AssertionError(f"no such line; the worker said:\n{''.join(self.seen)}")
            try:
                line = self.lines.get(timeout=min(left, 1))
            except queue.Empty:
                continue
            self.seen.append(line)
            if wanted(line):
                return line

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=WAIT_S)
        self.reader.join(timeout=WAIT_S)
        while not self.lines.empty():
            self.seen.append(self.lines.get_nowait())
        return code


@contextmanager
def worker(url: str, *args: str) -> Iterator[Worker]:
    env = {**os.environ, URL_ENV: url, POLL_ENV: str(POLL_MS), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "nilo_job", *args]
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    ) as proc:
        running = Worker(proc)
        try:
            yield running
        finally:
            if proc.poll() is None:
                proc.kill()


def until(check: Callable[[], bool]) -> None:
    """Wait (polling) for `check()` to hold, within WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_paused_kind_waits_in_a_running_worker_until_resumed(migrated_url: str) -> None:
    target = "tests.helpers.cli_ops_queue:make"
    with worker(
        migrated_url, "worker", target, "--log-level", "debug", "--log-format", "json"
    ) as proc:
        first = json.loads(proc.wait_for(lambda line: '"serving ' in line))
        assert first["message"] == "serving ops-mail, ops-note with 4 workers"
        assert (first["level"], first["logger"]) == ("INFO", "nilo_job")

        assert nilo_job("pause", migrated_url, "ops-note").exit_code == 0
        said = json.loads(proc.wait_for(lambda line: "is paused" in line))
        assert said["message"] == "ops-note is paused: its rows wait until it is resumed"
        assert said["kind"] == "ops-note"

        notes = push(migrated_url, Note("one"), Note("two"), Note("three"))
        (mail,) = push(migrated_url, Mail("a@example.com"))
        # The other kind runs on; the paused one stays queued for well over poll_ms.
        until(lambda: stats(migrated_url)["done"] == 1)
        time.sleep(10 * POLL_MS / 1_000)
        now = stats(migrated_url)
        assert list(now.pop("paused")) == ["ops-note"]
        assert now == {"queued": 3, "running": 0, "dead": 0, "done": 1}
        for row_id in notes:
            shown = json.loads(nilo_job("show", migrated_url, str(row_id), "--json").stdout)
            assert (shown["state"], shown["attempts"]) == ("queued", 0)

        assert nilo_job("resume", migrated_url, "ops-note").exit_code == 0
        proc.wait_for(lambda line: "is resumed" in line)
        until(lambda: stats(migrated_url)["done"] == 4)
        assert proc.stop() == 0

    records = [json.loads(line) for line in proc.seen]
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert all(r["time"].endswith("Z") for r in records)
    started = [r for r in records if r["message"].endswith("attempt 1 started")]
    assert sorted(r["row"] for r in started) == sorted([*notes, mail])
    ended = {r["row"]: r for r in records if " done on attempt 1 in " in r["message"]}
    assert sorted(ended) == sorted([*notes, mail])
    one = ended[notes[0]]
    assert one["level"] == "DEBUG"
    assert (one["kind"], one["attempt"]) == ("ops-note", 1)
    assert isinstance(one["ms"], float | int)
    prefix = f"ops-note row {notes[0]}: done on attempt 1 in "
    assert one["message"].startswith(prefix)
    assert one["message"].endswith(" ms")
    assert abs(float(one["message"][len(prefix) : -3]) - one["ms"]) <= 0.051


def test_worker_kinds_runs_only_those_with_the_options_before_the_subcommand(
    migrated_url: str,
) -> None:
    target = "tests.helpers.cli_ops_queue:make"
    with worker(
        migrated_url, "--log-level", "debug", "worker", target, "--kinds", "ops-mail"
    ) as proc:
        first = proc.wait_for(lambda line: " serving " in line)
        assert first.split(" ", 3)[2:] == ["INFO", "nilo_job: serving ops-mail with 4 workers\n"]
        (note,) = push(migrated_url, Note("left"))
        (mail,) = push(migrated_url, Mail("a@example.com"))
        line = proc.wait_for(lambda line: f"row {mail}: done on attempt 1 in " in line)
        assert " DEBUG nilo_job: ops-mail row " in line
        time.sleep(10 * POLL_MS / 1_000)
        shown = json.loads(nilo_job("show", migrated_url, str(note), "--json").stdout)
        assert (shown["state"], shown["attempts"]) == ("queued", 0)
        assert proc.stop() == 0
    assert any(f"ops-mail row {mail}: attempt 1 started" in line for line in proc.seen)
