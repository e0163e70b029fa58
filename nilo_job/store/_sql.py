"""What the two SQL stores share: their named statements (`load`, from a package's
`queries.sql`), the parameters of an end and of a keep, the statements of `find` and `count`, and
reading a stored row back into the values the queue uses; a worker registry entry written and
read back."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

from .contract import (
    DEATHS_KEPT_US,
    LISTED_CHARS,
    NEWEST_FIRST,
    Attempt,
    Claimed,
    DeadRow,
    Died,
    Done,
    End,
    Released,
    Retrying,
    RowView,
    Snoozed,
    Where,
    WorkerEntry,
    check_state,
    outcome_of,
)

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@functools.cache
def load(package: str) -> dict[str, str]:
    """The statements of a store package's `queries.sql`, by the name in their `-- name:` line."""
    text = resources.files(package).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def end_statement(end: End) -> tuple[str, tuple[object, ...]]:
    """The name of the statement that applies `end`, and its positional parameters.

    Every SQL store names these statements alike (`done`, `retrying`, `died`, `released`,
    `snoozed`), each fenced by `id = ? AND state = 'running' AND attempts = ?`.
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
    if isinstance(end, Snoozed):
        return "snoozed", (end.run_at, end.release_key, end.id, end.attempts)
    raise TypeError(f"not an end: {end!r}")


def attempt_values(end: End) -> dict[str, object] | None:
    """The parameters of the `attempt` statement, which records the attempt `end` closes
    (ended_at, outcome, error, detail, traceback, id, attempts), or None when it records none:
    no `ended_at`, or a `Done` (a done attempt is read from the done row itself)."""
    if end.ended_at is None or isinstance(end, Done):
        return None
    failed = end if isinstance(end, Retrying | Died) else None
    return {
        "ended_at": end.ended_at,
        "outcome": outcome_of(end),
        "error": None if failed is None else failed.error,
        "detail": None if failed is None else failed.detail,
        "traceback": None if failed is None else failed.traceback or None,
        "id": end.id,
        "attempts": end.attempts,
    }


def lost_values(end: End) -> dict[str, object] | None:
    """The parameters of the `lost` statement, which records the attempt another worker lost
    with its lease (`End.lost_from`): worker, id, attempts; None for a row not taken back."""
    if end.lost_from is None or end.ended_at is None:
        return None
    return {"worker": end.lost_from or None, "id": end.id, "attempts": end.attempts}


def death_values(end: Died) -> dict[str, object]:
    """The parameters of the `death` statement, which counts `end` in its minute: id, minute,
    and the oldest minute still counted (`DEATHS_KEPT_US` before it)."""
    minute = end.died_at - end.died_at % 60_000_000
    return {"id": end.id, "minute": minute, "oldest": minute - DEATHS_KEPT_US}


def attempt_of(r: Any) -> Attempt:
    """An `Attempt` from the columns of an `attempts_of` statement: attempt, outcome,
    started_at, ended_at, worker, error, detail, traceback."""
    return Attempt(
        attempt=int(r[0]),
        outcome=str(r[1]),
        started_at=None if r[2] is None else int(r[2]),
        ended_at=int(r[3]),
        worker=None if r[4] is None else str(r[4]),
        error=None if r[5] is None else str(r[5]),
        message=None if r[6] is None else str(r[6]),
        traceback=None if r[7] is None else str(r[7]),
    )


def keep_values(end: Done) -> tuple[object, ...]:
    """The parameters of the `keep` statement, which copies a done row into the history:
    started_at, finished_at, result, id, attempts."""
    result = None if end.result is None else end.result.decode()
    return (end.started_at, end.finished_at, result, end.id, end.attempts)


_LIVE_COLUMNS = (
    "id, kind, state, {payload}, run_at, attempts, unique_key, lease_until, error, died_at, "
    "detail, traceback, pushed_at, started_at, NULL, worker, NULL, snoozes"
)
_DONE_COLUMNS = (
    "id, kind, 'done', {payload}, run_at, attempts, unique_key, NULL, error, NULL, detail, NULL, "
    "pushed_at, started_at, finished_at, worker, result, NULL"
)
_ORDER = {"queued": "run_at", "running": "run_at", "dead": "died_at", "done": "finished_at"}


def find_statement(
    where: Where, after: tuple[int, int] | None, limit: int, *, postgres: bool
) -> tuple[str, list[object]]:
    """The SELECT of a keyset page of `where`'s rows (see `Store.find`), and its parameters.

    Only the filters that are set go in, and the page's start as a row comparison on the
    state's sort columns, so that each state's index both filters and orders: the page after
    50,000 rows is a seek, not a scan.

    Raises:
        Refusal: `where` names no state, or one a row cannot be in.
    """
    state = check_state(where.state or "")
    mark = "%s" if postgres else "?"
    payload = listed_payload(postgres=postgres)
    columns = (_DONE_COLUMNS if state == "done" else _LIVE_COLUMNS).format(payload=payload)
    body, params = _matching(where, state, postgres=postgres)
    order = _ORDER[state]
    newest_first = state in NEWEST_FIRST
    if after is not None:
        body += f" AND ({order}, id) {'<' if newest_first else '>'} ({mark}, {mark})"
        params.extend(after)
    direction = " DESC" if newest_first else ""
    sql = f"SELECT {columns} {body} ORDER BY {order}{direction}, id{direction} LIMIT {mark}"
    return sql, [*params, limit]


def listed_payload(*, postgres: bool) -> str:
    """The column a list reads of each payload: its first `LISTED_CHARS + 1` characters
    (`contract.listed`), so that a page reads a bounded amount whatever its rows carry. On
    SQLite, a payload another program stored as a number stays the number, for `row_view` to
    name."""
    most = LISTED_CHARS + 1
    if postgres:
        return f"left(payload::text, {most})"
    return (
        "CASE WHEN typeof(payload) IN ('text', 'blob') "
        f"THEN substr(payload, 1, {most}) ELSE payload END"
    )


def count_statement(where: Where, *, postgres: bool) -> tuple[str, list[object]]:
    """The SELECT count(*) of `where`'s rows, and its parameters (as for `find_statement`)."""
    body, params = _matching(where, check_state(where.state or ""), postgres=postgres)
    return f"SELECT count(*) {body}", params


def _matching(where: Where, state: str, *, postgres: bool) -> tuple[str, list[object]]:
    """`FROM … WHERE …` of the rows of `state` that match `where`, and its parameters: only
    the filters that are set."""
    mark = "%s" if postgres else "?"
    params: list[object] = [] if state == "done" else [state]
    body = (
        "FROM nilo_jobs_done WHERE TRUE"
        if state == "done"
        else f"FROM nilo_jobs WHERE state = {mark}"
    )
    for column, value in (("kind", where.kind), ("error", where.error), ("unique_key", where.key)):
        if value is not None:
            body += f" AND {column} = {mark}"
            params.append(value)
    if where.ids is not None:
        if postgres:
            body += " AND id = ANY(%s)"
            params.append(list(where.ids))
        else:
            body += " AND id IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(where.ids)))
    return body, params


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
        pushed_at=_number(r[12], "pushed_at", problems),
        started_at=_number(r[13], "started_at", problems),
        finished_at=_number(r[14], "finished_at", problems),
        worker=_text(r[15], "worker", problems),
        result=None if r[16] is None else _result_bytes(r[16], problems),
        snoozes=_number(r[17], "snoozes", problems),
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
    unique_key, snoozes, trace); a row that cannot be read as nilo-job writes it says why in
    `unreadable`. A trace that is not text is dropped: the row runs as one without a trace."""
    payload, run_at, snoozes, trace = r[2], r[4], r[6], r[7]
    if trace is not None and (type(trace) is not str or not _utf8(trace)):
        trace = None
    if type(payload) is str and type(run_at) is int and type(snoozes) is int:
        try:
            return Claimed(r[0], r[1], payload.encode(), r[3], run_at, r[5], None, snoozes, trace)
        except UnicodeEncodeError:
            pass  # not UTF-8 (read with surrogateescape): said below
    problems: list[str] = []
    data = _payload_bytes(payload, problems)
    due = _number(run_at, "run_at", problems)
    key = r[5] if r[5] is None or isinstance(r[5], str) else None
    count = _number(snoozes, "snoozes", problems) or 0
    unreadable = "; ".join(problems) or None
    return Claimed(r[0], r[1], data, r[3], due or 0, key, unreadable, count, trace)


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


def _result_bytes(value: object, problems: list[str]) -> bytes | None:
    if isinstance(value, str) and _utf8(value):
        return value.encode()
    problems.append("its result is not UTF-8 text")
    return None


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
        from .._base.errors import Refusal

        raise Refusal(
            "push_in got Django's connection outside transaction.atomic(), so the row would "
            "commit on its own: push inside `with transaction.atomic():`"
        )
    tx.ensure_connection()
    return tx.connection  # type: ignore[attr-defined]


def is_sqlalchemy(tx: object) -> bool:
    """Whether `tx` is one of SQLAlchemy's objects (a session, a connection, …)."""
    return type(tx).__module__.startswith("sqlalchemy.")


def is_async_sqlalchemy(tx: object) -> bool:
    """Whether `tx` is a SQLAlchemy `AsyncSession` or `AsyncConnection`."""
    if not is_sqlalchemy(tx):
        return False
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    return isinstance(tx, AsyncSession | AsyncConnection)


async def unwrap_sqlalchemy_async(tx: object) -> object:
    """A SQLAlchemy `AsyncSession` or `AsyncConnection` as the driver's connection under it
    (asyncmy's, for `mysql+asyncmy://`), which push_in writes through; anything else as it is.

    The session's or connection's transaction is begun first where it has none yet, as its own
    `execute` would begin it: the row is then in the transaction its `commit()` or `rollback()`
    ends.
    """
    if not is_async_sqlalchemy(tx):
        return tx
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    conn = await tx.connection() if isinstance(tx, AsyncSession) else tx
    assert isinstance(conn, AsyncConnection)
    if not conn.in_transaction():
        await conn.begin()
    return (await conn.get_raw_connection()).driver_connection


def unwrap_sqlalchemy(tx: object) -> object:
    """A SQLAlchemy `Session` or `Connection` as the driver's connection under it (PyMySQL's,
    for `mysql+pymysql://`), in its transaction as for `unwrap_sqlalchemy_async`; anything else
    (an `AsyncSession` too) as it is."""
    if not is_sqlalchemy(tx):
        return tx
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

    conn = tx.connection() if isinstance(tx, Session) else tx
    if not isinstance(conn, Connection):
        return tx
    if not conn.in_transaction():
        conn.begin()
    return conn.connection.driver_connection


def entry_params(entry: WorkerEntry) -> dict[str, object]:
    """The parameters of `worker_register` for `entry`: lists as JSON text."""
    return {
        "id": entry.id, "host": entry.host, "pid": entry.pid, "version": entry.version,
        "kinds": json.dumps(list(entry.kinds)), "workers": entry.workers,
        "beat_ms": entry.beat_ms, "started_at": entry.started_at, "beat_at": entry.beat_at,
        "running": json.dumps(list(entry.running)),
    }  # fmt: skip


def worker_entry(row: Any) -> WorkerEntry:
    """A row of `nilo_jobs_workers` (the columns `workers` selects) as a `WorkerEntry`; a list
    that does not read as JSON is read as empty."""
    return WorkerEntry(
        id=str(row[0]), host=str(row[1]), pid=int(row[2]), version=str(row[3]),
        kinds=tuple(str(kind) for kind in _json_list(row[4])), workers=int(row[5]),
        beat_ms=int(row[6]), started_at=int(row[7]), beat_at=int(row[8]),
        running=tuple(int(n) for n in _json_list(row[9]) if isinstance(n, int)),
    )  # fmt: skip


def _json_list(text: object) -> list[Any]:
    try:
        found = json.loads(text) if isinstance(text, str | bytes) else None
    except ValueError:
        return []
    return found if isinstance(found, list) else []
