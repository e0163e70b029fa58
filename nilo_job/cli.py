"""The `nilo-job` command: a worker process, the refusals for CI, and an operator's commands.

    nilo-job worker  module:attr [--workers N] [--grace-ms MS]
    nilo-job check   module:attr
    nilo-job stats   TARGET [--json]             how many rows are queued, running and dead
    nilo-job dead    TARGET [--limit N] [--json] the dead rows, newest first
    nilo-job retry   TARGET ID [--json]          queue a dead row again from its first attempt
    nilo-job cancel  TARGET ID [--json]          take back a queued row
    nilo-job migrate TARGET [--json]             create the nilo_jobs table where it is missing

`module:attr` names a `job.Jobs` (or a function of no arguments returning one), imported with the
current directory on `sys.path`, as uvicorn does. The operator commands also take the database's
URL as TARGET (`sqlite:///app.db`, `postgresql://user@host/db`): they then work on the table
alone, with no kinds, which is all a count, a retry or a cancel needs. A thin edge: everything it
does is public API or a store's own methods. `retry` and `cancel` exit 1 when the row is not
there to retry or cancel; every failure is one sentence on stderr, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import click

from ._clock import now_us
from ._errors import JobError, Refusal
from ._load import load
from ._queue import Jobs
from ._queue import dead as dead_value
from ._table import Table
from ._values import Dead, Stats
from .dashboard import dashboard_command
from .store.contract import Store

T = TypeVar("T")


@click.group()
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Python logging level.",
)
def main(log_level: str) -> None:
    """nilo-job: run and inspect a job queue."""
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


@main.command()
@click.argument("target")
@click.option(
    "--workers", type=click.IntRange(min=1), help="Rows running at once (default: the queue's)."
)
@click.option(
    "--grace-ms",
    type=click.IntRange(min=0),
    default=30_000,
    show_default=True,
    help="On SIGTERM/SIGINT, how long running rows may finish before they are cancelled.",
)
def worker(target: str, workers: int | None, grace_ms: int) -> None:
    """Run the queue's workers until SIGTERM or SIGINT.

    On the first signal it stops claiming, lets running rows finish for --grace-ms, then cancels
    them and queues their rows again; a second signal ends the grace period at once.
    """
    # A signal that arrives while the target is still importing stops the worker before it
    # claims anything, rather than killing it with the default handler.
    early: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: early.append(received))
    jobs = load(target)
    if workers is not None:
        jobs.workers = workers
    try:
        asyncio.run(_work(jobs, grace_ms, early))
    except JobError as error:
        raise click.ClickException(str(error)) from None


async def _work(jobs: Jobs, grace_ms: int, early: list[int]) -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(jobs.serve(grace_ms=grace_ms))
    signals = 0

    def stop(signum: int) -> None:
        nonlocal signals
        signals += 1
        name = signal.Signals(signum).name
        if signals == 1:
            logging.getLogger("nilo_job").info("%s: stopping after running rows finish", name)
        else:
            logging.getLogger("nilo_job").info("%s again: cancelling running rows now", name)
        task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    for received in early:
        stop(received)
    try:
        await task
    except asyncio.CancelledError:
        if signals == 0:
            raise
    finally:
        await jobs.store.close()


@main.command()
@click.argument("target")
def check(target: str) -> None:
    """Build the queue and report every refusal; exits non-zero on one (for CI)."""
    jobs = load(target)
    names = ", ".join(kind.name for kind in jobs.kinds)
    click.echo(f"ok: {len(jobs.kinds)} kinds ({names}), lease {jobs.lease_ms} ms")


# ----------------------------------------------------------------------- operator commands


@dataclass(frozen=True, slots=True)
class Target:
    """What an operator command works on: a queue (`module:attr`), or only its table (a URL).

    With a queue the answers go through its public API, so a status Space hears of a retry or
    a cancel; with a URL they go to the store itself, which is all a table with no kinds needs.
    """

    store: Store
    jobs: Jobs | None

    async def stats(self) -> Stats:
        return await (self.jobs or self.store).stats()

    async def dead_ones(self, limit: int) -> list[Dead]:
        if self.jobs is not None:
            return await self.jobs.dead_ones(limit)
        return [dead_value(row) for row in await self.store.dead_ones(limit)]

    async def retry_dead(self, row_id: int) -> bool:
        if self.jobs is not None:
            return await self.jobs.retry_dead(row_id)
        # Due now by the database's clock when it keeps one (PostgreSQL), else by this host's.
        theirs = await self.store.now_us()
        return await self.store.retry_dead(row_id, now_us() if theirs is None else theirs)

    async def cancel(self, row_id: int) -> bool:
        return await (self.jobs or self.store).cancel(row_id)


def open_target(target: str, *, create: bool = False) -> Target:
    """The queue or table that TARGET names: a database URL (with `://`) or `module:attr`.

    Args:
        target: `sqlite:///app.db`, `postgresql://user@host/db`, or `module:attr`.
        create: a SQLite file that does not exist may be created (`migrate`); otherwise it is
            an error, so that a mistyped path is said rather than made into an empty database.

    Raises:
        click.ClickException: the URL is not a database nilo-job can use, the SQLite file is
            missing, or `module:attr` does not name a queue (see `load`).
    """
    if "://" not in target:
        jobs = load(target)
        return Target(jobs.store, jobs)
    if target.startswith("sqlite:") and not create:
        from .store.sqlite import path_from_url

        try:
            path = path_from_url(target)
        except Refusal as refusal:
            raise click.ClickException(str(refusal)) from None
        if not Path(path).is_file():
            raise click.ClickException(
                f"there is no SQLite database at {path}: check the path (sqlite:///relative.db, "
                "sqlite:////absolute.db), or create it with `nilo-job migrate`"
            )
    try:
        return Target(Table(target), None)
    except Refusal as refusal:
        raise click.ClickException(str(refusal)) from None


def run_on(target: Target, work: Callable[[Target], Awaitable[T]], *, check: bool = True) -> T:
    """`work(target)` on an event loop of its own, the table checked first, the store closed
    after.

    Raises:
        click.ClickException: the store cannot be reached or the table is missing or not
            nilo-job's (`JobError`), with the store's sentence.
    """

    async def run() -> T:
        try:
            if check:
                await target.store.check()
            return await work(target)
        finally:
            await target.store.close()

    try:
        return asyncio.run(run())
    except JobError as error:
        raise click.ClickException(str(error)) from None


def table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None) -> str:
    """`rows` as text in aligned columns, two spaces apart, under `header` when given."""
    lines = [list(header)] if header is not None else []
    lines += [list(row) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def utc(us: int) -> str:
    """Microseconds since the epoch as `YYYY-MM-DD HH:MM:SS` in UTC."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def compact(value: Any, width: int = 60) -> str:
    """`value` as one line of JSON, cut to `width` characters with an ellipsis."""
    return cut(json.dumps(value, separators=(",", ":"), ensure_ascii=False), width)


def cut(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False))


ROW_ID = click.IntRange(1, 2**63 - 1)  # a row id is a 64-bit integer on every store
TARGET_HELP = "TARGET is a database URL (sqlite:///app.db, postgresql://…) or module:attr."
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@main.command(epilog=TARGET_HELP, short_help="Count the rows queued, running and dead.")
@click.argument("target")
@JSON_OPTION
def stats(target: str, as_json: bool) -> None:
    """Print how many rows are queued, running and dead."""
    found = run_on(open_target(target), Target.stats)
    if as_json:
        _print_json({"queued": found.queued, "running": found.running, "dead": found.dead})
    else:
        counts = [("queued", found.queued), ("running", found.running), ("dead", found.dead)]
        click.echo(table([(name, str(n)) for name, n in counts]))


@main.command(epilog=TARGET_HELP, short_help="List the dead rows, newest first.")
@click.argument("target")
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    default=100,
    show_default=True,
    help="Rows at most.",
)
@JSON_OPTION
def dead(target: str, limit: int, as_json: bool) -> None:
    """List the dead rows, newest first: the error's name and message, the attempts, when, the
    payload.

    --json prints a list of objects with the whole payload, message and traceback, and
    `died_at` in microseconds since the epoch.
    """
    rows = run_on(open_target(target), lambda found: found.dead_ones(limit))
    if as_json:
        _print_json(
            [
                {
                    "id": row.id,
                    "kind": row.kind,
                    "error": row.error,
                    "attempts": row.attempts,
                    "died_at": row.died_at,
                    "payload": row.payload,
                    "message": row.message,
                    "traceback": row.traceback,
                }
                for row in rows
            ]
        )
        return
    if not rows:
        click.echo("no dead jobs")
        return
    click.echo(
        table(
            [
                (
                    str(row.id),
                    row.kind,
                    row.error,
                    cut(row.message, 40),
                    str(row.attempts),
                    utc(row.died_at),
                    compact(row.payload),
                )
                for row in rows
            ],
            header=("ID", "KIND", "ERROR", "MESSAGE", "ATTEMPTS", "DIED (UTC)", "PAYLOAD"),
        )
    )


@main.command(epilog=TARGET_HELP, short_help="Queue a dead row again from its first attempt.")
@click.argument("target")
@click.argument("row_id", metavar="ID", type=ROW_ID)
@JSON_OPTION
def retry(target: str, row_id: int, as_json: bool) -> None:
    """Queue the dead row ID again, due now, from its first attempt. Exits 1 if ID is not a dead
    row."""
    again = run_on(open_target(target), lambda found: found.retry_dead(row_id))
    if as_json:
        _print_json({"id": row_id, "retried": again})
    if not again:
        raise click.ClickException(f"no dead job {row_id}")
    if not as_json:
        click.echo(f"job {row_id} is queued again, from its first attempt")


@main.command(epilog=TARGET_HELP, short_help="Take back a queued row before it runs.")
@click.argument("target")
@click.argument("row_id", metavar="ID", type=ROW_ID)
@JSON_OPTION
def cancel(target: str, row_id: int, as_json: bool) -> None:
    """Take back the queued row ID (one waiting for a retry too) before it runs. Exits 1 if no
    queued row has that id: a worker holds it, or it finished, died or never was."""
    gone = run_on(open_target(target), lambda found: found.cancel(row_id))
    if as_json:
        _print_json({"id": row_id, "cancelled": gone})
    if not gone:
        raise click.ClickException(
            f"job {row_id} was not cancelled: no queued row has that id (a worker may hold it, "
            "or it finished, died or never existed)"
        )
    if not as_json:
        click.echo(f"cancelled job {row_id}")


@main.command(epilog=TARGET_HELP, short_help="Create the nilo_jobs table where it is missing.")
@click.argument("target")
@JSON_OPTION
def migrate(target: str, as_json: bool) -> None:
    """Create the nilo_jobs table and its indexes where they are missing, then check it.

    Idempotent, and safe to run from several deploys at once. A SQLite file is created if
    missing.
    """

    async def create(found: Target) -> str:
        await found.store.create_missing()
        await found.store.check()
        return repr(found.store)

    where = run_on(open_target(target, create=True), create, check=False)
    if as_json:
        _print_json({"table": "nilo_jobs", "store": where, "ready": True})
    else:
        click.echo(f"nilo_jobs is ready in {where}")


main.add_command(dashboard_command)

if __name__ == "__main__":
    main()
