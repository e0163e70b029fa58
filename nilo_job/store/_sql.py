"""Named SQL statements from a store's `.sql` file, loaded once with importlib.resources."""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any

from .contract import Claimed, DeadRow, Died, Done, End, Released, Retrying, RowView, check_state

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@functools.cache
def load(filename: str) -> dict[str, str]:
    """The statements of `nilo_job/store/<filename>`, by the name in their `-- name:` line."""
    text = resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def end_statement(end: End) -> tuple[str, tuple[object, ...]]:
    """The name of the statement that applies `end`, and its positional parameters.

    Every SQL store names these statements alike (`done`, `retrying`, `died`, `released`), each
    fenced by `id = ? AND state = 'running' AND attempts = ?`.
    """
    if isinstance(end, Done):
        return "done", (end.id, end.attempts)
    if isinstance(end, Retrying):
        return "retrying", (
            end.run_at,
            end.error,
            end.detail,
            end.traceback,
            end.release_key,
            end.id,
            end.attempts,
        )
    if isinstance(end, Died):
        return "died", (end.died_at, end.error, end.detail, end.traceback, end.id, end.attempts)
    if isinstance(end, Released):
        return "released", (end.run_at, end.id, end.attempts)
    raise TypeError(f"not an end: {end!r}")


def rows_statement(state: str) -> str:
    """The name of the statement that lists rows in `state`.

    Raises:
        Refusal: `state` is not one a row can be in.
    """
    return f"rows_{check_state(state)}"


def row_view(r: Any) -> RowView:
    """A `RowView` from the columns of a `rows_*` statement, whatever they hold.

    A row some other program wrote may hold a BLOB where text belongs, text that is not UTF-8
    (read with `surrogateescape`), or text where a number belongs: each column is shown as
    best it can be (never raising), and `unreadable` says what was wrong.
    """
    problems: list[str] = []
    payload = _payload_bytes(r[3], problems)
    return RowView(
        id=_number(r[0], "id", problems) or 0,
        kind=_text(r[1], "kind", problems) or "",
        state=_text(r[2], "state", problems) or "",
        payload=payload,
        run_at=_number(r[4], "run_at", problems) or 0,
        attempts=_number(r[5], "attempts", problems) or 0,
        unique_key=_text(r[6], "unique_key", problems),
        lease_until=_number(r[7], "lease_until", problems),
        error=_text(r[8], "error", problems),
        died_at=_number(r[9], "died_at", problems),
        detail=_text(r[10], "detail", problems),
        traceback=_text(r[11], "traceback", problems),
        unreadable="; ".join(problems) or None,
    )


def dead_row(r: Any) -> DeadRow:
    """A `DeadRow` from the columns of a `dead_ones` statement, whatever they hold (as for
    `row_view`: text that cannot be shown as it is, is shown as best it can be)."""
    problems: list[str] = []
    return DeadRow(
        id=_number(r[0], "id", problems) or 0,
        kind=_text(r[1], "kind", problems) or "",
        error=_text(r[2], "error", problems) or "",
        attempts=_number(r[3], "attempts", problems) or 0,
        payload=_payload_bytes(r[4], problems),
        died_at=_number(r[5], "died_at", problems) or 0,
        detail=_text(r[6], "detail", problems) or "",
        traceback=_text(r[7], "traceback", problems) or "",
    )


def claimed_row(r: Any) -> Claimed:
    """A `Claimed` from the columns a claim returns (id, kind, payload, attempts, run_at,
    unique_key); a row that cannot be read as nilo-job writes it says why in `unreadable`."""
    payload, run_at = r[2], r[4]
    if type(payload) is str and type(run_at) is int:
        try:
            return Claimed(r[0], r[1], payload.encode(), r[3], run_at, r[5])
        except UnicodeEncodeError:
            pass  # not UTF-8 (read with surrogateescape): said below
    problems: list[str] = []
    data = _payload_bytes(payload, problems)
    due = _number(run_at, "run_at", problems)
    key = r[5] if r[5] is None or isinstance(r[5], str) else None
    return Claimed(r[0], r[1], data, r[3], due or 0, key, "; ".join(problems) or None)


def _payload_bytes(value: object, problems: list[str]) -> bytes:
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogateescape")
        if not _utf8(value):
            problems.append("its payload is not UTF-8 text")
        return data
    if isinstance(value, bytes):
        problems.append("its payload is stored as a BLOB, not text")
        return value
    problems.append(f"its payload is stored as {type(value).__name__}, not text")
    return str(value).encode()


def _utf8(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(value: object, name: str, problems: list[str]) -> str | None:
    if value is None or (isinstance(value, str) and _utf8(value)):
        return value
    if isinstance(value, str):
        problems.append(f"{name} is not UTF-8 text")
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if isinstance(value, bytes):
        problems.append(f"{name} is stored as a BLOB")
        return value.decode("utf-8", "replace")
    problems.append(f"{name} is stored as {type(value).__name__}")
    return str(value)


def _number(value: object, name: str, problems: list[str]) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    problems.append(f"{name} is not a whole number ({_text(str(value), name, [])!r})")
    return None


def unwrap_django(tx: object) -> object:
    """Django's connection object (`django.db.connection`, `connections[alias]`) as the DB-API
    connection under it, which push_in writes through; anything else as it is.

    Raises:
        Refusal: Django's connection outside `transaction.atomic()` (the row would commit on
            its own).
    """
    if not (
        type(tx).__module__.startswith("django.")
        and hasattr(tx, "ensure_connection")
        and hasattr(tx, "in_atomic_block")
    ):
        return tx
    if not tx.in_atomic_block:
        from .._errors import Refusal

        raise Refusal(
            "push_in got Django's connection outside transaction.atomic(), so the row would "
            "commit on its own: push inside `with transaction.atomic():`"
        )
    tx.ensure_connection()
    return tx.connection  # type: ignore[attr-defined]
