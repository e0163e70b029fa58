"""The README's example runs as written (examples/quickstart.py)."""

from __future__ import annotations

from pathlib import Path

from examples.quickstart import main


async def test_the_quickstart_delivers_the_welcome_and_keeps_tomorrows_reminder(
    tmp_path: Path,
) -> None:
    assert await main(tmp_path) == ["Welcome -> a@b.c"]
