"""A queue for the command line's tests, on the store that `NILO_TEST_APP_URL` names, built at
import: one kind, `welcome-mail`, renamed from `send-welcome` (its `aliases`), so that `check`
reads the table's rows by name."""

from __future__ import annotations

import os
from dataclasses import dataclass

import nilo_job as job


@dataclass
class WelcomeMail:
    nilo_job = "welcome-mail"
    aliases = ("send-welcome",)
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


jobs = job.Jobs(kinds=[WelcomeMail], store=job.Table(os.environ["NILO_TEST_APP_URL"]))
