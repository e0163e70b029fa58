"""A row's own page: everything `jobs.row(id)` knows of it, and what an operator may do to it."""

from __future__ import annotations

import json

from .._base.values import Row
from ._render import Chrome, button, esc, href, when
from ._table import payload_text


def _field(name: str, key: str, value: str) -> str:
    return f'<div><dt>{name}</dt><dd id="f-{key}">{value}</dd></div>'


def _result(row: Row) -> str:
    text = json.dumps(row.result, ensure_ascii=False, indent=2)
    return f"<pre>{esc(text)}</pre>"


def render_row(chrome: Chrome, row: Row) -> str:
    """The row page's main part, as HTML, with its attempts as a timeline. The payload, a done
    row's result, the unique key, the worker (each attempt's too), and the failures' messages
    and the last traceback are shown only when the dashboard was made with `payloads=True`
    (each may be personal data)."""
    now = chrome.now_us
    took = ""
    if row.started_at is not None and row.finished_at is not None:
        took = f"{max(0, row.finished_at - row.started_at) / 1_000:,.0f} ms"
    due = "" if row.unreadable and "run_at" in row.unreadable else when(row.run_at, now)
    fields = [
        _field("kind", "kind", esc(row.kind)),
        _field("state", "state", f'<span class="state {esc(row.state)}">{esc(row.state)}</span>'),
        _field("pushed", "pushed", when(row.pushed_at, now) or "–"),
        _field("due", "due", due or "–"),
        _field("started", "started", when(row.started_at, now) or "–"),
    ]
    if row.state == "done":
        fields.append(_field("finished", "finished", when(row.finished_at, now)))
        fields.append(_field("took", "took", took or "–"))
    if row.state == "dead":
        fields.append(_field("died", "died", when(row.died_at, now)))
    fields.append(_field("attempt", "attempts", str(row.attempts)))
    if row.snoozes is not None:  # a done row's history does not keep it
        fields.append(_field("snoozes", "snoozes", str(row.snoozes)))
    if row.state == "running":
        fields.append(_field("lease until", "lease", when(row.lease_until, now) or "–"))
    if chrome.payloads:
        fields.insert(2, _field("unique key", "key", esc(row.unique_key or "–")))
        fields.append(_field("worker", "worker", esc(row.worker) if row.worker else "–"))
    if row.unreadable is not None:
        fields.append(
            _field(
                "unreadable", "unreadable", f'<span class="unreadable">{esc(row.unreadable)}</span>'
            )
        )
    parts = [back_link(chrome, row), f'<dl class="fields" id="fields">{"".join(fields)}</dl>']
    if row.error:
        parts.append(f'<section id="error"><h2>Last error</h2>{_error(chrome, row)}</section>')
    if row.attempts_log:
        parts.append(_timeline(chrome, row))
    if chrome.payloads:
        parts.append(f'<section id="payload"><h2>Payload</h2>{payload_text(row, None)}</section>')
        if row.state == "done":
            parts.append(f'<section id="result"><h2>Result</h2>{_result(row)}</section>')
    else:
        parts.append(
            '<p class="note" id="payload-hidden">The payload, a done row\'s result, the unique '
            "key, the worker and the last error's message and traceback are hidden: each may "
            "be personal data. The dashboard shows them when made with "
            "<code>payloads=True</code> (<code>--payloads</code>).</p>"
        )
    parts.append(_actions(chrome, row))
    return "".join(parts)


def _timeline(chrome: Chrome, row: Row) -> str:
    """Its attempts, oldest first, one item each: number, outcome, start, end, and with
    `payloads` the worker and the failure's message (its name always)."""
    items = []
    for n, attempt in enumerate(row.attempts_log, 1):
        outcome = esc(attempt.outcome)
        parts = [
            f'<span class="attempt-number">#{attempt.attempt}</span>',
            f'<span class="state {outcome}">{outcome}</span>',
            f"started {when(attempt.started_at, chrome.now_us, hint=False) or '–'}",
            f"ended {when(attempt.ended_at, chrome.now_us, hint=False)}",
        ]
        if chrome.payloads:
            parts.append(f'<span class="worker">{esc(attempt.worker or "–")}</span>')
        if attempt.error is not None:
            failure = f'<span class="error">{esc(attempt.error)}</span>'
            if chrome.payloads and attempt.message:
                failure += f' <span class="attempt-message">{esc(attempt.message)}</span>'
            parts.append(failure)
        items.append(f'<li id="attempt-{n}" class="attempt">{" · ".join(parts)}</li>')
    return (
        '<section id="attempts"><h2>Attempts</h2>'
        f'<ol class="timeline" id="timeline">{"".join(items)}</ol></section>'
    )


def _error(chrome: Chrome, row: Row) -> str:
    name = f'<p class="error" id="error-name">{esc(row.error)}</p>'
    if not chrome.payloads:
        return name
    trace = ""
    if row.traceback:
        trace = f'<pre class="trace" id="traceback">{esc(row.traceback)}</pre>'
    message = f'<p class="message" id="message">{esc(row.message)}</p>' if row.message else ""
    return f"{name}{message}{trace}"


def _actions(chrome: Chrome, row: Row) -> str:
    if not chrome.operator:
        return ""
    buttons = []
    if row.state == "dead":
        buttons.append(button(chrome, f"/rows/{row.id}/retry", "Retry", f"retry-{row.id}"))
    if row.state == "queued":
        buttons.append(button(chrome, f"/rows/{row.id}/cancel", "Cancel", f"cancel-{row.id}"))
    if row.state in ("dead", "done"):
        buttons.append(
            button(
                chrome,
                "/bulk",
                "Delete…",
                f"delete-{row.id}",
                act="delete:selected",
                id=str(row.id),
            )
        )
    if not buttons:
        return ""
    return f'<section id="actions"><h2>Act</h2>{" ".join(buttons)}</section>'


def back_link(chrome: Chrome, row: Row) -> str:
    """A link to the rows of this row's state and kind."""
    link = href(chrome.base, "/rows", {"state": row.state, "kind": row.kind})
    return f'<p><a href="{link}" id="back">All {esc(row.state)} rows of {esc(row.kind)}</a></p>'
