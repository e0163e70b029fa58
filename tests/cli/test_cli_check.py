"""`nilo-job check` reports every refusal of a queue that cannot be built, not only the first:
each kind class read on its own, two classes sharing a name, and the queue's own settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT

BROKEN = """
from dataclasses import dataclass

import nilo_job as job


@dataclass
class NoRetry:
    nilo_job = "no-retry"

    user_id: int

    def run(self) -> None:
        pass


class NotData:
    nilo_job = "not-data"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


@dataclass
class Fine:
    nilo_job = "fine"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


@dataclass
class Twin:
    nilo_job = "fine"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


def make() -> job.Jobs:
    return job.Jobs(kinds=[Fine, NoRetry], store=job.Memory())


def fine() -> job.Jobs:
    return job.Jobs(kinds=[Fine], store=job.Memory())


if __import__("os").environ.get("AT_IMPORT"):
    jobs = job.Jobs(kinds=[NoRetry, NotData, Fine, Twin], store=job.Memory(), workers=0)
"""

NO_RETRY = (
    "NoRetry has no retry, and retry has no default: how many times a job is tried is a promise "
    "about it. Add `retry = job.Retry.NONE` or, e.g., `retry = job.Retry(times=5, "
    "backoff=job.Exponential(from_ms=1_000, to_ms=3_600_000))`"
)
EVERY = [
    NO_RETRY,
    "NotData is not a dataclass: put @dataclass on it (or make it a msgspec Struct or a "
    "Pydantic model), so that its fields are the payload",
    "Fine and Twin both say nilo_job = 'fine': a kind's name is what a row carries, so give each "
    "class its own",
    "job.Jobs(workers=0) is below 1: workers must be a count of runs at once from 1 to 100,000 "
    "(each is a task of this process)",
]


def check(tmp_path: Path, *args: str, at_import: bool = False) -> subprocess.CompletedProcess[str]:
    (tmp_path / "broken.py").write_text(BROKEN)
    env = {k: v for k, v in os.environ.items() if k != "AT_IMPORT"}
    if at_import:
        env["AT_IMPORT"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "nilo_job", "check", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_reports_every_refusal_of_a_queue_built_at_import(tmp_path: Path) -> None:
    done = check(tmp_path, "broken:jobs", at_import=True)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "Error: broken defines a queue that cannot work, with 4 refusals:\n"
        + "".join(f"- {sentence}\n" for sentence in EVERY)
    )
    done = check(tmp_path, "broken:jobs", "--json", at_import=True)
    assert done.returncode == 1
    assert json.loads(done.stdout) == {"ok": False, "refusals": EVERY}


def test_check_of_a_function_building_the_queue(tmp_path: Path) -> None:
    done = check(tmp_path, "broken:make")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"Error: broken:make builds a queue that cannot work: {NO_RETRY}\n",
    )
    done = check(tmp_path, "broken:fine")
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "ok: 1 kind (fine), lease 61000 ms\n",
        "",
    )
    done = check(tmp_path, "broken:fine", "--json")
    assert json.loads(done.stdout) == {
        "ok": True,
        "kinds": ["fine"],
        "lease_ms": 61_000,
        "renamed": [],
        "stranded": [],
    }


def test_check_of_one_refusal_says_it_as_before(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nilo_job", "check", "tests.helpers.kinds_broken:jobs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "Error: tests.helpers.kinds_broken defines a queue that cannot work: "
        + NO_RETRY.replace("NoRetry", "Unready")
        + "\n"
    )


def test_ready_and_check_say_a_store_they_cannot_reach_in_one_sentence(tmp_path: Path) -> None:
    """libpq's hint on a line of its own ("Is the server running on that host and accepting
    TCP/IP connections?") is not printed: each command says one sentence, on one line."""
    places = {
        "postgres": (
            "postgresql://postgres@127.0.0.1:1/nilo?connect_timeout=5",
            "cannot reach PostgreSQL at 127.0.0.1:1/nilo: connection failed: connection to "
            'server at "127.0.0.1", port 1 failed: Connection refused',
        ),
        "sqlite": (
            f"sqlite:///{tmp_path}/missing/q.db",
            f"there is no SQLite database at {tmp_path}/missing/q.db: check the path "
            "(sqlite:///relative.db, sqlite:////absolute.db), or create it and its table with "
            f"`nilo-job migrate sqlite:///{tmp_path}/missing/q.db` (or await "
            "table.create_missing())",
        ),
    }
    for url, said in places.values():

        def run(command: str, url: str = url) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "nilo_job", command, "tests.helpers.app_from_env:jobs"],
                cwd=ROOT,
                env={**os.environ, "NILO_TEST_APP_URL": url},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        ready = run("ready")
        assert (ready.returncode, ready.stdout, ready.stderr) == (
            1,
            "",
            f"Error: tests.helpers.app_from_env:jobs is not ready: {said}\n",
        )
        checked = run("check")
        assert (checked.returncode, checked.stdout, checked.stderr) == (
            0,
            "ok: 1 kind (welcome-mail), lease 61000 ms\n",
            f"the table was not read ({said}): rows of old names are not counted\n",
        )
