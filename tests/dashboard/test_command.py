"""The `nilo-job dashboard` command: it serves the dashboard of a `module:attr` queue until stopped,
says who may read it, answers only the Host names it was given, and refuses a secret too short
or a host name it cannot read. The browser drives the dashboard in
tests/dashboard/test_browser.py."""

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
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


@contextlib.contextmanager
def serving(
    tmp_path: Path, env: dict[str, str], *args: str
) -> Iterator[tuple[str, str, queue.Queue[str]]]:
    """`nilo-job dashboard dash_queue:jobs --port 0 ARGS` running: the first line it printed,
    the base URL in it, and the lines it prints after. Stopped with SIGINT, which must end it
    with status 0."""
    command = nilo_job_command("dashboard", "dash_queue:jobs", "--port", "0", *args)
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
            found = re.match(r"nilo-job dashboard on (http://127\.0\.0\.1:\d+)/ ", first)
            assert found is not None, first
            yield first, found.group(1), lines
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
            reader.join(timeout=30)
    assert code == 0, "".join(lines.get_nowait() for _ in range(lines.qsize()))


def test_the_command_serves_the_dashboard(queue_module: dict[str, str], tmp_path: Path) -> None:
    env = {**queue_module, "OPS_SECRET": SECRET}
    with serving(tmp_path, env, "--secret-env", "OPS_SECRET") as (first, base, lines):
        port = base.rsplit(":", 1)[1]
        assert first == (
            f"nilo-job dashboard on http://127.0.0.1:{port}/ (pages and actions need a login "
            "with $OPS_SECRET)\n"
        )
        with httpx.Client(base_url=base, timeout=30) as http:
            # Not logged in: the login form, and nothing of the table.
            anonymous = http.get("/")
            assert anonymous.status_code == 401
            assert 'id="login-form"' in anonymous.text
            assert ("ValueError" in anonymous.text, 'id="count-dead"' in anonymous.text) == (
                False,
                False,
            )
            answer = http.post("/login", data={"secret": SECRET}, headers={"origin": base})
            assert answer.status_code == 303
            page = http.get("/").text
            assert counts(page) == {"queued": 0, "running": 0, "dead": 1, "done": 0}
            (row,) = re.findall(r'id="retry-(\d+)"', page)
            answer = http.post(
                f"/rows/{row}/retry", data={"csrf": csrf(page)}, headers={"origin": base}
            )
            assert answer.status_code == 303
            assert counts(http.get("/").text) == {"queued": 1, "running": 0, "dead": 0, "done": 0}
    rest = "".join(lines.get_nowait() for _ in range(lines.qsize()))
    assert re.fullmatch(r"[\d :,-]+ INFO nilo_job: dashboard: row 1 queued again\n", rest), rest


def test_without_a_secret_it_reads_for_this_machine_and_answers_only_its_names(
    queue_module: dict[str, str], tmp_path: Path
) -> None:
    with serving(tmp_path, queue_module, "--allow-host", "Ops.Example.COM") as (first, base, _):
        port = base.rsplit(":", 1)[1]
        assert first == (
            f"nilo-job dashboard on http://127.0.0.1:{port}/ (read-only, for clients on this "
            "machine only; set $NILO_DASHBOARD_SECRET to let others log in)\n"
        )
        with httpx.Client(base_url=base, timeout=30) as http:
            named = {
                host: http.get("/", headers={"host": host})
                for host in (
                    f"127.0.0.1:{port}",
                    f"localhost:{port}",
                    f"[::1]:{port}",
                    "ops.example.com",
                    f"evil.example:{port}",
                    "evil.example",
                    f"127.0.0.1.evil.example:{port}",
                )
            }
    assert {host: answer.status_code for host, answer in named.items()} == {
        f"127.0.0.1:{port}": 200,
        f"localhost:{port}": 200,
        f"[::1]:{port}": 200,
        "ops.example.com": 200,
        f"evil.example:{port}": 400,
        "evil.example": 400,
        f"127.0.0.1.evil.example:{port}": 400,
    }
    assert counts(named[f"127.0.0.1:{port}"].text)["dead"] == 1
    refused = named["evil.example"]
    assert refused.text == (
        "refused: this dashboard answers to the names 127.0.0.1, ::1, localhost, "
        "ops.example.com, not to the Host 'evil.example'; to open it under another name, allow "
        "that name (--allow-host NAME for the command, hosts=[...] for dashboard_app)"
    )
    assert "ValueError" not in refused.text


def test_the_command_refuses_a_host_name_it_cannot_read(
    queue_module: dict[str, str], tmp_path: Path
) -> None:
    done = subprocess.run(
        nilo_job_command("dashboard", "dash_queue:jobs", "--allow-host", "ops.example.com:8900"),
        cwd=tmp_path,
        env=queue_module,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.endswith(
        "Error: Invalid value for '--allow-host': 'ops.example.com:8900' is not a host name; give "
        "one name or address, without a port (ops.example.com, 10.0.0.5, ::1)\n"
    )


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (
            "--allow-host",
            "Error: Invalid value for '--allow-host': 'bad host!' is not a host name: it holds a "
            "space (at index 3), which no host name holds; give one name or address, without a "
            "port (ops.example.com, 10.0.0.5, ::1)\n",
        ),
        (
            "--host",
            "Error: Invalid value for '--host': 'bad host!' is not an address to listen on: it "
            "holds a space (at index 3), which no host name holds; give one name or address, "
            "without a port (127.0.0.1, 0.0.0.0, ::1)\n",
        ),
    ],
)
def test_the_command_says_what_is_wrong_with_a_host(
    queue_module: dict[str, str], tmp_path: Path, option: str, said: str
) -> None:
    done = subprocess.run(
        nilo_job_command("dashboard", "dash_queue:jobs", "--port", "0", option, "bad host!"),
        cwd=tmp_path,
        env=queue_module,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.endswith(said)


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
    # Advice for the shell the command runs in, not for dashboard_app's arguments.
    assert done.stderr == (
        "Error: $NILO_DASHBOARD_SECRET is 5 characters; use at least 16 (`export "
        "NILO_DASHBOARD_SECRET=$(python -c 'import secrets; print(secrets.token_urlsafe())')` "
        "makes one), or unset it for a read-only dashboard for this machine's clients only\n"
    )
    done = subprocess.run(
        nilo_job_command("dashboard", "dash_queue:jobs", "--secret-env", "OPS_KEY"),
        cwd=tmp_path,
        env={**queue_module, "OPS_KEY": "x" * 15},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (
        1,
        "Error: $OPS_KEY is 15 characters; use at least 16 (`export OPS_KEY=$(python -c 'import "
        "secrets; print(secrets.token_urlsafe())')` makes one), or unset it for a read-only "
        "dashboard for this machine's clients only\n",
    )
