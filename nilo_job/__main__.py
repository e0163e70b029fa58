"""`python -m nilo_job`: the `nilo-job` command, where the script is not on PATH."""

from .cli import main

main(prog_name="nilo-job")
