"""The `nilo-job` command: a worker process, the refusals for CI, and the counts.

    nilo-job worker module:attr [--workers N] [--grace-ms MS]
    nilo-job check module:attr
    nilo-job stats module:attr [--json]

`module:attr` names a `job.Jobs` (or a function of no arguments returning one), imported with the
current directory on `sys.path`, as uvicorn does. A thin edge: everything it does is public API.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import signal
import sys
import traceback
from pathlib import Path

import click

from ._errors import JobError, Refusal
from ._queue import Jobs


def load(target: str) -> Jobs:
    """The `job.Jobs` that `module:attr` names.

    Raises:
        click.ClickException: the target is malformed, cannot be imported, or is not a queue; a
            `Refusal` raised while the module builds its queue is shown as its sentence.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise click.ClickException(f"{target!r}: write module:attr, like myapp.jobs:jobs")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Refusal as refusal:
        raise click.ClickException(
            f"{module_name} defines a queue that cannot work: {refusal}"
        ) from None
    except ImportError as error:
        raise click.ClickException(f"cannot import {module_name}: {error}") from None
    except Exception:
        raise click.ClickException(
            f"importing {module_name} raised:\n{traceback.format_exc(limit=-3)}"
        ) from None
    value = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise click.ClickException(f"{module_name} has no attribute {attr}")
        value = getattr(value, part)
    if callable(value) and not isinstance(value, Jobs):
        try:
            value = value()
        except Refusal as refusal:
            raise click.ClickException(
                f"{target} builds a queue that cannot work: {refusal}"
            ) from None
    if not isinstance(value, Jobs):
        raise click.ClickException(f"{target} is a {type(value).__name__}, not a job.Jobs")
    return value


@click.group()
@click.option("--log-level", default="INFO", show_default=True, help="Python logging level.")
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


@main.command()
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def stats(target: str, as_json: bool) -> None:
    """Print how many rows are queued, running and dead."""
    jobs = load(target)

    async def read() -> tuple[int, int, int]:
        try:
            found = await jobs.stats()
        finally:
            await jobs.store.close()
        return (found.queued, found.running, found.dead)

    try:
        queued, running, dead = asyncio.run(read())
    except JobError as error:
        raise click.ClickException(str(error)) from None
    if as_json:
        click.echo(json.dumps({"queued": queued, "running": running, "dead": dead}))
    else:
        click.echo(f"queued   {queued}\nrunning  {running}\ndead     {dead}")


if __name__ == "__main__":
    main()
