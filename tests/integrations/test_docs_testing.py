"""`docs/testing.md` runs as it stands: its four files written to a folder, and pytest run there
in a fresh process, as a reader who copied them would run them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def files() -> dict[str, str]:
    """The page's code blocks that name a file on their first line, by that name, each whole
    (its first line too), as a reader copies it."""
    text = (ROOT / "docs" / "testing.md").read_text()
    blocks = re.findall(r"```(?:python|ini)\n(# (\S+)\n.*?)```", text, flags=re.DOTALL)
    return {name: body for body, name in blocks}


def pytest_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_pages_tests_pass_on_both_stores(tmp_path: Path) -> None:
    written = files()
    assert sorted(written) == ["conftest.py", "pytest.ini", "shop_jobs.py", "test_receipts.py"]
    for name, body in written.items():
        (tmp_path / name).write_text(body)
    done = pytest_in(tmp_path, "-v")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(" PASSED") == 4  # two tests, each on Memory and on SQLite
    assert "4 passed in" in done.stdout
    assert "warning" not in done.stdout.lower()


def test_a_loud_drain_shows_the_runs_traceback_and_the_row_it_came_from(tmp_path: Path) -> None:
    for name, body in files().items():
        (tmp_path / name).write_text(body)
    # The first test, with the provider down: what its reader sees when it fails.
    failing = files()["test_receipts.py"].replace(
        "    await jobs.push(SendReceipt(order=7",
        "    mail.down = True\n    await jobs.push(SendReceipt(order=7",
    )
    (tmp_path / "test_receipts.py").write_text(failing)
    done = pytest_in(tmp_path, "-k", "sent and memory")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "shop_jobs.py:27: in run\n" in done.stdout
    assert "E           ConnectionError: the mail provider is down\n" in done.stdout
    assert re.search(
        r"^E           nilo-job: raised by the run of send-receipt row 1, attempt 1 of 3; the row "
        r"is queued again for \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} UTC$",
        done.stdout,
        flags=re.MULTILINE,
    ), done.stdout
