"""The command's numbers are checked against the same ranges as the calls they make: a worker's
`--workers` and `--grace-ms`, a page's `--limit`, a row id. A number out of range is a usage
error naming the option and the range (exit 2), never a traceback, and nothing is run."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nilo_job.cli import main

URL = "sqlite:///never-made.db"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["worker", URL, "--workers", "100001"],
            "Invalid value for '--workers': 100001 is not in the range 1<=x<=100000.",
        ),
        (
            ["worker", URL, "--workers", "0"],
            "Invalid value for '--workers': 0 is not in the range 1<=x<=100000.",
        ),
        (
            ["worker", URL, "--grace-ms", "315360000001"],
            "Invalid value for '--grace-ms': 315360000001 is not in the range 0<=x<=315360000000.",
        ),
        (
            ["worker", URL, "--grace-ms", "-1"],
            "Invalid value for '--grace-ms': -1 is not in the range 0<=x<=315360000000.",
        ),
        (
            ["worker", URL, "--grace-ms", "1.5"],
            "Invalid value for '--grace-ms': '1.5' is not a valid integer range.",
        ),
        (
            ["dead", URL, "--limit", "100001"],
            "Invalid value for '--limit': 100001 is not in the range 1<=x<=100000.",
        ),
        (
            ["list", URL, "--limit", "1001"],
            "Invalid value for '--limit': 1001 is not in the range 1<=x<=1000.",
        ),
        (
            ["show", URL, "9223372036854775808"],
            "Invalid value for 'ID': 9223372036854775808 is not in the range "
            "1<=x<=9223372036854775807.",
        ),
        (
            ["delete", URL, "1", "0"],
            "Invalid value for '[ID]...': 0 is not in the range 1<=x<=9223372036854775807.",
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_a_number_out_of_range_is_a_usage_error_naming_the_range(
    args: list[str], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 2, done.output
    assert done.output.splitlines()[-1] == f"Error: {said}"
    assert done.exception is None or isinstance(done.exception, SystemExit)
    assert not (tmp_path / "never-made.db").exists()
