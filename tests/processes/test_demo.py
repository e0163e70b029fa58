"""The README's first command, the demo, run twice in a fresh directory: a worker process
delivers every deliverable welcome over real SMTP, the rest die by name, and the second run sends
nothing; then `--fresh` starts over."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from demo.e2e_check import DEAD_ADDRESSES, SIGNUPS, check, run_demo, run_demo_twice


@pytest.mark.procs
def test_the_demo_delivers_once_and_a_second_run_sends_nothing(tmp_path: Path) -> None:
    first, second = run_demo_twice(tmp_path)
    check(first, second)
    # The commands it prints after its summary work as printed: the dead rows' list names each.
    printed = first["printed"]
    dead_line = next(line for line in printed.splitlines() if "the dead rows" in line)
    command = dead_line.split("the dead rows", 1)[1].split()
    listed = subprocess.run(
        [sys.executable, "-m", "nilo_job", *command[1:], "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert command[1:] == ["dead", "sqlite:///demo.db"]  # the demo ran in tmp_path
    assert len(json.loads(listed.stdout)) == DEAD_ADDRESSES
    # --fresh starts over: every user is new again and every deliverable one is welcomed.
    again = run_demo(tmp_path, fresh=True)
    assert (again["inserted"], again["pushed"]) == (SIGNUPS, SIGNUPS), again
    assert again["delivered"] == again["stored"] == SIGNUPS - DEAD_ADDRESSES, again
