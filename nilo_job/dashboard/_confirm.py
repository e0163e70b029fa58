"""The page between a bulk button and the action: how many rows it will touch, and which, in
words; only its own button (a second POST, with `confirm`) acts."""

from __future__ import annotations

from ._bulk import Plan
from ._render import Chrome, csrf_field, esc, exact, href, plural
from ._rows import filter_query


def render_confirm(chrome: Chrome, plan: Plan, count: int) -> str:
    """The confirmation's main part, as HTML: `count` rows (`jobs.count` now) that `plan` would
    touch."""
    back = href(chrome.base, "/rows", filter_query(plan.where))
    cancel = f'<a href="{back}" id="back">Back to the rows, changing nothing</a>'
    words = esc(plan.words())
    if count == 0:
        return (
            f'<section id="confirm-page"><p id="confirm-what">No row is one of the {words}: '
            f"there is nothing to {plan.action}.</p><p>{cancel}</p></section>"
        )
    hidden = [
        f'<input type="hidden" name="act" value="{plan.action}:'
        f'{"selected" if plan.ids is not None else "all"}">',
        '<input type="hidden" name="confirm" value="yes">',
        f'<input type="hidden" name="at_most" value="{count}">',
    ]
    hidden += [
        f'<input type="hidden" name="{name}" value="{exact(value)}">'
        for name, value in filter_query(plan.where).items()
        if value is not None
    ]
    hidden += [f'<input type="hidden" name="id" value="{row_id}">' for row_id in plan.ids or ()]
    rows = plural(count, "row")
    note = {
        "retry": "Each is queued again from its first attempt, due now.",
        "cancel": "Each is taken out of the queue; a row a worker has started meanwhile runs on.",
        "delete": "Each is deleted for good, its error and history with it.",
    }[plan.action]
    more = ""
    if plan.ids is None:
        more = f" If more rows match by the time you confirm, only {count:,} are touched."
    return (
        f'<section id="confirm-page"><h2>{esc(plan.label)} {rows}?</h2>'
        f'<p id="confirm-what">{esc(plan.label)} <strong id="confirm-count">{count:,}</strong> '
        f'{"row" if count == 1 else "rows"}: the <span id="confirm-words">{words}</span>.</p>'
        f'<p class="note">{note}{more}</p>'
        f'<form method="post" action="{href(chrome.base, "/bulk")}" id="confirm-form">'
        f"{csrf_field(chrome)}{''.join(hidden)}"
        f'<button type="submit" id="confirm" class="danger">{esc(plan.label)} {rows}</button> '
        f"{cancel}</form></section>"
    )
