"""A well-formed queue for the CLI tests: `nilo-job check tests.helpers.kinds_ok:jobs` passes.

The store is the SQLite file named by the NILO_JOB_TEST_DB environment variable, or a
`job.Memory` when it is not set (as when pytest imports this module).
"""

import os
from dataclasses import dataclass

import nilo_job as job
from nilo_job.store.contract import Store

DB_ENV = "NILO_JOB_TEST_DB"


@dataclass
class Welcome:
    nilo_job = "ok-welcome"
    retry = job.Retry(times=3, backoff=job.Exponential(from_ms=1_000, to_ms=60_000))

    user_id: int

    def run(self) -> None:
        pass


@dataclass
class Report:
    nilo_job = "ok-report"
    retry = job.Retry.NONE
    timeout_ms = 120_000

    fail: bool = False

    def run(self) -> None:
        if self.fail:
            raise RuntimeError("the report failed")


def _store() -> Store:
    path = os.environ.get(DB_ENV)
    return job.Table(f"sqlite:///{path}") if path else job.Memory()


jobs = job.Jobs(kinds=[Welcome, Report], store=_store())
