"""A failure as the row keeps it: the exception's name, its message and its traceback, as text
every store can hold.

A failed attempt is recorded whatever its exception holds. Text a store cannot keep (a NUL
character, which PostgreSQL refuses in text; a lone surrogate, which is not UTF-8, as in
`os.fsdecode(b"caf\\xe9.txt")`) is escaped (`\\x00`, `\\udce9`) and the text says so at its end,
so that no end is ever refused by the store and no row runs again for want of one. Each part is
bounded: the name to 200 characters, the message to 2,000, the traceback to 10,000 (its first
and last lines, where the call and the raise are).
"""

from __future__ import annotations

import os
import traceback as _traceback
from dataclasses import dataclass
from types import TracebackType

NAME_CHARS = 200
MESSAGE_CHARS = 2_000
TRACEBACK_CHARS = 10_000
ESCAPED = " [nilo-job: characters no store can keep were escaped]"
_OURS = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_traceback(error: BaseException) -> TracebackType | None:
    """`error`'s traceback from the first frame that is not nilo-job's own (the frames that
    called `run` say nothing about the failure); the whole of it when every frame is ours (a
    timeout, raised by the queue itself)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OURS):
        tb = tb.tb_next
    return error.__traceback__ if tb is None else tb


@dataclass(frozen=True, slots=True)
class Failure:
    """What a row keeps of one failed attempt: `name` (the exception's class name), `message`
    (its `str`) and `traceback` (as Python prints it)."""

    name: str
    message: str
    traceback: str


def storable(text: str, most: int) -> str:
    """`text` cut to `most` characters, with what no store can keep escaped and said so."""
    if len(text) > most:
        text = text[: most - 1] + "…"
    if "\x00" not in text and text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        clean = text.encode("utf-8", "backslashreplace").decode("utf-8")
    else:
        clean = text
    clean = clean.replace("\x00", "\\x00")
    return clean if clean == text else clean + ESCAPED


def in_ascii(text: str) -> str:
    """`text` in printable ASCII: every other character escaped (`\xe9`, `\x00`)."""
    return text.encode("ascii", "backslashreplace").decode().replace("\x00", "\\x00")


def describe(error: BaseException) -> Failure:
    """The failure `error` is, as storable text; never raises, whatever the exception does."""
    name = storable(type(error).__name__, NAME_CHARS)
    try:
        message = str(error)
    except Exception:
        message = f"<{type(error).__name__}: its message could not be read>"
    try:
        lines = _traceback.format_exception(type(error), error, user_traceback(error))
    except Exception:
        lines = [f"{name}: <its traceback could not be read>\n"]
    text = "".join(lines)
    if len(text) > TRACEBACK_CHARS:
        head, tail = TRACEBACK_CHARS // 5, TRACEBACK_CHARS - TRACEBACK_CHARS // 5 - 60
        cut = len(text) - head - tail
        text = f"{text[:head]}\n… ({cut:,} characters cut) …\n{text[-tail:]}"
    return Failure(
        name,
        storable(message, MESSAGE_CHARS),
        storable(text, TRACEBACK_CHARS + len(ESCAPED)),
    )
