"""Fixtures of the command-line tests."""

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database's URL: a SQLite file not made yet, or a PostgreSQL database with its
    empty table (`pg_url`)."""
    if request.param == "postgres":
        pg_url: str = request.getfixturevalue("pg_url")
        return pg_url
    return f"sqlite:///{tmp_path}/q.db"
