"""The operator's commands given a MariaDB/MySQL URL as TARGET: what they say the table is, the
worker registry on the database's clock, and a URL they cannot read as meant."""

from __future__ import annotations

import json

import pytest

from nilo_job.store._target import shown
from tests.helpers.cli_ops import nilo_job

asyncmy = pytest.importorskip("asyncmy")

from nilo_job.store.mysql.connections import server_of  # noqa: E402


def test_migrate_names_the_table_with_its_user_as_on_postgresql(mariadb_url: str) -> None:
    where = f"job.Table('{shown(mariadb_url)}')"  # the user kept, never a password
    assert f"mariadb://{server_of(mariadb_url).user}@" in where
    done = nilo_job("migrate", mariadb_url)
    assert (done.exit_code, done.stdout) == (0, f"nilo_jobs is ready in {where}\n")
    done = nilo_job("migrate", mariadb_url, "--json")
    assert (done.exit_code, json.loads(done.stdout)) == (
        0,
        {"table": "nilo_jobs", "store": where, "ready": True},
    )
    assert nilo_job("stats", mariadb_url).stdout == (
        "queued   0\nrunning  0\ndead     0\ndone     0\n"
    )


def test_workers_reads_the_registry_of_a_mariadb_table(mariadb_url: str) -> None:
    done = nilo_job("workers", mariadb_url)
    assert (done.exit_code, done.stdout) == (0, "no worker process is registered\n")
    done = nilo_job("workers", mariadb_url, "--json")
    assert done.exit_code == 0
    assert json.loads(done.stdout)["workers"] == []


def test_a_raw_at_in_the_password_is_refused_in_one_sentence() -> None:
    done = nilo_job("stats", "mysql://root:p@ss@127.0.0.1:1/db")
    assert done.exit_code == 1
    assert done.stderr == (
        "Error: job.Table('mysql://root@127.0.0.1:1/db') cannot be read as meant: its user or "
        "password holds an '@' that is not percent-encoded, so a piece of the password may be "
        "read as the host; percent-encode the user and the password "
        "(urllib.parse.quote(password, safe='') writes '@' as %40, ':' as %3A and '/' as %2F)\n"
    )
