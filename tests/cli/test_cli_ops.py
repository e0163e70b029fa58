"""The operator's commands: `nilo-job stats | dead | retry ID | cancel ID | migrate`, on SQLite and
PostgreSQL, against a database URL and against `module:attr`.

Most run in this process through click's runner; the last ones run the installed `nilo-job` as CI
and operators do, for its exit codes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.helpers.cli_ops import QUEUE_FILE, RAISE_LINE, T, fill, nilo_job
from tests.helpers.cli_ops_queue import URL_ENV

NILO_JOB = Path(sys.executable).parent / "nilo-job"

DEAD_TABLE = (
    "ID  KIND      ERROR     MESSAGE            ATTEMPTS  DIED (UTC)           PAYLOAD\n"
    "2   ops-mail  Rejected  550 b@example.com  1         2023-11-14 22:13:21  "
    '{"to":"b@example.com","fail":true}\n'
    "1   ops-mail  Rejected  550 a@example.com  1         2023-11-14 22:13:20  "
    '{"to":"a@example.com","fail":true}\n'
)


def test_stats_dead_retry_and_cancel_over_a_database_url(url: str) -> None:
    fill(url)

    done = nilo_job("stats", url)
    assert (done.exit_code, done.stdout) == (0, "queued   1\nrunning  0\ndead     2\ndone     0\n")
    done = nilo_job("stats", url, "--json")
    assert json.loads(done.stdout) == {
        "queued": 1,
        "running": 0,
        "dead": 2,
        "done": 0,
        "paused": {},
    }

    done = nilo_job("dead", url)
    assert (done.exit_code, done.stdout) == (0, DEAD_TABLE)
    done = nilo_job("dead", url, "--limit", "1", "--json")
    assert done.exit_code == 0
    assert json.loads(done.stdout) == [
        {
            "id": 2,
            "kind": "ops-mail",
            "error": "Rejected",
            "attempts": 1,
            "died_at": T + 1_000_000,
            "payload": {"to": "b@example.com", "fail": True},
            "payload_cut": False,
            "message": "550 b@example.com",
            "traceback": (
                "Traceback (most recent call last):\n"
                f'  File "{QUEUE_FILE}", line {RAISE_LINE}, in run\n'
                '    raise Rejected(f"550 {self.to}")\n'
                "tests.helpers.cli_ops_queue.Rejected: 550 b@example.com\n"
            ),
        }
    ]

    done = nilo_job("retry", url, "1")
    assert (done.exit_code, done.stdout) == (0, "job 1 is queued again, from its first attempt\n")
    done = nilo_job("retry", url, "1")
    assert (done.exit_code, done.stdout, done.stderr) == (1, "", "Error: no dead job 1\n")
    done = nilo_job("retry", url, "2", "--json")
    assert (done.exit_code, json.loads(done.stdout)) == (0, {"id": 2, "retried": True})
    done = nilo_job("retry", url, "2", "--json")
    assert (done.exit_code, json.loads(done.stdout)) == (1, {"id": 2, "retried": False})
    assert done.stderr == "Error: no dead job 2\n"
    assert json.loads(nilo_job("stats", url, "--json").stdout) == {
        "queued": 3,
        "running": 0,
        "dead": 0,
        "done": 0,
        "paused": {},
    }
    assert nilo_job("dead", url).stdout == "no dead jobs\n"
    assert json.loads(nilo_job("dead", url, "--json").stdout) == []

    done = nilo_job("cancel", url, "3")
    assert (done.exit_code, done.stdout) == (0, "cancelled job 3\n")
    done = nilo_job("cancel", url, "3")
    assert done.exit_code == 1
    assert done.stderr == (
        "Error: job 3 was not cancelled: no queued row has that id (a worker may hold it, or it "
        "finished, died or never existed)\n"
    )
    done = nilo_job("cancel", url, "1", "--json")
    assert (done.exit_code, json.loads(done.stdout)) == (0, {"id": 1, "cancelled": True})
    done = nilo_job("cancel", url, "1", "--json")
    assert (done.exit_code, json.loads(done.stdout)) == (1, {"id": 1, "cancelled": False})
    assert json.loads(nilo_job("stats", url, "--json").stdout) == {
        "queued": 1,
        "running": 0,
        "dead": 0,
        "done": 0,
        "paused": {},
    }


def test_the_commands_through_module_attr(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(url)
    monkeypatch.setenv(URL_ENV, url)
    target = "tests.helpers.cli_ops_queue:make"

    assert nilo_job("stats", target).stdout == "queued   1\nrunning  0\ndead     2\ndone     0\n"
    assert nilo_job("dead", target).stdout == DEAD_TABLE
    done = nilo_job("retry", target, "2")
    assert (done.exit_code, done.stdout) == (0, "job 2 is queued again, from its first attempt\n")
    done = nilo_job("cancel", target, "2")
    assert (done.exit_code, done.stdout) == (0, "cancelled job 2\n")
    done = nilo_job("cancel", target, "2")
    assert done.exit_code == 1
    assert json.loads(nilo_job("stats", target, "--json").stdout) == {
        "queued": 1,
        "running": 0,
        "dead": 1,
        "done": 0,
        "paused": {},
    }
    done = nilo_job("migrate", target)
    assert done.exit_code == 0
    assert done.stdout.startswith("nilo_jobs is ready in job.Table(")


def test_migrate_creates_the_table_once_and_again_is_a_no_op(url: str, tmp_path: Path) -> None:
    if url.startswith("postgresql"):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE nilo_jobs")
        where = f"job.Table('postgresql://postgres@127.0.0.1:5432/{url.rsplit('/', 1)[1]}')"
        said = f"Error: there is no nilo_jobs table in {where}: "
    else:
        where = f"job.Table('sqlite:///{tmp_path}/q.db')"
        said = f"Error: there is no SQLite database at {tmp_path}/q.db: "
        assert not (tmp_path / "q.db").exists()

    missing = nilo_job("stats", url)
    assert missing.exit_code == 1
    assert missing.stderr.startswith(said)

    done = nilo_job("migrate", url)
    assert (done.exit_code, done.stdout) == (0, f"nilo_jobs is ready in {where}\n")
    done = nilo_job("migrate", url, "--json")
    assert (done.exit_code, json.loads(done.stdout)) == (
        0,
        {"table": "nilo_jobs", "store": where, "ready": True},
    )
    assert nilo_job("stats", url).stdout == "queued   0\nrunning  0\ndead     0\ndone     0\n"


def test_a_mistyped_sqlite_path_is_said_and_no_file_is_made(tmp_path: Path) -> None:
    typo = tmp_path / "typo.db"
    for command in (["stats"], ["dead"], ["retry", "1"], ["cancel", "1"]):
        done = nilo_job(command[0], f"sqlite:///{typo}", *command[1:])
        assert done.exit_code == 1
        assert done.stderr == (
            f"Error: there is no SQLite database at {typo}: check the path "
            "(sqlite:///relative.db, sqlite:////absolute.db), or create it and its table with "
            f"`nilo-job migrate sqlite:///{typo}` (or await table.create_missing())\n"
        )
    assert not typo.exists()


def test_a_url_that_is_no_database_nilo_job_knows_is_refused() -> None:
    done = nilo_job("stats", "mssql://db/app")
    assert done.exit_code == 1
    assert done.stderr.startswith("Error: job.Table('mssql://db/app'): pass a URL, ")


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_the_installed_command_exits_1_when_the_row_is_not_there(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if store == "postgres":
        url: str = request.getfixturevalue("pg_url")
    else:
        url = f"sqlite:///{tmp_path}/q.db"
        assert nilo_job("migrate", url).exit_code == 0
    for args, sentence in (
        (["retry", url, "99"], "Error: no dead job 99\n"),
        (
            ["cancel", url, "99"],
            "Error: job 99 was not cancelled: no queued row has that id (a worker may hold it, "
            "or it finished, died or never existed)\n",
        ),
    ):
        done = subprocess.run(
            [str(NILO_JOB), *args], capture_output=True, text=True, timeout=60, check=False
        )
        assert (done.returncode, done.stdout, done.stderr) == (1, "", sentence)
    done = subprocess.run(
        [str(NILO_JOB), "stats", url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, json.loads(done.stdout)) == (
        0,
        {"queued": 0, "running": 0, "dead": 0, "done": 0, "paused": {}},
    )


def test_a_sqlite_file_without_the_table_is_said(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    done = nilo_job("dead", f"sqlite:///{empty}")
    assert done.exit_code == 1
    assert done.stderr == (
        f"Error: there is no nilo_jobs table in {empty}: create it with `nilo-job migrate "
        f"sqlite:///{empty}` (or await table.create_missing())\n"
    )


SHOP = """
import dataclasses

import nilo_job as job


@dataclasses.dataclass
class ChargeCard:
    nilo_job = "charge-card"
    retry = job.Retry.NONE

    amount: int

    async def run(self) -> None:
        pass


jobs = job.Jobs(kinds=[ChargeCard], store=job.Table("sqlite:///shop.db"))


def make(url: str) -> job.Jobs:
    return job.Jobs(kinds=[ChargeCard], store=job.Table(url))
"""


@pytest.mark.parametrize(
    "command",
    [
        ["stats"],
        ["dead"],
        ["list"],
        ["show", "1"],
        ["retry", "1"],
        ["cancel", "1"],
        ["delete", "1"],
        ["pause", "charge-card"],
        ["resume", "charge-card"],
        ["worker"],
    ],
)
def test_a_queue_on_a_missing_sqlite_file_is_said_and_no_file_is_made(
    command: list[str], tmp_path: Path
) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").touch()
    (tmp_path / "shop" / "jobs.py").write_text(SHOP)
    done = subprocess.run(
        [str(NILO_JOB), command[0], "shop.jobs:jobs", *command[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "Error: there is no SQLite database at shop.db: check the path (sqlite:///relative.db, "
        "sqlite:////absolute.db), or create it and its table with `nilo-job migrate "
        "sqlite:///shop.db` (or await table.create_missing())"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop"]


@pytest.mark.parametrize(
    ("target", "said"),
    [
        (
            "shop.jobs:ChargeCard",
            "shop.jobs:ChargeCard is a class, not a job.Jobs: the queue in shop.jobs is "
            "shop.jobs:jobs",
        ),
        (
            "shop/jobs.py:jobs",
            "shop/jobs.py is a file's path; name its module with dots instead, run from the "
            "folder that holds it: shop.jobs:jobs",
        ),
        (
            "shop/jobs:jobs",
            "shop/jobs is a file's path; name its module with dots instead, run from the "
            "folder that holds it: shop.jobs:jobs",
        ),
        (
            "shop.jobs:make",
            "shop.jobs:make takes url; nilo-job calls a factory with no arguments: name the "
            "job.Jobs itself, or a function of none that returns it",
        ),
        (
            "shop.jobs:dataclasses",
            "shop.jobs:dataclasses is a module, not a job.Jobs: the queue in shop.jobs is "
            "shop.jobs:jobs",
        ),
    ],
)
def test_a_target_that_is_not_a_queue_is_said_with_what_was_meant(
    target: str, said: str, tmp_path: Path
) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").touch()
    (tmp_path / "shop" / "jobs.py").write_text(SHOP)
    done = subprocess.run(
        [str(NILO_JOB), "stats", target],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (1, f"Error: {said}\n")


def test_migrate_says_it_upgrades_too() -> None:
    done = nilo_job("migrate", "--help")
    assert done.exit_code == 0
    assert " ".join(done.stdout.split()).startswith(
        "Usage: main migrate [OPTIONS] TARGET Create the nilo_jobs table and its indexes "
        "where they are missing, or upgrade a table made by an older nilo-job in place, keeping "
        "every row; then check it."
    )
    assert "Create the nilo_jobs table, or upgrade it in place." in nilo_job("--help").stdout
