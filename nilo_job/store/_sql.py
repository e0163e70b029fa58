"""Named SQL statements from a store's `.sql` file, loaded once with importlib.resources."""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load(filename: str) -> dict[str, str]:
    """The statements of `nilo_job/store/<filename>`, by the name in their `-- name:` line."""
    text = resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}
