"""Run the demo twice in one directory and check what the task promises, for a test to call.

    from demo.e2e_check import run_demo_twice, check
    first, second = run_demo_twice(tmp_path)
    check(first, second)

or, by hand, in a fresh temporary directory: `.venv/bin/python -m demo.e2e_check`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEAD_ADDRESSES = 12  # rows of signups.csv the demo's SMTP server refuses for good
SIGNUPS = 1_000


def run_demo(
    directory: Path | str, *, fresh: bool = False, timeout_s: float = 180.0
) -> dict[str, Any]:
    """`python -m demo --dir directory --json` (with `--fresh` if `fresh`) in a child process;
    its JSON summary, with what it printed before under "printed".

    Raises:
        AssertionError: the demo exited non-zero or printed no summary (its output is included).
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "demo", "--dir", str(directory), "--json"]
        + (["--fresh"] if fresh else []),
        cwd=directory,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise AssertionError(
            f"python -m demo exited with {done.returncode}\n--- stdout\n{done.stdout}"
            f"\n--- stderr\n{done.stderr}"
        )
    summary: dict[str, Any] = json.loads(lines[-1])
    summary["printed"] = "\n".join(lines[:-1])
    return summary


def run_demo_twice(directory: Path | str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The demo's summaries, run twice in `directory` (which should start empty)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    return run_demo(directory), run_demo(directory)


def check(first: dict[str, Any], second: dict[str, Any]) -> None:
    """Assert the task's promises about two runs in a fresh directory."""
    good = SIGNUPS - DEAD_ADDRESSES
    assert first["settled"], first["problem"]
    assert (first["inserted"], first["pushed"]) == (SIGNUPS, SIGNUPS), first
    assert first["delivered"] == good, first
    assert first["dead_this_run"] == {"NoSuchAddress": DEAD_ADDRESSES}, first
    assert (first["queued"], first["running"]) == (0, 0), first
    assert first["deferred"] > 0, "the SMTP server never answered 421: no retry was exercised"
    assert first["attempts"] == good + first["deferred"] + DEAD_ADDRESSES, first
    assert first["stored"] == first["stored_recipients"] == good, first
    assert first["worker_exit"] == 0, first
    printed = first["printed"]
    assert "claimed: rows the worker holds under a lease, running or claimed ahead" in printed
    assert f"settled: delivered {good}, queued 0, claimed 0, 12 rows died this run" in printed
    for step in ("the dead rows", "one row", "the dashboard", "start over"):
        assert f"\n  {step} " in printed, printed
    # The second run: nobody new, nothing pushed, nothing sent, nothing stored twice.
    assert second["settled"], second["problem"]
    assert (second["inserted"], second["pushed"]) == (0, 0), second
    assert (second["delivered"], second["attempts"]) == (0, 0), second
    assert second["dead_this_run"] == {}, second
    assert second["delivered_total"] == good, second
    assert second["dead_total"] == DEAD_ADDRESSES, second
    assert second["stored"] == second["stored_recipients"] == good, second
    assert second["worker_exit"] == 0, second


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="nilo-demo-") as directory:
        first, second = run_demo_twice(directory)
        check(first, second)
    for name, summary in (("first", first), ("second", second)):
        keys = ("delivered", "dead_this_run", "attempts", "deferred", "wall_s", "stored")
        print(name, {key: summary[key] for key in keys})
    print("ok")


if __name__ == "__main__":
    main()
