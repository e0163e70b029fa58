"""A table of rows, as the overview and the rows page list them.

The columns follow the state: a queued row's due time and last error, a running row's lease and
worker, a dead row's error and death, a done row's finish and run time. Each row links to its own
page. For an operator, a box per row selects it for the bulk form (`form="bulk"`, so the table
need not sit inside that form, and each row's own Retry or Cancel form stays a form of its own).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from .._base.values import Row
from ._render import Chrome, button, esc, href, scroll_box, when

PAYLOAD_CHARS = 160
"""The most characters of a payload's JSON a table shows."""

SELECTABLE = ("queued", "dead", "done")
"""The states a bulk action applies to (retry: dead; cancel: queued; delete: dead and done)."""


def payload_text(row: Row, limit: int | None = PAYLOAD_CHARS) -> str:
    """A row's payload as compact JSON, cut to `limit` characters (None: whole); escaped.

    The cut falls between JSON tokens, so a number, `true`, `false` or `null` is never cut; only
    a string longer than the room left is cut inside, and never inside an escape (`\\n`). A line
    may break after each `,` and `:` (a `<wbr>`), so a long payload wraps between its members.
    A payload a list read only the start of (`row.payload_cut`: that start, as text) is shown
    from that text, and always ends in "…".
    """
    if row.unreadable is not None and row.payload is None:
        return '<span class="unreadable">cannot be read</span>'
    if row.payload_cut and isinstance(row.payload, str):
        text = row.payload  # the start of the stored JSON, as it is
    else:
        text = json.dumps(row.payload, ensure_ascii=False, separators=(",", ":"))
    tokens = _TOKEN.findall(text)
    cut = row.payload_cut
    if limit is not None and len(text) > limit:
        tokens, cut = _cut(tokens, limit), True
    html = "".join(esc(token) + ("<wbr>" if token in (",", ":") else "") for token in tokens)
    return f'<code class="json">{html}{"…" if cut else ""}</code>'


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[^",:{}\[\]]+|.', re.S)
"""A token of compact JSON: a string (or, at the end of JSON cut short, the start of one), a
number or literal, or one punctuation character."""
_UNIT = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|.", re.S)
"""One character of a JSON string as written: an escape, or a character."""
STRING_LEAST = 8
"""The fewest characters of a string worth showing before the cut; with less room the cut
falls before the string."""


def _cut(tokens: list[str], limit: int) -> list[str]:
    """The tokens that fit in `limit` characters; the string that does not fit, cut inside
    when at least `STRING_LEAST` characters are left for it."""
    kept: list[str] = []
    used = 0
    for token in tokens:
        if used + len(token) <= limit:
            kept.append(token)
            used += len(token)
            continue
        if token.startswith('"') and limit - used >= STRING_LEAST:
            part = ""
            for unit in _UNIT.findall(token):
                if len(part) + len(unit) > limit - used:
                    break
                part += unit
            kept.append(part)
        break
    return kept


def error_cell(chrome: Chrome, row: Row, *, link: bool = True) -> str:
    """The last failure of `row`: its name (a link to the rows that failed with it), then, when
    the dashboard shows payloads, its message and its traceback folded away."""
    if not row.error:
        return ""
    name = esc(row.error)
    if link and row.state in ("dead", "queued"):
        target = href(
            chrome.base, "/rows", {"state": row.state, "kind": row.kind, "error": row.error}
        )
        name = f'<a href="{target}" class="error-link">{name}</a>'
    parts = [f'<span class="error">{name}</span>']
    if not chrome.payloads:
        return parts[0]
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
    """(text, class) of each column after id and kind; the unique key, the worker and the
    payload only when the dashboard shows payloads."""
    if state == "queued":
        heads = [("due", ""), ("attempts so far", "n"), ("last error", "")]
        heads += [("unique key", "")] if chrome.payloads else []
    elif state == "running":
        heads = [("due", ""), ("attempt", "n"), ("lease until", "")]
        heads += [("worker", "")] if chrome.payloads else []
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
        queued = [
            f"<td>{due}</td>",
            f'<td class="n">{row.attempts}</td>',
            f"<td>{error_cell(chrome, row)}</td>",
        ]
        return queued + ([f"<td>{esc(row.unique_key or '')}</td>"] if chrome.payloads else [])
    if state == "running":
        running = [
            f"<td>{due}</td>",
            f'<td class="n">{row.attempts}</td>',
            f"<td>{when(row.lease_until, now)}</td>",
        ]
        return running + ([f"<td>{esc(row.worker or '')}</td>"] if chrome.payloads else [])
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
        The table in its sideways-scrolling box (`scroll_box`), as text.
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
        head += '<th class="act" data-name="actions"></th>'
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
    table = (
        f'<table class="rows"><thead><tr>{head}</tr></thead><tbody>{"".join(lines)}</tbody></table>'
    )
    return scroll_box(table, f"{state or 'all'} rows")
