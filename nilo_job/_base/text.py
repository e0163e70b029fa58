"""Text from a row, shown to people: a kind, a message, a traceback, a key, a payload may hold
anything its writer put there.

`printable` writes every control character (C0, DEL, C1) and every character that reorders text
(bidirectional marks, overrides and isolates) as an escape (`\\x1b`, `\\u202e`). Text so shown can
neither drive a terminal (a window title, a clear screen), nor forge a log line (a newline), nor
reorder what a line appears to say. The command line's text output and the worker's log use it.

`count_of` says a count in words: "1 row", "2 rows"; `utc_exact` a moment to the µs.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with every control or reordering character escaped (`\\x1b`, `\\u202e`); with
    `lines`, its newlines are kept as line breaks (a traceback)."""
    if lines:
        return "\n".join(printable(line) for line in text.split("\n"))
    return _UNPRINTABLE.sub(_escape, text)


def count_of(n: int, one: str, many: str | None = None) -> str:
    """`n` and the noun, plural unless `n` is 1: "1 row", "3 rows" (`many` for a plural that
    is not `one` + "s")."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def utc_exact(us: int | None) -> str:
    """Microseconds since the epoch as `YYYY-MM-DD HH:MM:SS.ffffff UTC`, "-" for None, and a
    moment no date holds as `N µs`."""
    if us is None:
        return "-"
    try:
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
    except OverflowError:
        return f"{us} µs"
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def duration(ms: float | None) -> str:
    """A duration in milliseconds in words: "840 ms", "2.5 s", "3 min 4 s"; "–" for None."""
    if ms is None:
        return "–"
    if ms < 1_000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1_000:.1f} s"
    if ms < 3_600_000:
        return f"{int(ms // 60_000)} min {int(ms % 60_000 // 1_000)} s"
    return f"{int(ms // 3_600_000)} h {int(ms % 3_600_000 // 60_000)} min"
