"""`docs/kubernetes.md`'s Deployment, read as Kubernetes reads it and run as it names.

Its YAML is parsed (a reader of the small part of YAML the page uses, below: PyYAML is not a
dependency). The probes must ask the paths and the port the command serves, and the
termination period must cover the grace period and the store's bound. Then the command itself
runs, its module replaced by the tests' queue on a SQLite file, and both probes are asked over
HTTP, as the kubelet would, until a deadline; then SIGTERM, as a rollout sends.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from nilo_job.cli._worker import BOUND_MS
from tests.helpers import ROOT
from tests.helpers.workers import PROCS_KINDS

pytestmark = pytest.mark.procs

_ENTRY = re.compile(r"^[A-Za-z_][\w.-]*:( |$)")


def parse_yaml(text: str) -> Any:
    """The block mappings, block sequences and scalars (ints, JSON strings and lists, plain
    words) of `text`; comments on lines of their own."""
    lines = [
        [len(raw) - len(raw.lstrip(" ")), raw.strip()]
        for raw in text.splitlines()
        if raw.strip() and not raw.lstrip().startswith("#")
    ]
    value, end = _block(lines, 0)
    assert end == len(lines), f"line {end} is not read: {lines[end]}"
    return value


def _block(lines: list[list[Any]], i: int) -> tuple[Any, int]:
    indent = lines[i][0]
    if lines[i][1].startswith("- "):
        items = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
            lines[i] = [indent + 2, lines[i][1][2:].lstrip()]
            if _ENTRY.match(lines[i][1]):
                item, i = _block(lines, i)
            else:
                item, i = _scalar(lines[i][1]), i + 1
            items.append(item)
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent:
        assert _ENTRY.match(lines[i][1]), f"not a key: {lines[i][1]!r}"
        key, _, rest = lines[i][1].partition(":")
        i += 1
        if rest.strip():
            mapping[key] = _scalar(rest.strip())
        else:
            assert i < len(lines), f"{key} has no value"
            assert lines[i][0] > indent, f"{key} has no value"
            mapping[key], i = _block(lines, i)
    assert i == len(lines) or lines[i][0] < indent, f"indented oddly: {lines[i][1]!r}"
    return mapping, i


def _scalar(text: str) -> Any:
    if text[0] in '["{':
        return json.loads(text)
    if text.isdigit():
        return int(text)
    return text


def yaml_blocks() -> list[Any]:
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    return [parse_yaml(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def test_the_reader_reads_what_the_page_uses() -> None:
    assert parse_yaml('a:\n  b: 1\n  c: ["x", "y"]\nd:\n  - e: f\n    g: 2\n  - h\n') == {
        "a": {"b": 1, "c": ["x", "y"]},
        "d": [{"e": "f", "g": 2}, "h"],
    }


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_deployments_probes_and_stop_match_its_command() -> None:
    deployment = yaml_blocks()[0]
    assert deployment["kind"] == "Deployment"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:3] == ["nilo-job", "worker", "myapp.jobs:jobs"]
    port = int(_option(command, "--health-port"))
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": port}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
    assert container["ports"] == [{"name": "health", "containerPort": port}]
    # The worker is gone within --grace-ms and the store's bound after SIGTERM: the kubelet
    # must not SIGKILL it before.
    grace_s = int(_option(command, "--grace-ms")) / 1_000
    assert pod["terminationGracePeriodSeconds"] >= grace_s + BOUND_MS / 1_000
    # /readyz waits for the store's bound and a second more.
    assert container["readinessProbe"]["timeoutSeconds"] > BOUND_MS / 1_000 + 1
    exec_probe = yaml_blocks()[1]["readinessProbe"]["exec"]["command"]
    assert exec_probe == ["nilo-job", "ready", "myapp.jobs:jobs"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, bytes] | None:
    try:
        with urllib.request.urlopen(url, timeout=15) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return None  # not listening yet


def _until(url: str, seconds: float = 30.0) -> tuple[int, bytes]:
    deadline = time.monotonic() + seconds
    while (got := _get(url)) is None or got[0] != 200:
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} answered {got} after {seconds} s")
        time.sleep(0.05)
    return got


def _as_here(command: list[str], port: int) -> list[str]:
    """The page's command as this test runs it: this Python, the tests' queue, a free port."""
    assert command[0] == "nilo-job"
    here = [sys.executable, "-m", "nilo_job", *command[1:]]
    here[here.index("myapp.jobs:jobs")] = f"{PROCS_KINDS}:jobs"
    if "--health-port" in here:
        here[here.index("--health-port") + 1] = str(port)
    return here


def test_the_deployments_command_runs_and_answers_its_probes(tmp_path: Path) -> None:
    deployment, exec_block = yaml_blocks()
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    port = _free_port()
    env = {**os.environ, "NILO_TEST_DB": str(tmp_path / "q.db"), "NILO_TEST_OUT": str(tmp_path)}
    migrate = [sys.executable, "-m", "nilo_job", "migrate", f"sqlite:///{tmp_path / 'q.db'}"]
    subprocess.run(migrate, cwd=ROOT, env=env, check=True, capture_output=True, timeout=60)

    proc = subprocess.Popen(
        _as_here(container["command"], port),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        for probe, body in (("livenessProbe", b"ok\n"), ("readinessProbe", b"ready\n")):
            path = container[probe]["httpGet"]["path"]
            assert _until(f"http://127.0.0.1:{port}{path}") == (200, body)
        ready = subprocess.run(
            _as_here(exec_block["readinessProbe"]["exec"]["command"], port),
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=60,
        )
        assert ready.returncode == 0, ready.stderr
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=pod["terminationGracePeriodSeconds"])
    assert proc.returncode == 0, out.decode()
    assert out.decode().rstrip().endswith("INFO nilo_job: stopped: no row was running")
