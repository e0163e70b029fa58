"""The `nilo-job dashboard` command: it serves the dashboard of a `module:attr` queue until stopped,
and refuses a secret too short. The browser drives the dashboard in
tests/dashboard/test_browser.py."""

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.helpers.dashboard import SECRET, counts, csrf

# ------------------------------------------------------------------------------ command


QUEUE_MODULE = """
import os
from dataclasses import dataclass

import nilo_job as job


@dataclass
class Mail:
    nilo_job = "mail"
    retry = job.Retry.NONE

    to: str

    def run(self) -> None:
        raise ValueError("no")


jobs = job.Jobs(kinds=[Mail], store=job.Table("sqlite:///" + os.environ["QUEUE_DB"]))
"""


@pytest.fixture
def queue_module(tmp_path: Path) -> dict[str, str]:
    """A module `dash_queue:jobs` in tmp_path over a SQLite file holding one dead row; the
    environment for a command run in tmp_path."""
    (tmp_path / "dash_queue.py").write_text(QUEUE_MODULE)
    env = {**os.environ, "QUEUE_DB": str(tmp_path / "q.db"), "PYTHONUNBUFFERED": "1"}
    env.pop("NILO_DASHBOARD_SECRET", None)
    script = (
        "import asyncio, dash_queue as q\n"
        "async def main():\n"
        "    await q.jobs.store.create_missing()\n"
        "    await q.jobs.push(q.Mail(to='x'))\n"
        "    assert await q.jobs.drain() == 1\n"
        "    await q.jobs.store.close()\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, check=True, timeout=60)
    return env


def nilo_job_command(*args: str) -> list[str]:
    return [sys.executable, "-c", "from nilo_job.cli import main; main()", *args]


def test_the_command_serves_the_dashboard(queue_module: dict[str, str], tmp_path: Path) -> None:
    command = nilo_job_command(
        "dashboard", "dash_queue:jobs", "--port", "0", "--secret-env", "OPS_SECRET"
    )
    env = {**queue_module, "OPS_SECRET": SECRET}
    lines: queue.Queue[str] = queue.Queue()
    with subprocess.Popen(
        command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    ) as proc:
        stderr = proc.stderr
        assert stderr is not None
        reader = threading.Thread(target=lambda: [lines.put(line) for line in stderr], daemon=True)
        reader.start()
        try:
            first = lines.get(timeout=60)
            found = re.fullmatch(
                r"nilo-job dashboard on (http://127\.0\.0\.1:\d+)/ \(log in with \$OPS_SECRET "
                r"to act on rows\)\n",
                first,
            )
            assert found is not None, first
            base = found.group(1)
            with httpx.Client(base_url=base, timeout=30) as http:
                assert counts(http.get("/").text) == {
                    "queued": 0,
                    "running": 0,
                    "dead": 1,
                    "done": 0,
                }
                answer = http.post("/login", data={"secret": SECRET}, headers={"origin": base})
                assert answer.status_code == 303
                page = http.get("/").text
                (row,) = re.findall(r'id="retry-(\d+)"', page)
                answer = http.post(
                    f"/rows/{row}/retry", data={"csrf": csrf(page)}, headers={"origin": base}
                )
                assert answer.status_code == 303
                assert counts(http.get("/").text) == {
                    "queued": 1,
                    "running": 0,
                    "dead": 0,
                    "done": 0,
                }
        finally:
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=30)
            reader.join(timeout=30)
    rest = "".join(lines.get_nowait() for _ in range(lines.qsize()))
    assert code == 0, rest
    assert re.fullmatch(r"[\d :,-]+ INFO nilo_job: dashboard: row 1 queued again\n", rest), rest


def test_the_command_refuses_a_short_secret(queue_module: dict[str, str], tmp_path: Path) -> None:
    done = subprocess.run(
        nilo_job_command("dashboard", "dash_queue:jobs", "--port", "0"),
        cwd=tmp_path,
        env={**queue_module, "NILO_DASHBOARD_SECRET": "short"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(
        "Error: $NILO_DASHBOARD_SECRET: dashboard_app(secret=...) is 5 characters; use at least 16"
    )
