"""What the tests of how a run ends share: errors for runs to raise, and `read`, which checks the
tracebacks of dead rows and sets them aside."""

import dataclasses

import nilo_job as job

MS = 1_000  # microseconds in a millisecond


class Boom(Exception):
    pass


def read(dead: list[job.Dead]) -> list[job.Dead]:
    """`dead` with each traceback checked (a Python traceback ending in the error's name and
    message; none for a row that did not run) and then set aside, so the rest compares exactly."""
    for row in dead:
        if row.error == "BadPayload":
            assert row.traceback == ""
            continue
        assert row.traceback.startswith("Traceback (most recent call last):\n"), row.traceback
        last = row.traceback.rstrip("\n").rsplit("\n", 1)[-1]
        assert last.endswith(f"{row.error}: {row.message}" if row.message else row.error), last
    return [dataclasses.replace(row, traceback="") for row in dead]


class Rejected(Exception):
    pass


class HardRejected(Rejected):
    pass
