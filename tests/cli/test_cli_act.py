"""`nilo-job retry | cancel | delete` on several ids, on `--all` rows a filter matches, and with
`--dry-run`, on SQLite and PostgreSQL, over a database URL and over `module:attr`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result

from tests.helpers.cli_ops import nilo_job, rows_of
from tests.helpers.cli_ops_queue import URL_ENV

NOT_CANCELLED = (
    "Error: job 99 was not cancelled: no queued row has that id (a worker may hold it, or it "
    "finished, died or never existed)\n"
)


@pytest.fixture(params=["url", "module"])
def target(request: pytest.FixtureRequest, url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Rows 1 and 2 dead (ops-mail, Rejected), 3 and 5 queued (5 holding welcome-d), 4 done
    (ops-note); TARGET as the URL or as module:attr."""
    rows_of(url)
    if request.param == "module":
        monkeypatch.setenv(URL_ENV, url)
        return "tests.helpers.cli_ops_queue:make"
    return url


def said(done: Result) -> tuple[int, str, str]:
    return done.exit_code, done.stdout, done.stderr


def counts(target: str) -> dict[str, int]:
    found: dict[str, int] = json.loads(nilo_job("stats", target, "--json").stdout)
    del found["paused"]
    return found


def test_retry_and_cancel_many(target: str) -> None:
    before = {"queued": 2, "running": 0, "dead": 2, "done": 1}
    assert said(nilo_job("retry", target, "1", "2", "3", "--dry-run")) == (
        0,
        "would retry 2 of 3 jobs; nothing was changed\n",
        "",
    )
    assert said(nilo_job("retry", target, "--all", "--dry-run")) == (
        0,
        "would retry 2 jobs: every dead row; nothing was changed\n",
        "",
    )
    done = nilo_job("retry", target, "--all", "--kind", "ops-note", "--dry-run", "--json")
    assert (done.exit_code, json.loads(done.stdout)) == (
        0,
        {"filter": "dead rows of ops-note", "would_retry": 0, "dry_run": True},
    )
    done = nilo_job("retry", target, "2", "3", "--dry-run", "--json")
    assert json.loads(done.stdout) == {"ids": [2, 3], "would_retry": 1, "dry_run": True}
    assert counts(target) == before

    assert said(nilo_job("retry", target, "--all", "--error", "Rejected")) == (
        0,
        "queued 2 jobs again, from the first attempt: dead rows that failed with Rejected\n",
        "",
    )
    assert counts(target) == {"queued": 4, "running": 0, "dead": 0, "done": 1}
    assert said(nilo_job("retry", target, "1", "2")) == (1, "", "Error: no dead jobs 1, 2\n")
    done = nilo_job("retry", target, "1", "2", "--json")
    assert (done.exit_code, json.loads(done.stdout)) == (
        1,
        [{"id": 1, "retried": False}, {"id": 2, "retried": False}],
    )
    assert said(nilo_job("retry", target, "--all", "--kind", "ops-mail")) == (
        0,
        "queued 0 jobs again, from the first attempt: dead rows of ops-mail\n",
        "",
    )

    assert said(nilo_job("cancel", target, "1", "2", "99")) == (
        1,
        "cancelled job 1\ncancelled job 2\n",
        NOT_CANCELLED,
    )
    assert said(nilo_job("cancel", target, "--all", "--key", "welcome-d", "--dry-run")) == (
        0,
        "would cancel 1 job: queued rows holding the key 'welcome-d'; nothing was changed\n",
        "",
    )
    done = nilo_job("cancel", target, "--all", "--json")
    assert (done.exit_code, json.loads(done.stdout)) == (
        0,
        {"filter": "every queued row", "cancelled": 2, "dry_run": False},
    )
    assert said(nilo_job("cancel", target, "3", "5")) == (
        1,
        "",
        "Error: jobs 3, 5 were not cancelled: no queued row has those ids (a worker may hold "
        "them, or they finished, died or never existed)\n",
    )
    assert counts(target) == {"queued": 0, "running": 0, "dead": 0, "done": 1}


def test_delete_dead_and_done_rows(target: str) -> None:
    done = nilo_job("delete", target, "4", "--dry-run", "--json")
    assert json.loads(done.stdout) == {"ids": [4], "would_delete": 1, "dry_run": True}
    assert said(nilo_job("delete", target, "--all", "--dry-run")) == (
        0,
        "would delete 3 jobs: every dead and done row; nothing was changed\n",
        "",
    )
    assert said(nilo_job("delete", target, "--all", "--state", "dead", "--dry-run")) == (
        0,
        "would delete 2 jobs: every dead row; nothing was changed\n",
        "",
    )
    assert said(nilo_job("delete", target, "4", "3")) == (
        1,
        "deleted job 4\n",
        "Error: job 3 was not deleted: no dead or done row has that id (cancel takes back a "
        "queued row; a running one is a worker's)\n",
    )
    done = nilo_job("delete", target, "4", "--json")
    assert (done.exit_code, json.loads(done.stdout)) == (1, {"id": 4, "deleted": False})
    assert said(nilo_job("delete", target, "--all", "--kind", "ops-note")) == (
        0,
        "deleted 0 jobs: dead and done rows of ops-note\n",
        "",
    )
    assert said(nilo_job("delete", target, "--all", "--state", "dead", "--error", "Rejected")) == (
        0,
        "deleted 2 jobs: dead rows that failed with Rejected\n",
        "",
    )
    assert counts(target) == {"queued": 2, "running": 0, "dead": 0, "done": 0}
    assert said(nilo_job("delete", target, "--all")) == (
        0,
        "deleted 0 jobs: every dead and done row\n",
        "",
    )


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["retry", "1", "--all"], "give ids or --all, not both"),
        (["retry", "--kind", "ops-mail"], "the filters pick rows with --all: add --all"),
        (["delete", "4", "--state", "dead"], "the filters pick rows with --all: add --all"),
        (["retry"], "give the id of a dead row, several ids, or --all (narrowed by --kind, "),
        (["delete"], "give the id of a dead or done row, several ids, or --all"),
        (["delete", "--all", "--state", "queued"], "'queued' is not one of 'dead', 'done'"),
        (["cancel", "--all", "--state", "dead"], "No such option '--state'"),
        (["retry", "--all", "--kind", "m\udcff"], "'m\\udcff' is not valid UTF-8 text, so no"),
        (["cancel", "--all", "--key", "a\x00b"], "it holds a NUL character, so no row holds it"),
    ],
)
def test_what_cannot_be_meant_is_a_usage_error(
    args: list[str], sentence: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/q.db"
    assert nilo_job("migrate", url).exit_code == 0
    done = nilo_job(args[0], url, *args[1:])
    assert done.exit_code == 2
    assert sentence in done.stderr
    assert "Traceback" not in done.stderr
