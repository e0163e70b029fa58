"""The rows page: a filter (state, kind, error name), a search box (row id or unique key), one
keyset page of the rows that match, the link to the next page, and for an operator the bulk form:
Retry, Cancel or Delete the selected rows, or all the rows that match the filter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .. import Jobs
from .._base.values import Row, Where
from ._render import Chrome, csrf_field, esc, exact, href
from ._table import row_table

ACTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "retry": ("Retry", ("dead",)),
    "cancel": ("Cancel", ("queued",)),
    "delete": ("Delete", ("dead", "done")),
}
"""Each bulk action: its button's label and the states of the rows it acts on."""


@dataclass(frozen=True, slots=True)
class Listing:
    """One rows page: the filter `where`, the `rows` of this page, `next` (the cursor of the
    page after it, None on the last), `total` (how many rows match), `page` (1 for the first),
    `offset` (how many rows came on the pages before), the kinds and the errors to choose
    from, and the search text `q` as typed. `unlisted` says why nothing is listed when the
    query could not be carried out (a refused filter, a store that cannot be read): then no
    count is claimed."""

    where: Where
    rows: Sequence[Row]
    next: str | None
    total: int
    page: int
    offset: int
    kinds: Sequence[str]
    q: str = ""
    errors: Sequence[str] = ()
    unlisted: str | None = None


ERRORS_READ = 200
"""How many of the newest dead rows, and of the first queued rows, the error filter's list of
errors is read from."""

ERRORS_LISTED = 50
"""The most error names the error filter offers: the commonest among the rows read."""


async def errors_seen(jobs: Jobs) -> list[str]:
    """The error names the error filter offers, in alphabetical order: the last errors of the
    newest `ERRORS_READ` dead rows and of the first `ERRORS_READ` queued rows (those waiting
    for a retry hold one), at most `ERRORS_LISTED`, the commonest first when there are more.
    Two keyset reads of the store, bounded whatever the table holds."""
    seen: Counter[str] = Counter()
    for state in ("dead", "queued"):
        found = await jobs.find(Where(state=state), limit=ERRORS_READ)
        seen.update(row.error for row in found.rows if row.error)
    return sorted(name for name, _n in seen.most_common(ERRORS_LISTED))


def filter_query(where: Where) -> dict[str, object]:
    """The query fields of a filter, for links and hidden fields."""
    return {"state": where.state, "kind": where.kind, "error": where.error, "key": where.key}


def _options(values: Sequence[str], chosen: str | None, any_label: str) -> str:
    options = [f'<option value=""{" selected" if chosen is None else ""}>{any_label}</option>']
    for value in values:
        selected = " selected" if value == chosen else ""
        options.append(f'<option value="{exact(value)}"{selected}>{esc(value)}</option>')
    return "".join(options)


def _filters(chrome: Chrome, listing: Listing) -> str:
    where = listing.where
    kinds = list(listing.kinds)
    if where.kind is not None and where.kind not in kinds:
        kinds.append(where.kind)
    errors = list(listing.errors)
    if where.error is not None and where.error not in errors:
        errors.append(where.error)
    states = _options(["queued", "running", "dead", "done"], where.state, "any state")
    key = f'<input type="hidden" name="key" value="{exact(where.key)}">' if where.key else ""
    return (
        f'<form method="get" action="{href(chrome.base, "/rows")}" class="filters" id="filters">'
        f'<label><span>State</span><select name="state" id="f-state">{states}</select></label>'
        f'<label><span>Kind</span><select name="kind" id="f-kind">'
        f"{_options(kinds, where.kind, 'any kind')}</select></label>"
        f'<label><span>Error</span><select name="error" id="f-error">'
        f"{_options(errors, where.error, 'any error')}</select></label>"
        f'{key}<button type="submit" id="apply-filter">Filter</button></form>'
        f'<form method="get" action="{href(chrome.base, "/rows")}" class="filters" id="search">'
        '<label class="wide"><span>Row id or unique key</span><input type="search" name="q" '
        f'id="q" value="{exact(listing.q)}" autocomplete="off" spellcheck="false"></label>'
        '<button type="submit" id="search-go">Search</button></form>'
    )


def _summary(chrome: Chrome, listing: Listing) -> str:
    where = listing.where
    words = where.words()
    what = esc(words[:1].upper() + words[1:])
    total = f'<span id="total">{listing.total:,}</span>'
    if not listing.rows:
        return f'<p class="summary" id="summary">{what}: {total}.</p>'
    first = listing.offset + 1
    last = listing.offset + len(listing.rows)
    extra = ""
    if where.state is None:
        extra = " Rows of every state, queued first; choose a state to page through more."
    return (
        f'<p class="summary" id="summary">{what}: {total}; showing {first:,}–{last:,}.{extra}</p>'
    )


def _bulk(chrome: Chrome, listing: Listing) -> str:
    """The operator's bulk form: the filter as hidden fields, and one button per action."""
    where = listing.where
    if not chrome.operator or not listing.rows:
        return ""
    hidden = "".join(
        f'<input type="hidden" name="{name}" value="{exact(value)}">'
        for name, value in filter_query(where).items()
        if value is not None
    )
    buttons = []
    for action, (label, states) in ACTIONS.items():
        if where.state is not None and where.state not in states:
            continue
        buttons.append(
            f'<button type="submit" name="act" value="{action}:selected" '
            f'id="{action}-selected">{label} selected</button>'
        )
        if where.state is not None:
            buttons.append(
                f'<button type="submit" name="act" value="{action}:all" id="{action}-all">'
                f"{label} all {listing.total:,} matching this filter</button>"
            )
    if not buttons:
        return ""
    return (
        f'<form method="post" action="{href(chrome.base, "/bulk")}" id="bulk" class="bulk">'
        f'{csrf_field(chrome)}{hidden}<span class="rel">Tick rows, then:</span> '
        f"{' '.join(buttons)}</form>"
    )


def _pages(chrome: Chrome, listing: Listing) -> str:
    links = []
    query = filter_query(listing.where)
    if listing.page > 1:
        links.append(
            f'<a href="{href(chrome.base, "/rows", query)}" id="first-page">First page</a>'
        )
    if listing.next is not None:
        after = {
            **query,
            "after": listing.next,
            "page": listing.page + 1,
            "seen": listing.offset + len(listing.rows),
        }
        links.append(
            f'<a href="{href(chrome.base, "/rows", after)}" id="next-page" rel="next">'
            "Next page →</a>"
        )
    return f'<nav class="pages">{" ".join(links)}</nav>' if links else ""


def render_rows(chrome: Chrome, listing: Listing) -> str:
    """The rows page's main part, as HTML."""
    table = ""
    if listing.unlisted is not None:
        rows = href(chrome.base, "/rows")
        return (
            f'<section id="filter">{_filters(chrome, listing)}</section>'
            f'<section id="listing"><p class="empty" id="none">Nothing is listed: '
            f'{esc(listing.unlisted)}. <a href="{rows}" id="all-rows">List every row</a>.</p>'
            "</section>"
        )
    if listing.rows:
        table = row_table(chrome, listing.rows, listing.where.state, select=True)
    else:
        table = '<p class="empty" id="none">No rows match.</p>'
    return (
        f'<section id="filter">{_filters(chrome, listing)}</section>'
        f'<section id="listing">{_summary(chrome, listing)}{_bulk(chrome, listing)}{table}'
        f"{_pages(chrome, listing)}</section>"
    )
