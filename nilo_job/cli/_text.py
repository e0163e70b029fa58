"""How the `nilo-job` commands print: aligned tables, UTC times, one-line JSON, and the options
and argument types every operator command shares.

Text from a row (a kind, a message, a traceback, a key, a payload) may hold anything its writer
put there. Printed as text, every control character in it (C0, DEL, C1) and every character that
reorders text (bidirectional overrides and isolates) is written as an escape (`\x1b`, `\u202e`),
so that a row can neither drive the operator's terminal nor forge or reorder what it shows.
`--json` prints the exact values (JSON escapes C0 itself).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import click

ROW_ID = click.IntRange(1, 2**63 - 1)  # a row id is a 64-bit integer on every store
TARGET_HELP = "TARGET is a database URL (sqlite:///app.db, postgresql://…) or module:attr."
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with every control or reordering character escaped (`\x1b`, `\u202e`); with
    `lines`, its newlines are kept as line breaks."""
    if lines:
        return "\n".join(printable(line) for line in text.split("\n"))
    return _UNPRINTABLE.sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None) -> str:
    """`rows` as text in aligned columns, two spaces apart, under `header` when given; each
    cell `printable`."""
    lines = [list(header)] if header is not None else []
    lines += [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def utc(us: int) -> str:
    """Microseconds since the epoch as `YYYY-MM-DD HH:MM:SS` in UTC."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def utc_exact(us: int | None) -> str:
    """Microseconds since the epoch as `YYYY-MM-DD HH:MM:SS.ffffff UTC`, or "-" for None."""
    if us is None:
        return "-"
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def compact(value: Any, width: int = 60) -> str:
    """`value` as one line of JSON, cut to `width` characters with an ellipsis."""
    return cut(one_line(value), width)


def one_line(value: Any) -> str:
    """`value` as one line of JSON, whole."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def cut(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def print_json(value: Any) -> None:
    """`value` as one line of JSON on stdout."""
    click.echo(json.dumps(value, ensure_ascii=False))


def count_of(n: int, one: str, many: str | None = None) -> str:
    """`n` and the noun: "1 job", "3 jobs"."""
    return f"{n} {one if n == 1 else (many or one + 's')}"
