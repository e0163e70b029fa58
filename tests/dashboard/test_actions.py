"""The dashboard's actions over HTTP: bulk retry, cancel and delete of a filter or of ticked rows
with their confirmation, the forms that cannot be done, a page of 1,000 ticked rows, a store that
fails mid-action, and pausing and resuming a kind."""

import re

import nilo_job as job
from nilo_job.dashboard import dashboard_app
from nilo_job.store.contract import Store
from tests.helpers.dashboard import (
    FORM,
    ORIGIN,
    SECRET,
    Mail,
    Resize,
    S,
    client,
    dead_rows,
    flash,
    login,
    text,
)

# --------------------------------------------------------------------------- bulk actions


def confirm_fields(page: str) -> dict[str, list[str]]:
    """The hidden fields of the confirmation form."""
    found = re.search(
        r'<form method="post" action="[^"]*/bulk" id="confirm-form">(.*?)</form>', page
    )
    assert found is not None, "no confirmation form"
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(
        r'<input type="hidden" name="(\w+)" value="([^"]*)">', found.group(1)
    ):
        fields.setdefault(name, []).append(value)
    return fields  # fmt: skip


def confirm_what(page: str) -> str:
    found = re.search(r'<p id="confirm-what">(.*?)</p>', page)
    assert found is not None, "no confirmation sentence"
    return text(found.group(1))


async def test_bulk_retry_of_a_filter_confirms_the_count_then_acts(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    rejected = await dead_rows(jobs, t, "bad1@x", "bounce1@x", "bad2@x", "bad3@x")
    del rejected[1]
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        page = (await http.get("/rows?state=dead&kind=mail&error=Rejected")).text
        assert '<button type="submit" name="act" value="retry:all" id="retry-all">Retry all 3 ' in (
            page
        )
        assert 'id="cancel-all"' not in page  # cancel is for queued rows
        ask = {"csrf": token, "act": "retry:all", "state": "dead", "kind": "mail",
               "error": "Rejected"}  # fmt: skip
        first = await http.post("/bulk", data=ask, headers=ORIGIN)
        assert first.status_code == 200
        assert confirm_what(first.text) == (
            "Retry 3 rows: the dead rows of mail that failed with Rejected."
        )
        assert await jobs.stats() == (0, 0, 4)  # nothing done yet
        fields = confirm_fields(first.text)
        assert fields == {
            "csrf": [token], "act": ["retry:all"], "confirm": ["yes"], "at_most": ["3"],
            "state": ["dead"], "kind": ["mail"], "error": ["Rejected"],
        }  # fmt: skip
        # One more row fails the same way before the operator confirms: only 3 are retried.
        await dead_rows(jobs, t + 10 * S, "bad4@x")
        second = await http.post("/bulk", data=fields, headers=ORIGIN)
        assert (second.status_code, second.headers["location"]) == (
            303,
            "/rows?state=dead&kind=mail&error=Rejected&did=bulk&verb=retry&n=3&of=3",
        )
        after = (await http.get(second.headers["location"])).text
    assert flash(after) == "3 rows queued again."
    assert await jobs.stats() == (3, 0, 2)
    queued = (await jobs.find(job.Where(state="queued"))).rows
    assert all(row.attempts == 0 and row.kind == "mail" for row in queued)
    dead = (await jobs.find(job.Where(state="dead"))).rows
    assert sorted(row.error for row in dead) == ["Bounced", "Rejected"]


async def test_bulk_actions_on_ticked_rows(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=store)
    dead = await dead_rows(jobs, t, "bad1@x", "bad2@x", "bad3@x")
    queued = [await jobs.push(Mail(to=f"q{n}@x"), at=t + 3_600 * S) for n in range(3)]
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        page = (await http.get("/rows?state=dead")).text
        assert [int(n) for n in re.findall(r'name="id" value="(\d+)" form="bulk"', page)] == (
            dead[::-1]
        )
        outcomes = []
        for act, ids in (
            ("retry:selected", [dead[0], dead[1], queued[0]]),  # the queued one is not dead
            ("cancel:selected", [queued[1], queued[2], dead[2]]),
            ("delete:selected", [dead[2]]),
        ):
            form = {"csrf": token, "act": act, "id": [str(i) for i in ids], "state": "dead"}
            first = await http.post("/bulk", data=form, headers=ORIGIN)
            fields = confirm_fields(first.text)
            assert fields["id"] == [str(i) for i in ids]
            second = await http.post("/bulk", data=fields, headers=ORIGIN)
            outcomes.append((confirm_what(first.text), second.headers["location"]))
    assert outcomes == [
        ("Retry 2 rows: the dead rows among 3 ids.",
         "/rows?state=dead&did=bulk&verb=retry&n=2&of=2"),
        ("Cancel 2 rows: the queued rows among 3 ids.",
         "/rows?state=dead&did=bulk&verb=cancel&n=2&of=2"),
        ("Delete 1 row: the dead and done rows among 1 ids.",
         "/rows?state=dead&did=bulk&verb=delete&n=1&of=1"),
    ]  # fmt: skip
    assert await jobs.stats() == (3, 0, 0)
    assert sorted(row.id for row in (await jobs.find(job.Where(state="queued"))).rows) == sorted(
        [dead[0], dead[1], queued[0]]
    )


async def test_bulk_delete_and_cancel_of_a_filter(t: int) -> None:
    jobs = job.Jobs(kinds=[Mail, Resize], store=job.Memory())
    await dead_rows(jobs, t, "bad1@x", "bad2@x")
    done = await jobs.push(Mail(to="ok@x"), at=t)
    assert await jobs.drain_at(t) == 1
    for n in range(4):
        await jobs.push(Resize(n=n), at=t + 3_600 * S)
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        asked = []
        for form in (
            {"act": "delete:all", "kind": "mail"},  # no state: dead and done rows
            {"act": "cancel:all", "state": "queued", "kind": "resize"},
        ):
            first = await http.post("/bulk", data={"csrf": token, **form}, headers=ORIGIN)
            asked.append(confirm_what(first.text))
            second = await http.post("/bulk", data=confirm_fields(first.text), headers=ORIGIN)
            assert second.status_code == 303
    assert asked == [
        "Delete 3 rows: the dead and done rows of mail.",
        "Cancel 4 rows: the queued rows of resize.",
    ]
    assert await jobs.stats() == job.Stats(0, 0, 0, 0)
    assert await jobs.row(done) is None


async def test_bulk_forms_that_cannot_be_done_say_why(dead_one: tuple[job.Jobs, int]) -> None:
    jobs, row = dead_one
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        answers = [
            await http.post("/bulk", data={"csrf": token, **form}, headers=ORIGIN)
            for form in (
                {"act": "explode:all"},
                {"act": "retry:selected"},
                {"act": "retry:selected", "id": "seven"},
                {"act": "retry:all", "state": "queued"},
                {"act": "retry:all", "state": "finished"},
                {"act": "retry:selected", "id": [str(n) for n in range(1, 1_002)]},
            )
        ]
        too_many = await http.post(
            "/bulk",
            content="&".join([f"csrf={token}", *[f"id={n}" for n in range(1_020)]]).encode(),
            headers={**ORIGIN, **FORM},
        )
        nothing = await http.post(
            "/bulk", data={"csrf": token, "act": "retry:all", "kind": "other"}, headers=ORIGIN
        )
        no_count = await http.post(
            "/bulk",
            data={"csrf": token, "act": "retry:all", "confirm": "yes", "at_most": "many"},
            headers=ORIGIN,
        )
    assert [(a.status_code, flash(a.text)) for a in answers] == [
        (400, "Nothing was done: the form does not say which action to take."),
        (400, "Nothing was done: no row is ticked: tick the rows to act on, or use the button "
              "for all of them."),
        (400, "Nothing was done: &#x27;seven&#x27; is not a row id."),
        (400, "Nothing was done: Retry acts on dead rows, not queued ones."),
        (400, "Nothing was done: &#x27;finished&#x27; is not a state."),
        (400, "Nothing was done: at most 1,000 rows at once."),
    ]  # fmt: skip
    assert (too_many.status_code, too_many.text) == (413, "a form has at most 1016 fields")
    assert nothing.status_code == 200
    assert confirm_what(nothing.text) == (
        "No row is one of the dead rows of other: there is nothing to retry."
    )
    assert 'id="confirm-form"' not in nothing.text
    assert (no_count.status_code, no_count.text) == (
        400,
        "refused: the form does not say how many rows",
    )
    assert await jobs.stats() == (0, 0, 1)
    assert row == 1


async def test_a_page_of_1000_ticked_rows_fits_in_a_form(t: int) -> None:
    jobs = job.Jobs(kinds=[Mail], store=job.Memory(bytes=1 << 22))
    await jobs.push_many([Mail(to=f"q{n}@x") for n in range(1_000)], at=t + 3_600 * S)
    ids = [row.id for row in (await jobs.find(job.Where(state="queued"), limit=1_000)).rows]
    async with client(dashboard_app(jobs, secret=SECRET, limit=1_000)) as http:
        token = await login(http)
        page = (await http.get("/rows?state=queued")).text
        assert len(re.findall(r'name="id" value="\d+" form="bulk"', page)) == 1_000
        form = {"csrf": token, "act": "cancel:selected", "id": [str(i) for i in ids]}
        first = await http.post("/bulk", data=form, headers=ORIGIN)
        assert confirm_what(first.text) == "Cancel 1,000 rows: the queued rows among 1000 ids."
        second = await http.post("/bulk", data=confirm_fields(first.text), headers=ORIGIN)
    assert second.headers["location"] == "/rows?did=bulk&verb=cancel&n=1000&of=1000"
    assert await jobs.stats() == (0, 0, 0)


async def test_a_store_that_fails_during_a_bulk_action_is_a_503_with_a_sentence(t: int) -> None:
    store = job.Memory()
    jobs = job.Jobs(kinds=[Mail], store=store)
    await dead_rows(jobs, t, "bad@x")

    async def broken(ids: list[int], now_us: int) -> list[int]:
        raise job.StoreUnavailable("the database went away")

    store.retry_many = broken  # type: ignore[method-assign]
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        form = {"csrf": token, "act": "retry:all", "state": "dead", "confirm": "yes",
                "at_most": "1"}  # fmt: skip
        answer = await http.post("/bulk", data=form, headers=ORIGIN)
    assert (answer.status_code, answer.text) == (
        503,
        "the dashboard could not do that: the database went away",
    )


# ------------------------------------------------------------------------------- pausing


async def test_pause_and_resume_a_kind(store: Store, t: int) -> None:
    jobs = job.Jobs(kinds=[Mail, Resize], store=store)
    async with client(dashboard_app(jobs, secret=SECRET)) as http:
        token = await login(http)
        page = (await http.get("/")).text
        assert 'id="pause-mail"' in page
        assert 'id="resume-mail"' not in page
        paused = await http.post("/pause", data={"csrf": token, "kind": "mail"}, headers=ORIGIN)
        twice = await http.post("/pause", data={"csrf": token, "kind": "mail"}, headers=ORIGIN)
        assert list(await jobs.paused()) == ["mail"]
        page = (await http.get(paused.headers["location"])).text
        # Pushes are still taken; the paused kind's rows wait, the others run.
        await jobs.push(Mail(to="a@x"), at=t)
        await jobs.push(Resize(n=1), at=t)
        assert await jobs.drain_at(t) == 1
        resumed = await http.post("/resume", data={"csrf": token, "kind": "mail"}, headers=ORIGIN)
        again = await http.post("/resume", data={"csrf": token, "kind": "mail"}, headers=ORIGIN)
        after = (await http.get("/")).text
        unknown = await http.post("/pause", data={"csrf": token, "kind": "nope"}, headers=ORIGIN)
    assert [a.headers["location"] for a in (paused, twice, resumed, again)] == [
        "/?did=paused&kind=mail",
        "/?did=was_paused&kind=mail",
        "/?did=resumed&kind=mail",
        "/?did=not_paused&kind=mail",
    ]
    assert flash(page) == "mail is paused: no process starts its rows until it is resumed."
    assert '<span class="badge paused" id="paused-mail">paused</span>' in page
    assert 'id="resume-mail"' in page
    assert 'id="pause-mail"' not in page
    assert 'id="paused-resize"' not in page
    assert 'id="paused-mail"' not in after
    assert 'id="pause-mail"' in after
    assert await jobs.paused() == {}
    assert await jobs.drain_at(t) == 1
    assert (unknown.status_code, unknown.text) == (
        400,
        "refused: 'nope' is not a kind of this queue (mail, resize)",
    )
