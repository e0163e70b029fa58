"""A table of rows, as the overview and the rows page list them.

The columns follow the state: a queued row's due time and last error, a running row's lease and
worker, a dead row's error and death, a done row's finish and run time. Each row links to its own
page. For an operator, a box per row selects it for the bulk form (`form="bulk"`, so the table
need not sit inside that form, and each row's own Retry or Cancel form stays a form of its own).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .._types import Row
from ._render import Chrome, button, esc, href, when

PAYLOAD_CHARS = 160
"""The most characters of a payload's JSON a table shows."""

SELECTABLE = ("queued", "dead", "done")
"""The states a bulk action applies to (retry: dead; cancel: queued; delete: dead and done)."""


def payload_text(row: Row, limit: int | None = PAYLOAD_CHARS) -> str:
    """A row's payload as compact JSON, cut to `limit` characters (None: whole); escaped."""
    if row.unreadable is not None and row.payload is None:
        return '<span class="unreadable">cannot be read</span>'
    text = json.dumps(row.payload, ensure_ascii=False, separators=(",", ":"))
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    return f"<code>{esc(text)}</code>"


def error_cell(chrome: Chrome, row: Row, *, link: bool = True) -> str:
    """The last failure of `row`: its name (a link to the rows that failed with it), its message,
    and its traceback folded away."""
    if not row.error:
        return ""
    name = esc(row.error)
    if link and row.state in ("dead", "queued"):
        target = href(
            chrome.base, "/rows", {"state": row.state, "kind": row.kind, "error": row.error}
        )
        name = f'<a href="{target}" class="error-link">{name}</a>'
    parts = [f'<span class="error">{name}</span>']
    if row.message:
        parts.append(f'<span class="message">{esc(row.message)}</span>')
    if row.traceback:
        parts.append(
            f'<details class="traceback"><summary>traceback</summary>'
            f"<pre>{esc(row.traceback).replace(chr(10), '&#10;')}</pre></details>"
        )
    return " ".join(parts)


def _took(row: Row) -> str:
    if row.started_at is None or row.finished_at is None:
        return ""
    return f"{max(0, row.finished_at - row.started_at) / 1_000:,.0f} ms"


def _heads(state: str | None, chrome: Chrome) -> list[tuple[str, str]]:
    """(text, class) of each column after id and kind."""
    if state == "queued":
        heads = [("due", ""), ("attempts so far", "n"), ("last error", ""), ("unique key", "")]
    elif state == "running":
        heads = [("due", ""), ("attempt", "n"), ("lease until", ""), ("worker", "")]
    elif state == "dead":
        heads = [("error", ""), ("attempts", "n"), ("died", "")]
    elif state == "done":
        heads = [("finished", ""), ("attempts", "n"), ("took", "n")]
    else:
        heads = [("state", ""), ("when", ""), ("attempts", "n"), ("last error", "")]
    if chrome.payloads:
        heads.append(("payload", ""))
    return heads


def _cells(chrome: Chrome, row: Row, state: str | None) -> list[str]:
    now = chrome.now_us
    due = "" if row.unreadable and "run_at" in row.unreadable else when(row.run_at, now)
    if state == "queued":
        return [
            f"<td>{due}</td>",
            f'<td class="n">{row.attempts}</td>',
            f"<td>{error_cell(chrome, row)}</td>",
            f"<td>{esc(row.unique_key or '')}</td>",
        ]
    if state == "running":
        return [
            f"<td>{due}</td>",
            f'<td class="n">{row.attempts}</td>',
            f"<td>{when(row.lease_until, now)}</td>",
            f"<td>{esc(row.worker or '')}</td>",
        ]
    if state == "dead":
        return [
            f"<td>{error_cell(chrome, row)}</td>",
            f'<td class="n">{row.attempts}</td>',
            f"<td>{when(row.died_at, now)}</td>",
        ]
    if state == "done":
        return [
            f"<td>{when(row.finished_at, now)}</td>",
            f'<td class="n">{row.attempts}</td>',
            f'<td class="n">{_took(row)}</td>',
        ]
    moment = {"dead": row.died_at, "done": row.finished_at}.get(row.state)
    return [
        f'<td><span class="state {esc(row.state)}">{esc(row.state)}</span></td>',
        f"<td>{due if moment is None else when(moment, now)}</td>",
        f'<td class="n">{row.attempts}</td>',
        f"<td>{error_cell(chrome, row)}</td>",
    ]


def row_table(
    chrome: Chrome, rows: Sequence[Row], state: str | None, *, select: bool = False
) -> str:
    """The table of `rows`, all in `state` (None: of any state, with a state column).

    Args:
        chrome: the page around it (prefix, clock, mode, payloads).
        rows: the rows to list, in order.
        state: the state every row is in, or None.
        select: give each row a box for the bulk form (an operator's rows page).

    Returns:
        A `<div class="scroll"><table>` as text.
    """
    select = select and chrome.operator
    operator = chrome.operator
    heads = _heads(state, chrome)
    head = "".join(f'<th class="{c}">{t}</th>' if c else f"<th>{t}</th>" for t, c in heads)
    if select:
        box = (
            '<input type="checkbox" id="select-all" hidden '
            'aria-label="Select every row on this page">'
        )
        head = f'<th class="pick">{box}</th><th class="n">id</th><th>kind</th>{head}'
    else:
        head = f'<th class="n">id</th><th>kind</th>{head}'
    if operator:
        head += "<th></th>"
    lines = []
    for row in rows:
        kind = esc(row.kind)
        if row.unreadable is not None:
            kind += f' <span class="unreadable">unreadable: {esc(row.unreadable)}</span>'
        link = href(chrome.base, f"/rows/{row.id}")
        cells = [
            f'<td class="n"><a href="{link}">{row.id}</a></td>',
            f'<td class="kind">{kind}</td>',
        ]
        if select:
            pick = ""
            if row.state in SELECTABLE:
                pick = (
                    f'<input type="checkbox" name="id" value="{row.id}" form="bulk" '
                    f'id="pick-{row.id}" aria-label="Select row {row.id}">'
                )
            cells.insert(0, f'<td class="pick">{pick}</td>')
        cells += _cells(chrome, row, state)
        if chrome.payloads:
            cells.append(f'<td class="payload">{payload_text(row)}</td>')
        if operator:
            action = ""
            if row.state == "queued":
                action = button(chrome, f"/rows/{row.id}/cancel", "Cancel", f"cancel-{row.id}")
            elif row.state == "dead":
                action = button(chrome, f"/rows/{row.id}/retry", "Retry", f"retry-{row.id}")
            cells.append(f'<td class="act">{action}</td>')
        lines.append(f'<tr id="row-{row.id}">{"".join(cells)}</tr>')
    return (
        f'<div class="scroll"><table class="rows"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(lines)}</tbody></table></div>"
    )
