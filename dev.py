#!/usr/bin/env python3
"""The project's two commands, runnable from a fresh clone with only Python 3.11+.

    python3 dev.py demo                 # the demo: a worker delivers 1,000 welcome mails (SMTP)
    python3 dev.py test                 # the whole suite: ruff, mypy --strict, pytest
    python3 dev.py test --all-pythons   # the same, then the suite without PostgreSQL on 3.12, 3.13

Each creates `.venv` beside this file on first use, installs the project into it and runs inside
it: `demo` installs only what the demo needs (the `demo` extra: the SMTP server), `test` every
tool the suite uses (the `dev` extra). Arguments after `test` go to pytest.

`--all-pythons` (what CI runs) also creates `.venv-3.12` and `.venv-3.13` with those interpreters
(`python3.12` on PATH, or pyenv's) and runs there every test that needs no PostgreSQL nor
MariaDB (`-m "not postgres and not mariadb"`: the Memory and SQLite tests, the frameworks, the
command line), then the PostgreSQL and MariaDB tests of what only installs on those versions
(the Django 6 Tasks backend). An interpreter that is missing is skipped with a sentence, except
in CI (CI=true), where it is a failure. Nothing here is needed by users of the library.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SUPPORTED = ("3.11", "3.12", "3.13")
"""The Pythons nilo-job supports (pyproject's classifiers). The whole suite runs in `.venv` on the
Python that runs this file (3.11 in CI); each other one gets `.venv-X.Y` and the suite without
PostgreSQL."""
ONLY_ELSEWHERE = ("tests/integrations/test_django_tasks.py",)
"""Test files whose PostgreSQL and MariaDB tests need what installs only on the other Pythons
(Django 6)."""


def bin_of(env: Path) -> Path:
    """The scripts folder of the virtual environment `env`."""
    return env / ("Scripts" if os.name == "nt" else "bin")


EXTRAS = {"demo": ("demo", "dev"), "dev": ("dev",)}
"""For each extra `ensure_venv` installs, the extras already installed that hold all it needs."""


def ensure_venv(env: Path, python: str | None = None, extra: str = "dev") -> Path:
    """Create `env` (with `python`, or this interpreter) and install `.[extra]` into it, again
    whenever pyproject.toml changed; return its python."""
    py = bin_of(env) / "python"
    stamp = env / ".nilo-installed"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and py.exists():
        kept = stamp.read_text().split()
        if len(kept) == 2 and kept[0] == digest and kept[1] in EXTRAS[extra]:
            return py
    if not py.exists():
        print(f"creating {env.name}", flush=True)
        if python is None:
            venv.EnvBuilder(with_pip=True).create(env)
        else:
            subprocess.run([python, "-m", "venv", str(env)], check=True)
    print(f"installing nilo-job[{extra}] into {env.name}", flush=True)
    pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[{extra}]"], check=True)
    stamp.write_text(f"{digest} {extra}")
    return py


def find_python(version: str) -> str | None:
    """The path of a Python `version` ("3.12"): `pythonX.Y` on PATH, else pyenv's newest X.Y.z."""
    roots = []
    if pyenv := shutil.which("pyenv"):
        found = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False)
        if found.returncode == 0 and found.stdout.strip():
            roots.append(Path(found.stdout.strip()))
    roots.append(Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")))
    candidates = [shutil.which(f"python{version}")]
    for root in roots:
        patches = {  # 3.12.1, 3.12.10, not 3.12.0rc1
            int(p.name[len(version) + 1 :]): p
            for p in (root / "versions").glob(f"{version}.*")
            if p.name[len(version) + 1 :].isdigit()
        }
        candidates += [str(patches[n] / "bin" / "python") for n in sorted(patches, reverse=True)]
    for candidate in candidates:
        if candidate and _is_version(candidate, version):
            return candidate
    return None


def _is_version(python: str, version: str) -> bool:
    # A pyenv shim answers to `python3.12` on PATH even when no 3.12 is installed: ask it.
    asked = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    return asked.returncode == 0 and asked.stdout.strip() == version


def run(*cmd: str, env: dict[str, str] | None = None) -> int:
    """Run `cmd` in the project folder and return its exit code, saying how long it took."""
    print("+", shlex.join(cmd), flush=True)
    started = time.monotonic()
    code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    print(f"  ({time.monotonic() - started:.0f} s, exit {code})", flush=True)
    return code


def test_elsewhere(version: str, pytest_args: list[str]) -> int:
    """The suite without PostgreSQL nor MariaDB on Python `version`, then the PostgreSQL and
    MariaDB tests of the files that run only there; 0 when it passed or (outside CI) there is no
    such Python."""
    python = find_python(version)
    if python is None:
        if os.environ.get("CI") == "true":
            print(f"FAILED: CI tests Python {version} and this machine has none", flush=True)
            return 1
        print(f"skipping Python {version}: no python{version} on PATH nor in pyenv", flush=True)
        return 0
    try:
        py = str(ensure_venv(ROOT / f".venv-{version}", python))
    except subprocess.CalledProcessError as error:
        print(f"FAILED: could not make .venv-{version} with {python}: {error}", flush=True)
        return 1
    if code := run(py, "-m", "pytest", "-m", "not postgres and not mariadb", *pytest_args):
        return code
    only = [name for name in ONLY_ELSEWHERE if (ROOT / name).exists()]
    if not only:
        return 0
    code = run(py, "-m", "pytest", "-m", "postgres or mariadb", *only, *pytest_args)
    return 0 if code == 5 else code  # 5: those files have no such test (none to run)


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] not in {"demo", "test"}:
        print(__doc__)
        return 2
    if argv[0] == "demo":
        py = str(ensure_venv(ROOT / ".venv", extra="demo"))
        return run(py, "-m", "demo", *argv[1:])
    py = str(ensure_venv(ROOT / ".venv"))
    all_pythons = "--all-pythons" in argv[1:]
    pytest_args = [arg for arg in argv[1:] if arg != "--all-pythons"]
    for step in (
        (py, "-m", "ruff", "check", "."),
        (py, "-m", "ruff", "format", "--check", "."),
        (py, "-m", "mypy"),
    ):
        if code := run(*step):
            return code
    failed = []
    if run(py, "-m", "pytest", *pytest_args):
        failed.append(f"Python {sys.version_info[0]}.{sys.version_info[1]} (.venv)")
    if all_pythons:
        here = f"{sys.version_info[0]}.{sys.version_info[1]}"
        for version in (v for v in SUPPORTED if v != here):
            if test_elsewhere(version, pytest_args):
                failed.append(f"Python {version} (.venv-{version})")
    if failed:
        print(f"FAILED on {', '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
