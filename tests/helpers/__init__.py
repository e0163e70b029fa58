"""What the tests share that is not a test: queues that worker processes and the command line
import by name (`tests.helpers.procs_kinds:jobs`, `tests.helpers.cli_ops_queue:make`), waits and
worker processes, the Django scenarios run in a process of their own, and old table schemas."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository's folder: where child processes run, so that they import `tests.helpers.…` (and
`examples.…`, `demo`) as this process does."""
