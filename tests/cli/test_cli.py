"""The `nilo-job` command, run as a child process the way CI runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nilo_job as job
from tests.helpers import ROOT


def nilo_job_cli(*args: str, db: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NILO_JOB_TEST_DB"}
    if db is not None:
        env["NILO_JOB_TEST_DB"] = str(db)
    return subprocess.run(
        [sys.executable, "-m", "nilo_job", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_of_a_queue_that_cannot_work_fails_with_the_refusal() -> None:
    done = nilo_job_cli("check", "tests.helpers.kinds_broken:jobs")
    assert done.returncode != 0
    assert "Unready has no retry, and retry has no default" in done.stderr
    assert "job.Retry.NONE" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_broken_module_is_a_refusal_in_process_too() -> None:
    sys.modules.pop("tests.helpers.kinds_broken", None)
    with pytest.raises(job.Refusal, match="Unready has no retry"):
        import tests.helpers.kinds_broken  # noqa: F401


def test_check_of_a_well_formed_queue_passes() -> None:
    done = nilo_job_cli("check", "tests.helpers.kinds_ok:jobs")
    assert done.returncode == 0, done.stderr
    assert "ok-welcome" in done.stdout
    assert "ok-report" in done.stdout


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        ("tests.helpers.kinds_ok", "module:attr"),
        ("tests.no_such_module:jobs", "cannot import"),
        ("tests.helpers.kinds_ok:nothing", "no attribute"),
        ("tests.helpers.kinds_ok:DB_ENV", "not a job.Jobs"),
    ],
)
def test_check_of_a_target_that_is_not_a_queue_fails_saying_why(target: str, fragment: str) -> None:
    done = nilo_job_cli("check", target)
    assert done.returncode != 0
    assert fragment in done.stderr


async def test_stats_prints_the_counts(tmp_path: Path) -> None:
    from tests.helpers import kinds_ok

    db = tmp_path / "q.db"
    table = job.Table(f"sqlite:///{db}")
    try:
        await table.create_missing()
        jobs = job.Jobs(kinds=[kinds_ok.Welcome, kinds_ok.Report], store=table)
        t = job.now_us()
        await jobs.push(kinds_ok.Welcome(user_id=1), at=t + 3_600_000_000)
        await jobs.push(kinds_ok.Welcome(user_id=2), at=t + 3_600_000_000)
        await jobs.push(kinds_ok.Report(fail=True), at=t)
        assert await jobs.drain_at(t) == 1
        assert await jobs.stats() == (2, 0, 1)
    finally:
        await table.close()

    done = nilo_job_cli("stats", "tests.helpers.kinds_ok:jobs", db=db)
    assert done.returncode == 0, done.stderr
    counts = dict(line.split() for line in done.stdout.splitlines())
    assert counts == {"queued": "2", "running": "0", "dead": "1", "done": "0"}

    done = nilo_job_cli("stats", "tests.helpers.kinds_ok:jobs", "--json", db=db)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "queued": 2,
        "running": 0,
        "dead": 1,
        "done": 0,
        "paused": {},
    }


def test_python_dash_m_nilo_job_is_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nilo_job", "check", "tests.helpers.kinds_ok:jobs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: ")
    assert "ok-welcome" in done.stdout
    usage = subprocess.run(
        [sys.executable, "-m", "nilo_job", "--help"], capture_output=True, text=True, timeout=60
    )
    assert usage.returncode == 0
    assert usage.stdout.startswith("Usage: nilo-job ")
