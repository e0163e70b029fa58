"""The `nilo-job` command: a worker process, the refusals for CI, and an operator's commands.

    nilo-job worker  module:attr [--workers N] [--grace-ms MS] [--kinds A,B] [--health-port P]
    nilo-job ready   module:attr                   exit 0 when the store answers (an exec probe)
    nilo-job check   module:attr [--json]          every refusal, exit 1 on any
    nilo-job stats   TARGET [--json]               rows by state, and the paused kinds
    nilo-job dead    TARGET [--limit N] [--json]   the dead rows, newest first
    nilo-job list    TARGET [--state S] [--kind K] [--error E] [--key KEY] [--limit N]
                            [--after CURSOR] [--json]
    nilo-job show    TARGET ID [--json]            a row's whole story
    nilo-job retry   TARGET ID... | --all [filters] [--dry-run] [--json]
    nilo-job cancel  TARGET ID... | --all [filters] [--dry-run] [--json]
    nilo-job delete  TARGET ID... | --all [--state S] [filters] [--dry-run] [--json]
    nilo-job pause   TARGET KIND [--json]          stop claiming a kind's rows everywhere
    nilo-job resume  TARGET KIND [--json]
    nilo-job migrate TARGET [--json]               create the nilo_jobs table where it is missing
    nilo-job workers TARGET [--json]               the serving processes, alive or lost
    nilo-job dashboard module:attr [...]

`module:attr` names a `job.Jobs` (or a function of no arguments returning one), imported with the
current directory on `sys.path`, as uvicorn does. The operator commands also take the database's
URL as TARGET (`sqlite:///app.db`, `postgresql://user@host/db`, `mariadb://user@host:3306/db` or
`mysql://…`): they then work on the table alone, with no kinds. `--log-level` and `--log-format`
go before or after the subcommand. Every failure is one sentence on stderr and exit status 1 (2
for a usage error), never a traceback. docs/cli.md says it all with examples. Each command lives
in a module of this package.
"""

from __future__ import annotations

import click

from ._act import cancel, delete, retry
from ._check import check
from ._dashboard import dashboard_command
from ._log import log_options, with_log_options
from ._pause import pause, resume
from ._read import dead, list_rows, show, stats
from ._target import Target, open_target, run_on
from ._text import JSON_OPTION, TARGET_HELP, print_json
from ._worker import ready, worker
from ._workers import workers


@with_log_options
@click.group()
@click.version_option(package_name="nilo-job", prog_name="nilo-job", message="%(prog)s %(version)s")
def main() -> None:
    """nilo-job: run and inspect a job queue."""


@click.command(epilog=TARGET_HELP, short_help="Create the nilo_jobs table, or upgrade it in place.")
@click.argument("target")
@JSON_OPTION
def migrate(target: str, as_json: bool) -> None:
    """Create the nilo_jobs table and its indexes where they are missing, or upgrade a table
    made by an older nilo-job in place, keeping every row; then check it.

    Idempotent, and safe to run from several deploys at once; workers of the older version
    keep working on an upgraded table. A SQLite file is created if missing (the only command
    that creates one).
    """

    async def create(found: Target) -> str:
        await found.store.create_missing()
        await found.store.check()
        return repr(found.store)

    where = run_on(open_target(target), create, check=False)
    if as_json:
        print_json({"table": "nilo_jobs", "store": where, "ready": True})
    else:
        click.echo(f"nilo_jobs is ready in {where}")


for _command in (
    worker,
    ready,
    check,
    stats,
    dead,
    list_rows,
    show,
    retry,
    cancel,
    delete,
    pause,
    resume,
    migrate,
    workers,
    dashboard_command,
):
    # The group's logging options are taken after the subcommand too.
    if not any(param.name == "log_level" for param in _command.params):
        _command.params.extend(log_options())
    main.add_command(_command)
