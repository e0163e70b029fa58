"""The `nilo-job` group itself: `--version`, `--log-level`/`--log-format` before or after the
subcommand, the JSON lines format, and the sentence for a URL given where the queue's kinds are
needed (worker, dashboard, check) or a `--kinds` the queue lacks."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import click
import pytest

from nilo_job.cli._log import JsonLines
from tests.helpers.cli_ops import nilo_job
from tests.helpers.cli_ops_queue import URL_ENV


def test_version_prints_the_package_version() -> None:
    from importlib.metadata import version

    done = nilo_job("--version")
    assert (done.exit_code, done.stdout) == (0, f"nilo-job {version('nilo-job')}\n")
    done = subprocess.run(
        [sys.executable, "-m", "nilo_job", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, f"nilo-job {version('nilo-job')}\n")


@pytest.mark.parametrize(
    "args",
    [
        ["--log-level", "debug", "stats", "{url}"],
        ["stats", "{url}", "--log-level", "debug"],
        ["--log-format", "json", "stats", "{url}", "--log-level", "WARNING"],
        ["stats", "--log-format", "json", "{url}"],
    ],
)
def test_the_log_options_go_before_or_after_the_subcommand(args: list[str], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/q.db"
    assert nilo_job("migrate", url).exit_code == 0
    done = nilo_job(*(arg.format(url=url) for arg in args))
    assert (done.exit_code, done.stdout) == (0, "queued   0\nrunning  0\ndead     0\ndone     0\n")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["stats", "sqlite:///x.db", "--log-level", "NOPE"], "'NOPE' is not one of"),
        (["--log-format", "xml", "stats", "sqlite:///x.db"], "'xml' is not one of 'text', 'json'"),
    ],
)
def test_a_bad_log_option_is_a_usage_error(args: list[str], said: str) -> None:
    done = nilo_job(*args)
    assert done.exit_code == 2
    assert said in done.stderr


def test_json_lines_carry_the_fields_the_library_sets() -> None:
    record = logging.LogRecord(
        "nilo_job", logging.WARNING, __file__, 1, "%s row %d failed", ("mail", 7), None
    )
    record.created = 1_700_000_000.25
    for name, value in {
        "kind": "mail",
        "row": 7,
        "attempt": 2,
        "error": "Timeout",
        "ms": 1.5,
    }.items():
        setattr(record, name, value)
    assert json.loads(JsonLines().format(record)) == {
        "time": "2023-11-14T22:13:20.250000Z",
        "level": "WARNING",
        "logger": "nilo_job",
        "message": "mail row 7 failed",
        "kind": "mail",
        "row": 7,
        "attempt": 2,
        "error": "Timeout",
        "ms": 1.5,
    }
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord(
            "nilo_job", logging.ERROR, __file__, 1, "it failed", (), sys.exc_info()
        )
    line = json.loads(JsonLines().format(failed))
    assert line["message"] == "it failed"
    assert line["traceback"].startswith("Traceback (most recent call last):\n")
    assert line["traceback"].endswith("ValueError: boom")


@pytest.mark.parametrize("command", ["worker", "dashboard", "check"])
@pytest.mark.parametrize("url", ["sqlite:///app.db", "postgresql://me@db/app"])
def test_a_url_where_the_queue_is_needed_is_one_sentence(command: str, url: str) -> None:
    done = nilo_job(command, url)
    assert (done.exit_code, done.stdout, done.stderr) == (
        1,
        "",
        f"Error: {url} is a database URL, but `nilo-job {command}` needs the queue's kinds: "
        "pass module:attr naming your job.Jobs (or a function returning one), like "
        "myapp.jobs:jobs\n",
    )


def test_worker_kinds_the_queue_lacks_are_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(URL_ENV, f"sqlite:///{tmp_path}/q.db")
    target = "tests.helpers.cli_ops_queue:make"
    done = nilo_job("worker", target, "--kinds", "ops-mail,nope", "--kinds", "lost")
    assert (done.exit_code, done.stdout, done.stderr) == (
        1,
        "",
        "Error: tests.helpers.cli_ops_queue:make has no kind nope, lost: its kinds are ops-mail, "
        "ops-note\n",
    )


def test_worker_kinds_reads_commas_and_repeats() -> None:
    from nilo_job.cli._worker import kind_list

    assert kind_list(()) is None
    assert kind_list(("a,b", "c", "a", " d , ")) == ["a", "b", "c", "d"]
    with pytest.raises(click.UsageError, match="--kinds names no kind"):
        kind_list((",",))
