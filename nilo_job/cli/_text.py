"""How the `nilo-job` commands print: aligned tables, UTC times, one-line JSON, and the options
and argument types every operator command shares.

Text from a row (a kind, a message, a traceback, a key, a payload) is printed `printable`: a
row can neither drive the operator's terminal nor reorder what it shows. `--json` prints the
exact values.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from .._base import bounds
from .._base.text import printable
from .._base.text import utc_exact as utc_exact  # the commands' exact times, shared

ROW_ID = click.IntRange(bounds.ROW_ID.least, bounds.ROW_ID.most)  # 64-bit on every store
WORKERS = click.IntRange(bounds.WORKERS.least, bounds.WORKERS.most)
MS = click.IntRange(bounds.MS.least, bounds.MS.most)  # a duration: at most ten years
TARGET_HELP = (
    "TARGET is a database URL (sqlite:///app.db, postgresql://…, mariadb://… or mysql://…) or "
    "module:attr."
)
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


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
    """Microseconds since the epoch as `YYYY-MM-DD HH:MM:SS` in UTC; a moment no date holds
    (before the year 1 or after 9999: a row another program wrote) as `N µs`."""
    try:
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
    except OverflowError:
        return f"{us} µs"
    return moment.strftime("%Y-%m-%d %H:%M:%S")


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
