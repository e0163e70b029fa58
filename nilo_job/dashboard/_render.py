"""The dashboard's HTML, the parts every page shares: escaping, times, the page skeleton.

Everything shown that came from the table (kinds, errors, keys, payloads) goes through `esc`, so a
payload holding markup shows as text, and a control or reordering character (a right-to-left
override) as a visible escape; a form field's value goes through `exact`, so it comes back as it
was. The skeleton is `templates/page.html`; each page's main part
is built by `_index.py`, `_rows.py` and `_row.py`. Times are microseconds since the epoch, shown in
UTC in a `<time datetime=...>` (the static script puts the local time in its title) with a
relative hint.
"""

from __future__ import annotations

import html
import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from importlib import resources
from urllib.parse import urlencode

from .._base.clock import utc_text
from .._base.text import printable

_TEMPLATE = string.Template(
    resources.files(__package__).joinpath("templates/page.html").read_text(encoding="utf-8")
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Mode(Enum):
    """What the header offers the visitor: nothing to do (no secret configured, or read access
    only), a login form, a logout (logged in with the secret), the note that the application
    granted full access, or nothing at all (a page refused)."""

    READ_ONLY = "read-only"
    LOGIN = "login"
    OPERATOR = "operator"
    GRANTED = "granted"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class Chrome:
    """What every page shows around its main part.

    `now_us` is the moment the page was read (µs since the epoch); `store` names the store,
    "" for a visitor who may not act (the header then names none); `problem` is a sentence
    shown when the store could not be read; `refresh` is the auto-refresh period in seconds
    (None: off); `csrf` is the token the forms carry, None unless the visitor may act, and
    `new_csrf` says it is new, to be set as its cookie with this page (`https`: the page was
    asked for over https). `payloads` shows payloads, results, failure messages and
    tracebacks, unique keys and workers.
    """

    title: str
    store: str
    base: str
    now_us: int
    mode: Mode
    csrf: str | None = None
    flash: str | None = None
    refused: bool = False
    problem: str | None = None
    refresh: int | None = None
    payloads: bool = False
    new_csrf: bool = False
    https: bool = False

    @property
    def operator(self) -> bool:
        """Whether the visitor may act on rows (logged in, or granted by the application)."""
        return self.mode in (Mode.OPERATOR, Mode.GRANTED) and self.csrf is not None


def esc(value: object) -> str:
    """`value` as HTML text to be read, quotes included. Every control character but the
    newline, and every character that reorders text (a right-to-left override, an isolate, a
    direction mark), is written as a visible escape (`\\x1b`, `\\u202e`), so text from a row
    cannot reorder or hide what a cell says; what is not Unicode shows as U+FFFD. A form
    field's value or a link, which must come back as it was, takes `exact`."""
    return exact(printable(str(value), lines=True))


def exact(value: object) -> str:
    """`value` as an HTML attribute's value, character for character (a form field's value, a
    link), quotes included; what is not Unicode shows as U+FFFD."""
    text = str(value)
    if not text.isascii():
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return html.escape(text, quote=True)


def href(base: str, path: str, query: Mapping[str, object] | None = None) -> str:
    """An escaped link to `path` under the mount prefix `base`, with the non-empty values of
    `query` as its query string."""
    fields = {k: str(v) for k, v in (query or {}).items() if v is not None and v != ""}
    tail = f"?{urlencode(fields, errors='surrogateescape')}" if fields else ""
    return exact(f"{base}{path}{tail}")


def iso(us: int) -> str:
    """`us` (µs since the epoch) as "2026-12-01T13:05:09Z"."""
    moment = _EPOCH + timedelta(microseconds=us)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def when(us: int | None, now_us: int, *, hint: bool = True) -> str:
    """A `<time>` for `us` (µs since the epoch) in UTC, with how far it is from `now_us` when
    `hint`; empty for None."""
    if us is None:
        return ""
    try:
        tag = f'<time datetime="{iso(us)}">{utc_text(us)}</time>'
    except OverflowError:
        return f"<time>{us} µs</time>"
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


def scroll_box(table: str, label: str) -> str:
    """`table` in a box that scrolls sideways when the table is wider than the page, with a
    hint above it that the script fills in and shows while columns are out of sight ("Scroll
    sideways for the other columns: died, attempts, actions →"); the box is focusable, so a
    keyboard scrolls it too. `label` names the table for screen readers."""
    return (
        '<div class="scroll-box"><p class="scroll-hint" hidden></p>'
        f'<div class="scroll" tabindex="0" role="region" aria-label="{esc(label)}">{table}</div>'
        "</div>"
    )


def csrf_field(chrome: Chrome) -> str:
    """The hidden field carrying the session's CSRF token."""
    return f'<input type="hidden" name="csrf" value="{exact(chrome.csrf or "")}">'


def button(chrome: Chrome, path: str, label: str, element_id: str, **fields: str) -> str:
    """A one-button POST form to `path` (under the prefix), with the CSRF token and `fields`."""
    hidden = "".join(
        f'<input type="hidden" name="{exact(name)}" value="{exact(value)}">'
        for name, value in fields.items()
    )
    return (
        f'<form method="post" action="{href(chrome.base, path)}" class="inline">'
        f'{csrf_field(chrome)}{hidden}<button type="submit" id="{esc(element_id)}">{label}'
        "</button></form>"
    )


def layout(chrome: Chrome, heading: str, main: str, *, here: str = "") -> str:
    """The whole HTML document: `main` inside the skeleton, under `heading`; `here` names the
    navigation link of this page ("index" or "rows")."""
    refresh = ""
    if chrome.refresh is not None:
        refresh = f'<meta http-equiv="refresh" content="{chrome.refresh}">'
    current = ' aria-current="page"'
    nav = "".join(
        f'<a href="{href(chrome.base, path)}" id="nav-{name}"'
        f"{current if name == here else ''}>{label}</a>"
        for name, path, label in (("index", "/", "Overview"), ("rows", "/rows", "Rows"))
    )
    problem = ""
    if chrome.problem:
        problem = f'<p class="problem" id="problem">{esc(chrome.problem)}</p>'
    return _TEMPLATE.substitute(
        title=esc(chrome.title),
        heading=esc(heading),
        base=exact(chrome.base),
        refresh=refresh,
        store=f"{esc(chrome.store)} · " if chrome.store else "",
        now=when(chrome.now_us, chrome.now_us, hint=False),
        nav=nav,
        auth=_auth(chrome),
        flash=_flash(chrome),
        problem=problem,
        main=main,
    )


def _auth(chrome: Chrome) -> str:
    if chrome.mode is Mode.CLOSED:
        return ""
    if chrome.mode is Mode.READ_ONLY:
        return '<p id="read-only">Read-only: nothing can be changed from here.</p>'
    if chrome.mode is Mode.GRANTED:
        return '<p id="granted">Full access, granted by your application.</p>'
    if chrome.mode is Mode.LOGIN:
        return (
            f'<form method="post" action="{href(chrome.base, "/login")}" id="login-form">'
            '<label>Secret <input type="password" name="secret" id="secret" required '
            'autocomplete="current-password"></label> '
            '<button type="submit" id="login">Log in</button></form>'
        )
    return (
        f'<form method="post" action="{href(chrome.base, "/logout")}">{csrf_field(chrome)}'
        '<span id="operator">Logged in</span> '
        '<button type="submit" id="logout">Log out</button></form>'
    )


def _flash(chrome: Chrome) -> str:
    if not chrome.flash:
        return ""
    kind = "flash refused" if chrome.refused else "flash"
    return f'<p class="{kind}" id="flash" role="status">{esc(chrome.flash)}</p>'


def plural(n: int, one: str, many: str | None = None) -> str:
    """ "1 row", "2 rows", "1,234 rows"."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"
