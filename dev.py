#!/usr/bin/env python3
"""The project's two commands, runnable from a fresh clone with only Python 3.11+.

    python3 dev.py demo    # the demo: a worker process delivering 1,000 welcome mails over SMTP
    python3 dev.py test    # the whole suite: ruff, mypy --strict, pytest

Each creates `.venv` beside this file on first use and installs the project into it with its
`dev` extra, then runs inside it. Nothing here is needed by users of the library.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".nilo-installed"


def ensure_venv() -> None:
    """Create `.venv` and install `.[dev]` into it, again whenever pyproject.toml changed."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and PY.exists():
        return
    if not PY.exists():
        print("creating .venv", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing nilo-job[dev] into .venv", flush=True)
    pip = [str(PY), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[dev]"], check=True)
    STAMP.write_text(wanted)


def run(*cmd: str) -> int:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] not in {"demo", "test"}:
        print(__doc__)
        return 2
    ensure_venv()
    if argv[0] == "demo":
        return run(str(PY), "-m", "demo", *argv[1:])
    for step in (
        (str(PY), "-m", "ruff", "check", "."),
        (str(PY), "-m", "ruff", "format", "--check", "."),
        (str(PY), "-m", "mypy"),
    ):
        if code := run(*step):
            return code
    return run(str(PY), "-m", "pytest", *argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
