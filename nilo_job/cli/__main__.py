"""`python -m nilo_job.cli`: the `nilo-job` command, as `python -m nilo_job` runs it too."""

from . import main

main(prog_name="nilo-job")
