"""The MariaDB/MySQL store's statements with their parameters, as asyncmy is handed them: a list
spelled out as one parameter per value, a row to insert, a keyset page (`find`) and its count.

asyncmy quotes every parameter on the client (`%s`, `%(name)s`), as PyMySQL does; it takes no
list for `IN (…)`, so `spelled` writes one parameter per value into the statement's text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from .. import _sql
from .._sql import _DONE_COLUMNS, _LIVE_COLUMNS, _ORDER
from ..contract import LISTED_CHARS, NEWEST_FIRST, Done, NewRow, Where, check_state

SQL = _sql.load("nilo_job.store.mysql")


@functools.lru_cache(maxsize=256)
def _spell(query: str, name: str, n: int) -> str:
    marks = ", ".join(f"%({name}_{i})s" for i in range(n))
    return query.replace(f"%({name})s", marks)


def spelled(
    query: str, params: Mapping[str, object], **lists: Sequence[object]
) -> tuple[str, dict[str, object]]:
    """`query` with each `%(name)s` of `lists` written as one parameter per value of that list
    (`%(name_0)s, %(name_1)s, …`), and the parameters that go with it. A list must not be
    empty (`IN ()` is no SQL): the caller answers at once for an empty one."""
    out = dict(params)
    for name, values in lists.items():
        query = _spell(query, name, len(values))
        out.update({f"{name}_{i}": value for i, value in enumerate(values)})
    return query, out


@functools.lru_cache(maxsize=64)
def claim_statement(kinds: int, due_from: bool = False) -> str:
    """The first step of a claim of `kinds` kinds (the ids of the rows it may take, locking
    nothing): a `claim_due` and a `claim_lease` arm for each, in one UNION ALL, each kind its
    parameter `kind_i` (see `claim_params`); with `due_from`, a `claim_due_from` arm for each
    and no other."""
    names = ("claim_due_from",) if due_from else ("claim_due", "claim_lease")
    arms = []
    for i in range(kinds):
        for arm in names:
            arms.append(SQL[arm].replace("%(kind)s", f"%(kind_{i})s"))
    return "\nUNION ALL\n".join(arms)


def claim_params(
    kinds: Sequence[str], now_us: int, limit: int, due_from_us: int | None = None
) -> dict[str, object]:
    """The parameters of `claim_statement(len(kinds), due_from_us is not None)`."""
    params: dict[str, object] = {"now": now_us, "limit": limit, "from": due_from_us}
    params.update({f"kind_{i}": kind for i, kind in enumerate(kinds)})
    return params


@functools.lru_cache(maxsize=64)
def _keep_many(n: int) -> str:
    rows = [
        f"SELECT %(id_{i})s AS id, %(started_{i})s AS started_at, %(finished_{i})s AS "
        f"finished_at, %(result_{i})s AS result"
        if i == 0
        else f"SELECT %(id_{i})s, %(started_{i})s, %(finished_{i})s, %(result_{i})s"
        for i in range(n)
    ]
    return SQL["keep_many"].replace("{ended}", " UNION ALL ".join(rows))


def keep_many(ends: Sequence[Done]) -> tuple[str, dict[str, object]]:
    """The `keep_many` statement for `ends` (done ends kept as history), and its parameters."""
    params: dict[str, object] = {}
    for i, end in enumerate(ends):
        params[f"id_{i}"] = end.id
        params[f"started_{i}"] = end.started_at
        params[f"finished_{i}"] = end.finished_at
        params[f"result_{i}"] = None if end.result is None else end.result.decode()
    return _keep_many(len(ends)), params


@functools.lru_cache(maxsize=64)
def _insert_many(n: int) -> str:
    values = "(" + ", ".join(["%s"] * 11) + ")"
    head, _, _ = SQL["push"].rstrip(";").rpartition("VALUES")
    return f"{head}VALUES {', '.join([values] * n)} RETURNING id"


def insert_many(rows: Sequence[NewRow]) -> tuple[str, list[object]]:
    """One INSERT of `rows` (none with a unique key), which answers their ids in order
    (`RETURNING`: MariaDB 10.5 or newer, not MySQL), and its parameters."""
    params: list[object] = []
    for row in rows:
        params.extend(row_params(row))
    return _insert_many(len(rows)), params


def row_params(row: NewRow) -> tuple[object, ...]:
    """The parameters of the `push` statement for `row`: queued, or already claimed by its
    pusher (`lease_until`)."""
    claimed = row.lease_until is not None
    return (
        row.kind,
        row.payload.decode(),
        "running" if claimed else "queued",
        row.run_at,
        1 if claimed else 0,
        row.unique_key,
        row.lease_until,
        row.pushed_at,
        row.pushed_at if claimed else None,
        row.worker if claimed else None,
        row.trace,
    )


_LISTED = f"left(payload, {LISTED_CHARS + 1})"  # each payload's start (`contract.listed`)


def find_statement(
    where: Where, after: tuple[int, int] | None, limit: int
) -> tuple[str, list[object]]:
    """The SELECT of a keyset page of `where`'s rows (see `Store.find`), and its parameters.

    The page's start is written as `order <= v AND (order < v OR id < i)` (for the states listed
    newest first; the mirror for the others) rather than as a row comparison, which MariaDB
    does not read as a range of an index: so the page after 50,000 rows is a seek.

    Raises:
        Refusal: `where` names no state, or one a row cannot be in.
    """
    state = check_state(where.state or "")
    columns = (_DONE_COLUMNS if state == "done" else _LIVE_COLUMNS).format(payload=_LISTED)
    body, params = _matching(where, state)
    order = _ORDER[state]
    newest_first = state in NEWEST_FIRST
    if after is not None:
        near, far = ("<=", "<") if newest_first else (">=", ">")
        body += f" AND {order} {near} %s AND ({order} {far} %s OR id {far} %s)"
        params.extend([after[0], after[0], after[1]])
    direction = " DESC" if newest_first else ""
    sql = f"SELECT {columns} {body} ORDER BY {order}{direction}, id{direction} LIMIT %s"
    return sql, [*params, limit]


def count_statement(where: Where) -> tuple[str, list[object]]:
    """The SELECT count(*) of `where`'s rows, and its parameters (as for `find_statement`)."""
    body, params = _matching(where, check_state(where.state or ""))
    return f"SELECT count(*) {body}", params


def _matching(where: Where, state: str) -> tuple[str, list[object]]:
    """`FROM … WHERE …` of the rows of `state` that match `where`, and its parameters: only
    the filters that are set."""
    params: list[object] = [] if state == "done" else [state]
    body = (
        "FROM nilo_jobs_done WHERE TRUE" if state == "done" else "FROM nilo_jobs WHERE state = %s"
    )
    for column, value in (("kind", where.kind), ("error", where.error), ("unique_key", where.key)):
        if value is not None:
            body += f" AND {column} = %s"
            params.append(value)
    if where.ids is not None:
        if where.ids:
            body += f" AND id IN ({', '.join(['%s'] * len(where.ids))})"
            params.extend(where.ids)
        else:
            body += " AND FALSE"
    return body, params


_MISSING = re.compile(r"Table '(?:[^'.]*\.)?([^'.]+)' doesn't exist")


def missing_table(message: str) -> str | None:
    """The table the server said is missing (`Table 'shop.nilo_jobs_done' doesn't exist`), or
    None when its words do not say (a server speaking another language)."""
    found = _MISSING.search(message)
    return None if found is None else found[1]
