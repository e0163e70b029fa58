"""The README's first command, the demo, run twice in a fresh directory: a worker process
delivers every deliverable welcome over real SMTP, the rest die by name, and the second run sends
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.e2e_check import check, run_demo_twice


@pytest.mark.procs
def test_the_demo_delivers_once_and_a_second_run_sends_nothing(tmp_path: Path) -> None:
    first, second = run_demo_twice(tmp_path)
    check(first, second)
