"""The dashboard's HTML: one page, rendered on the server from values read before rendering.

Everything shown that came from the table (kinds, errors, keys, payloads) goes through `esc`, so a
payload holding markup shows as text. The page skeleton is `templates/page.html`; the pieces are
built here. Times are microseconds since the epoch, shown in UTC with a relative hint.
"""

from __future__ import annotations

import html
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from importlib import resources

from ..store.contract import ROW_STATES, RowView

_TEMPLATE = string.Template(
    resources.files(__package__).joinpath("templates/page.html").read_text(encoding="utf-8")
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PAYLOAD_CHARS = 160


class Mode(Enum):
    """What the visitor may do: nothing (no secret configured), log in, or retry and cancel."""

    READ_ONLY = "read-only"
    LOGIN = "login"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """A scheduled kind as shown: its name, when it ticks, and the row holding its next tick
    (`known` is False when the store cannot say which row that is)."""

    kind: str
    when: str
    overlap: str
    missed: str
    tick: RowView | None
    known: bool = True


@dataclass(frozen=True, slots=True)
class Page:
    """Everything one rendering of the page shows.

    `counts` is by (kind, state); `rows` by state, each at most `limit` long; `now_us` is the
    moment the page was read (µs since the epoch). `problem` is a sentence shown instead of the
    tables' contents when the store could not be read.
    """

    title: str
    store: str
    base: str
    now_us: int
    kinds: Sequence[str]
    counts: Mapping[tuple[str, str], int]
    rows: Mapping[str, Sequence[RowView]]
    schedules: Sequence[ScheduleView]
    limit: int
    mode: Mode
    csrf: str | None = None
    flash: str | None = None
    flash_refused: bool = False
    problem: str | None = None
    payloads: bool = False


def esc(value: object) -> str:
    """`value` as HTML text, quotes included; what is not Unicode shows as U+FFFD."""
    text = str(value)
    if not text.isascii():
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return html.escape(text, quote=True)


def when(us: int | None, now_us: int, *, hint: bool = True) -> str:
    """A `<time>` for `us` (µs since the epoch) in UTC, with how far it is from `now_us` when
    `hint`; empty for None."""
    if us is None:
        return ""
    try:
        moment = _EPOCH + timedelta(microseconds=us)
    except OverflowError:
        return f"<time>{us} µs</time>"
    iso = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    tag = f'<time datetime="{iso}">{moment.strftime("%Y-%m-%d %H:%M:%S UTC")}</time>'
    return f'{tag} <span class="rel">({relative(us, now_us)})</span>' if hint else tag


def relative(us: int, now_us: int) -> str:
    """How far `us` is from `now_us`, in words: "in 5 min", "3 h ago", "now"."""
    seconds = (us - now_us) / 1_000_000
    size = abs(seconds)
    if size < 1:
        return "now"
    for unit, length in (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        if size >= length:
            amount = f"{int(size // length)} {unit}"
            break
    return f"in {amount}" if seconds > 0 else f"{amount} ago"


def render(page: Page) -> str:
    """The whole HTML document for `page`."""
    return _TEMPLATE.substitute(
        title=esc(page.title),
        base=esc(page.base),
        store=esc(page.store),
        now=when(page.now_us, page.now_us, hint=False),
        auth=_auth(page),
        flash=_flash(page),
        problem=f'<p class="problem" id="problem">{esc(page.problem)}</p>' if page.problem else "",
        counts=_counts(page),
        queued=_rows(page, "queued"),
        running=_rows(page, "running"),
        dead=_rows(page, "dead"),
        schedules=_schedules(page),
    )


def _csrf_field(page: Page) -> str:
    return f'<input type="hidden" name="csrf" value="{esc(page.csrf or "")}">'


def _auth(page: Page) -> str:
    if page.mode is Mode.READ_ONLY:
        return (
            '<p id="read-only">Read-only: no secret is configured, so nothing can be changed.</p>'
        )
    if page.mode is Mode.LOGIN:
        return (
            f'<form method="post" action="{esc(page.base)}/login" id="login-form">'
            '<label>Secret <input type="password" name="secret" id="secret" required '
            'autocomplete="current-password"></label> '
            '<button type="submit" id="login">Log in</button></form>'
        )
    return (
        f'<form method="post" action="{esc(page.base)}/logout">{_csrf_field(page)}'
        '<span id="operator">Logged in</span> '
        '<button type="submit" id="logout">Log out</button></form>'
    )


def _flash(page: Page) -> str:
    if not page.flash:
        return ""
    kind = "flash refused" if page.flash_refused else "flash"
    return f'<p class="{kind}" id="flash" role="status">{esc(page.flash)}</p>'


def _counts(page: Page) -> str:
    known = list(page.kinds)
    others = sorted({kind for kind, _state in page.counts} - set(known))
    head = "".join(f'<th class="n">{state}</th>' for state in ROW_STATES)
    body = []
    for kind in [*known, *others]:
        note = "" if kind in known else ' <span class="rel">(not a kind of this queue)</span>'
        cells = "".join(
            f'<td class="n" data-kind="{esc(kind)}" data-state="{state}">'
            f"{page.counts.get((kind, state), 0)}</td>"
            for state in ROW_STATES
        )
        body.append(f"<tr><th>{esc(kind)}{note}</th>{cells}</tr>")
    totals = "".join(
        f'<td class="n" id="count-{state}">'
        f"{sum(n for (_kind, s), n in page.counts.items() if s == state)}</td>"
        for state in ROW_STATES
    )
    return (
        f"<table><thead><tr><th>kind</th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody>"
        f"<tfoot><tr><th>all</th>{totals}</tr></tfoot></table>"
    )


def _payload(page: Page, row: RowView) -> str:
    text = row.payload.decode(errors="replace")
    if len(text) > _PAYLOAD_CHARS:
        text = text[:_PAYLOAD_CHARS] + "…"
    return f"<td><code>{esc(text)}</code></td>"


def _error(row: RowView) -> str:
    """The last failure of `row`: its name, its message, and its traceback folded away."""
    parts = [f'<span class="error">{esc(row.error or "")}</span>']
    if row.detail:
        parts.append(f'<span class="message">{esc(row.detail)}</span>')
    if row.traceback:
        parts.append(
            f'<details class="traceback"><summary>traceback</summary>'
            f"<pre>{esc(row.traceback).replace(chr(10), '&#10;')}</pre></details>"
        )
    return " ".join(parts)


def _button(page: Page, row: RowView, action: str, label: str) -> str:
    return (
        f'<td><form method="post" action="{esc(page.base)}/rows/{row.id}/{action}">'
        f'{_csrf_field(page)}<button type="submit" id="{action}-{row.id}">{label}</button>'
        "</form></td>"
    )


def _rows(page: Page, state: str) -> str:
    rows = page.rows.get(state, ())
    if not rows:
        return f'<p class="empty" id="none-{state}">No {state} rows.</p>'
    total = sum(n for (_kind, s), n in page.counts.items() if s == state)
    more = f'<p class="more">The first {len(rows)} of {total}.</p>' if total > len(rows) else ""
    operator = page.mode is Mode.OPERATOR
    heads = ["id", "kind"]
    if state == "queued":
        heads += ["due", "attempts so far", "last error", "unique key"]
    elif state == "running":
        heads += ["due", "attempt", "lease until"]
    else:
        heads += ["error", "attempts", "died"]
    if page.payloads:
        heads.append("payload")
    if operator and state in ("queued", "dead"):
        heads.append("")
    lines = []
    for row in rows:
        kind = esc(row.kind)
        if row.unreadable is not None:
            kind += f' <span class="unreadable">unreadable: {esc(row.unreadable)}</span>'
        cells = [f'<td class="n">{row.id}</td>', f"<td>{kind}</td>"]
        due = "" if row.unreadable and "run_at" in row.unreadable else when(row.run_at, page.now_us)
        if state == "queued":
            error = _error(row) if row.error else ""
            cells += [
                f"<td>{due}</td>",
                f'<td class="n">{row.attempts}</td>',
                f"<td>{error}</td>",
                f"<td>{esc(row.unique_key or '')}</td>",
            ]
        elif state == "running":
            cells += [
                f"<td>{due}</td>",
                f'<td class="n">{row.attempts}</td>',
                f"<td>{when(row.lease_until, page.now_us)}</td>",
            ]
        else:
            cells += [
                f"<td>{_error(row)}</td>",
                f'<td class="n">{row.attempts}</td>',
                f"<td>{when(row.died_at, page.now_us)}</td>",
            ]
        if page.payloads:
            cells.append(_payload(page, row))
        if operator and state == "queued":
            cells.append(_button(page, row, "cancel", "Cancel"))
        elif operator and state == "dead":
            cells.append(_button(page, row, "retry", "Retry"))
        lines.append(f'<tr id="row-{row.id}">{"".join(cells)}</tr>')
    head = "".join(f"<th>{h}</th>" for h in heads)
    return f"{more}<table><thead><tr>{head}</tr></thead><tbody>{''.join(lines)}</tbody></table>"


def _schedules(page: Page) -> str:
    if not page.schedules:
        return '<p class="empty" id="none-schedules">No kind of this queue has a schedule.</p>'
    lines = []
    for view in page.schedules:
        tick = view.tick
        if not view.known:
            nxt = "unknown: this store cannot list the row holding the key"
        elif tick is None:
            nxt = "not seeded yet: <code>serve()</code> or <code>seed()</code> queues it"
        elif tick.state == "running":
            nxt = f"running now (the tick due {when(tick.run_at, page.now_us)})"
        else:
            nxt = f"{when(tick.run_at, page.now_us)}, row {tick.id}"
        lines.append(
            f'<tr data-kind="{esc(view.kind)}"><td>{esc(view.kind)}</td>'
            f"<td><code>{esc(view.when)}</code></td><td>{esc(view.overlap)}</td>"
            f'<td>{esc(view.missed)}</td><td class="next-tick">{nxt}</td></tr>'
        )
    return (
        "<table><thead><tr><th>kind</th><th>schedule</th><th>overlap</th><th>missed</th>"
        f"<th>next tick</th></tr></thead><tbody>{''.join(lines)}</tbody></table>"
    )
