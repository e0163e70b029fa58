"""The README's code runs as it stands: its first sample as a script, its second as a test file.

Each is copied out of README.md into a folder of its own and run in a fresh Python process, the
way a reader who pasted it would run it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def samples() -> list[str]:
    """The README's python code blocks, in order."""
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def test_the_first_sample_delivers_the_welcome_and_keeps_tomorrows_reminder(
    tmp_path: Path,
) -> None:
    (tmp_path / "app.py").write_text(samples()[0])
    done = run(["app.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Welcome -> a@b.c",
        "Stats(queued=1, running=0, dead=0, done=1)",
    ]
    again = run(["app.py"], tmp_path)  # again, on the same file: a second user, and its own
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "Welcome -> a@b.c",
        "Stats(queued=2, running=0, dead=0, done=2)",  # both reminders, and both welcomes done
    ]


def test_the_second_sample_is_a_test_that_passes(tmp_path: Path) -> None:
    (tmp_path / "test_nudge.py").write_text(samples()[1])
    done = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_nudge.py"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
