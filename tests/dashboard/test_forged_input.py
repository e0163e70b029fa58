"""What a visitor can forge, and what a row can carry, against the dashboard: page cursors and
numbers no store holds, a NUL or garbage in the bulk form, and characters that reorder text
(a right-to-left override) in what a row says; the same cursor on the command line."""

import html
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import nilo_job as job
from nilo_job.dashboard import dashboard_app
from nilo_job.store.contract import NewRow, Store
from tests.helpers.cli_ops import nilo_job
from tests.helpers.dashboard import (
    ORIGIN,
    SECRET,
    Mail,
    S,
    cells,
    client,
    dead_rows,
    flash,
    listed,
    login,
)

PAST_64_BITS = str(2**63)
BELOW_64_BITS = str(-(2**63) - 1)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database's URL for the command line: a SQLite file, or a PostgreSQL database."""
    if request.param == "postgres":
        pg_url: str = request.getfixturevalue("pg_url")
        return pg_url
    return f"sqlite:///{tmp_path}/q.db"


def problem_of(page: str) -> str:
    found = re.search(r'<p class="problem" id="problem">(.*?)</p>', page)
    assert found is not None, "no problem on the page"
    return html.unescape(found.group(1))


# --------------------------------------------------------------------------- page cursors


async def test_a_cursor_or_number_past_64_bits_is_a_400_that_says_why(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    await dead_rows(jobs, t, "bad1@x", "bad2@x")
    refused = {
        f"/rows?state=dead&after={PAST_64_BITS}.1": f"after='{PAST_64_BITS}.1'",
        f"/rows?state=dead&after=1.{PAST_64_BITS}": f"after='1.{PAST_64_BITS}'",
        f"/rows?state=dead&after={BELOW_64_BITS}.1": f"after='{BELOW_64_BITS}.1'",
        f"/rows?state=dead&after=1.{'9' * 400}": f"after='1.{'9' * 400}'",
    }
    digits = {  # a digit that is not 0-9 (a superscript two): int() cannot read it
        "/rows?state=dead&page=%C2%B2": "page='²': a whole number from 1",
        "/rows?state=dead&seen=%C2%B2": "seen='²': a whole number from 0",
    }
    async with client(dashboard_app(jobs, secret=SECRET, limit=1)) as http:
        await login(http)
        answers = {path: await http.get(path) for path in [*refused, *digits]}
        refresh = await http.get("/?refresh=%C2%B2")
        search = await http.get("/rows?q=%C2%B2")
        done = await http.get("/?did=bulk&verb=retry&n=%C2%B2&of=1")
    for path, why in refused.items():
        assert answers[path].status_code == 400, path
        assert problem_of(answers[path].text) == (
            f"That filter cannot be read: {why} is not a cursor find() gave (its Found.next)"
        )
        assert listed(answers[path].text) == []
    for path, why in digits.items():
        assert answers[path].status_code == 400, path
        assert problem_of(answers[path].text) == f"That filter cannot be read: {why}"
    assert refresh.status_code == 400
    assert problem_of(refresh.text) == (
        "That address cannot be read: refresh='²': auto-refresh is every 5 to 3,600 seconds (a "
        "whole number); it is off"
    )
    # "²" names no row: it is searched for as a unique key, and none holds it.
    assert (search.status_code, listed(search.text)) == (200, [])
    # A forged "what was done" says nothing rather than fail.
    assert done.status_code == 200
    assert 'id="flash"' not in done.text


def test_the_command_line_refuses_a_cursor_past_64_bits_in_a_sentence(url: str) -> None:
    assert nilo_job("migrate", url).exit_code == 0
    for cursor in (f"{PAST_64_BITS}.1", f"1.{PAST_64_BITS}", "².1"):
        done = nilo_job("list", url, "--state", "dead", "--after", cursor)
        assert done.exit_code == 2, cursor
        assert done.stderr.endswith(
            f"Error: Invalid value for --after: {cursor!r} is not a cursor a page of "
            "`nilo-job list` gave (`more: --after …`)\n"
        )
        assert "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- bulk forms


async def test_garbage_in_a_bulk_form_is_a_400_that_says_why_and_does_nothing(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    dead = await dead_rows(jobs, t, "bad1@x", "bad2@x")
    retry_all = {"act": "retry:all", "state": "dead"}
    forms = {
        "a NUL in a kind": (
            {**retry_all, "kind": "ma\x00il"},
            "Where(kind='ma\\x00il'): no row holds a NUL or a lone surrogate, which no store "
            "can keep",
        ),
        "a NUL in an error": (
            {**retry_all, "error": "Rejected\x00"},
            "Where(error='Rejected\\x00'): no row holds a NUL or a lone surrogate, which no "
            "store can keep",
        ),
        "a NUL in a key, confirmed": (
            {**retry_all, "key": "\x00", "confirm": "yes", "at_most": "2"},
            "Where(key='\\x00'): no row holds a NUL or a lone surrogate, which no store can keep",
        ),
        "a NUL in an id": (
            {"act": "retry:selected", "id": f"{dead[0]}\x00"},
            f"'{dead[0]}\\x00' is not a row id",
        ),
        "an id past 64 bits": (
            {"act": "retry:selected", "id": PAST_64_BITS},
            f"'{PAST_64_BITS}' is not a row id",
        ),
        "a list of ids in one field": (
            {"act": "retry:selected", "id": f"{dead[0]},{dead[1]}"},
            f"'{dead[0]},{dead[1]}' is not a row id",
        ),
        "a superscript digit": ({"act": "retry:selected", "id": "²"}, "'²' is not a row id"),
        "an Arabic-Indic digit": ({"act": "retry:selected", "id": "١"}, "'١' is not a row id"),
    }
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        answers = {
            name: await http.post("/bulk", data={"csrf": token, **form}, headers=ORIGIN)
            for name, (form, _why) in forms.items()
        }
        how_many = [
            await http.post(
                "/bulk",
                data={"csrf": token, **retry_all, "confirm": "yes", "at_most": at_most},
                headers=ORIGIN,
            )
            for at_most in ("²", "١", PAST_64_BITS + "0")
        ]
    for name, (_form, why) in forms.items():
        assert answers[name].status_code == 400, name
        assert html.unescape(flash(answers[name].text)) == f"Nothing was done: {why}.", name
    for answer in how_many:
        assert (answer.status_code, answer.text) == (
            400,
            "refused: the form does not say how many rows",
        )
    assert await jobs.stats() == (0, 0, 2)  # nothing was retried


# ----------------------------------------------------------- text that reorders a cell

REORDERING = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
"""Every character that reorders text: embeddings, overrides, isolates, marks."""
ESCAPED = "\\u202a\\u202b\\u202c\\u202d\\u202e\\u2066\\u2067\\u2068\\u2069\\u200e\\u200f\\u061c"
EVIL = "invoice_\u202efdp.exe"  # reads "invoice_exe.pdf" where the override is obeyed
SHOWN = "invoice_\\u202efdp.exe"


@dataclass
class Hostile:
    nilo_job = "hostile"
    retry = job.Retry.NONE

    text: str

    def run(self) -> None:
        raise RuntimeError(self.text)


async def test_characters_that_reorder_text_show_as_escapes_and_filters_still_work(
    store: Store, t: int
) -> None:
    jobs = job.Jobs(kinds=[Hostile], store=store)
    dead = await jobs.push(Hostile(f"{EVIL} {REORDERING}\x1b[2J"), at=t)
    assert await jobs.drain_at(t) == 1
    queued = await jobs.push(Hostile("later"), at=t + 3_600 * S, unique=EVIL)
    (theirs,) = await store.push([NewRow(f"kind_{EVIL}", b"{}", t + 7_200 * S)])
    async with client(dashboard_app(jobs, secret=SECRET, payloads=True)) as http:
        await login(http)
        overview = (await http.get("/")).text
        dead_page = (await http.get("/rows?state=dead")).text
        queued_page = (await http.get("/rows?state=queued")).text
        row_page = (await http.get(f"/rows/{dead}")).text
        by_key = (await http.get("/rows", params={"q": EVIL})).text
        by_kind = await http.get("/rows", params={"state": "queued", "kind": f"kind_{EVIL}"})
    # No page shows one of those characters, nor an escape sequence: each shows as its escape.
    for page in (overview, dead_page, queued_page, row_page, by_key, by_kind.text):
        assert not re.search(f"[{REORDERING}\x1b]", _text_of(page)), _text_of(page)
    said = f"{SHOWN} {ESCAPED}\\x1b[2J"
    error = cells(dead_page, dead)[3]
    assert cells(dead_page, dead)[2] == "hostile"
    assert error.startswith(f"RuntimeError {said} traceback")
    assert error.endswith(f"RuntimeError: {said}&#10;")  # the traceback's last line
    # The payload's JSON writes the escape sequence its own way (\u001b).
    assert cells(dead_page, dead)[6] == f'{{"text":"{SHOWN} {ESCAPED}\\u001b[2J"}}'
    assert f'<p class="message" id="message">{said}</p>' in row_page
    assert _traceback_of(row_page).endswith(f"RuntimeError: {said}\n")
    assert cells(queued_page, queued)[6] == SHOWN  # the unique key
    assert cells(queued_page, theirs)[2] == f"kind_{SHOWN}"
    assert f"kind_{SHOWN}" in _text_of(overview)
    # The escape is only what is shown: the filters carry the exact value, and find the rows.
    assert listed(by_key) == [queued]
    assert (by_kind.status_code, listed(by_kind.text)) == (200, [theirs])
    assert f'<option value="kind_{EVIL}" selected>kind_{SHOWN}</option>' in by_kind.text


def _text_of(page: str) -> str:
    """The page's text as a reader sees it: no tags, hence no attribute values (a form field's
    value, a link), which are not shown."""
    return html.unescape(re.sub(r"<[^>]*>", " ", page))


def _traceback_of(page: str) -> str:
    found = re.search(r"<pre[^>]*>(.*?)</pre>", page, re.S)
    assert found is not None, "no traceback on the page"
    return html.unescape(found.group(1)).replace("&#10;", "\n")
