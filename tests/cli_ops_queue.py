"""A queue for the operator-command tests: `nilo-job stats tests.cli_ops_queue:make`.

`make()` builds it over the database URL in NILO_JOB_OPS_URL, read at each call, so each test
names its own database.
"""

import os
from dataclasses import dataclass

import nilo_job as job

URL_ENV = "NILO_JOB_OPS_URL"


class Rejected(Exception):
    """The provider refused the address."""


@dataclass
class Mail:
    nilo_job = "ops-mail"
    retry = job.Retry.NONE

    to: str
    fail: bool = False

    def run(self) -> None:
        if self.fail:
            raise Rejected(f"550 {self.to}")


def make(url: str | None = None) -> job.Jobs:
    return job.Jobs(kinds=[Mail], store=job.Table(url or os.environ[URL_ENV]))
