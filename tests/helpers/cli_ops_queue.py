"""A queue for the operator-command tests: `nilo-job stats tests.helpers.cli_ops_queue:make`.

`make()` builds it over the database URL in NILO_JOB_OPS_URL, read at each call, so each test
names its own database; NILO_JOB_OPS_POLL_MS sets its poll_ms (default 1,000), for the tests that
run a worker process.
"""

import os
from dataclasses import dataclass

import nilo_job as job

URL_ENV = "NILO_JOB_OPS_URL"
POLL_ENV = "NILO_JOB_OPS_POLL_MS"


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


@dataclass
class Note:
    nilo_job = "ops-note"
    retry = job.Retry.NONE

    text: str

    def run(self) -> dict[str, str]:
        return {"noted": self.text}


def make(url: str | None = None) -> job.Jobs:
    return job.Jobs(
        kinds=[Mail, Note],
        store=job.Table(url or os.environ[URL_ENV]),
        poll_ms=int(os.environ.get(POLL_ENV, "1000")),
    )
