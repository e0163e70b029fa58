"""Setting up: the README's demo installs only what it needs, and `.[all]` is an extra."""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

import dev

DEV_TOOLS = {"mypy", "ruff", "pytest", "selenium", "hypothesis", "django", "flask", "alembic"}


def requirements(extra: str) -> set[str]:
    """The distributions `.[extra]` installs besides the core, following nilo-job[...] within."""
    extras = tomllib.loads((dev.ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names: set[str] = set()
    for requirement in extras[extra]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement)
        assert name is not None
        if name.group(0) == "nilo-job":
            inner = requirement[requirement.index("[") + 1 : requirement.index("]")]
            for each in inner.split(","):
                names |= requirements(each.strip())
        else:
            names.add(name.group(0).lower())
    return names


def test_the_demo_installs_the_demo_extra_and_no_development_tool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed: list[str] = []

    def ensure_venv(env: Path, python: str | None = None, extra: str = "dev") -> Path:
        installed.append(extra)
        return env / "bin" / "python"

    monkeypatch.setattr(dev, "ensure_venv", ensure_venv)
    monkeypatch.setattr(dev, "run", lambda *cmd, env=None: 0)
    assert dev.main(["demo"]) == 0
    assert installed == ["demo"]
    assert requirements("demo") == {"aiosmtpd", "starlette", "uvicorn"}
    assert not requirements("demo") & DEV_TOOLS
    assert requirements("dev") >= DEV_TOOLS


def test_a_venv_made_for_the_tests_serves_the_demo_but_not_the_other_way(tmp_path: Path) -> None:
    python = dev.bin_of(tmp_path) / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    digest = hashlib.sha256((dev.ROOT / "pyproject.toml").read_bytes()).hexdigest()
    (tmp_path / ".nilo-installed").write_text(f"{digest} dev")
    assert dev.ensure_venv(tmp_path, extra="demo") == python  # nothing to install
    assert dev.ensure_venv(tmp_path, extra="dev") == python
    (tmp_path / ".nilo-installed").write_text(f"{digest} demo")
    assert dev.ensure_venv(tmp_path, extra="demo") == python
    # The tests need more than the demo installed: it installs (and this stand-in python cannot).
    with pytest.raises(PermissionError, match="Permission denied"):
        dev.ensure_venv(tmp_path, extra="dev")


def test_the_all_extra_installs_every_integration() -> None:
    metadata = importlib.metadata.metadata("nilo-job")
    assert "all" in metadata.get_all("Provides-Extra", [])
    assert requirements("all") == (
        requirements("postgres")
        | requirements("mysql")
        | requirements("redis")
        | requirements("sqlalchemy")
        | requirements("web")
        | requirements("metrics")
        | requirements("fast")
    )
