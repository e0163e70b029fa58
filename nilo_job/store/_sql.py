"""Named SQL statements from a store's `.sql` file, loaded once with importlib.resources."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from .._errors import StoreUnavailable
from .contract import Died, Done, End, Released, Retrying, RowView, check_state

COLUMNS = frozenset(
    {"id", "kind", "payload", "state", "run_at", "lease_until", "attempts", "unique_key", "error",
     "detail", "died_at"}
)  # fmt: skip
"""The columns of `nilo_jobs` this version reads and writes."""

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


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
            end.release_key,
            end.id,
            end.attempts,
        )
    if isinstance(end, Died):
        return "died", (end.died_at, end.error, end.detail, end.id, end.attempts)
    if isinstance(end, Released):
        return "released", (end.run_at, end.id, end.attempts)
    raise TypeError(f"not an end: {end!r}")


def check_columns(where: str, found: set[str]) -> None:
    """Refuse a missing `nilo_jobs` table, or one without this version's columns.

    Raises:
        StoreUnavailable: with a sentence saying which, and what to do.
    """
    if not found:
        raise StoreUnavailable(
            f"there is no nilo_jobs table in {where}: call await table.create_missing() "
            "(or run `nilo-job migrate`) before serving"
        )
    if missing := COLUMNS - found:
        raise StoreUnavailable(
            f"the nilo_jobs table in {where} is not nilo-job's, or is from another version: "
            f"it lacks {', '.join(sorted(missing))}"
        )


def rows_statement(state: str) -> str:
    """The name of the statement that lists rows in `state`.

    Raises:
        Refusal: `state` is not one a row can be in.
    """
    return f"rows_{check_state(state)}"


def row_view(r: Any) -> RowView:
    """A `RowView` from the columns of a `rows_*` statement, payload as text or bytes."""
    payload = r[3] if isinstance(r[3], bytes) else str(r[3]).encode()
    return RowView(r[0], r[1], r[2], payload, r[4], r[5], r[6], r[7], r[8], r[9], r[10])


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
