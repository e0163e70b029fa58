"""A queue that cannot work, for the CLI tests: its kind says no retry, so building it at import is
a `job.Refusal`, and `nilo-job check tests.helpers.kinds_broken:jobs` fails with the sentence."""

from dataclasses import dataclass

import nilo_job as job


@dataclass
class Unready:
    nilo_job = "unready"

    user_id: int

    def run(self) -> None:
        pass


jobs = job.Jobs(kinds=[Unready], store=job.Memory())
