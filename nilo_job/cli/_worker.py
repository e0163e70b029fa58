"""`nilo-job worker module:attr`: the queue's workers in a process of their own, until SIGTERM or
SIGINT, for all its kinds or only those `--kinds` names, on uvloop when it is installed
(`pip install 'nilo-job[fast]'`) unless `--loop asyncio` (or `NILO_JOB_LOOP=asyncio`) says not;
with `--health-port`, the probes (`_health`) on the same loop. `nilo-job ready module:attr`: exit
0 when the queue's store answers, 1 otherwise, for an exec probe."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence

import click

from .._base.errors import JobError, Refusal
from .._queue.jobs import Jobs
from ..store._target import shown
from ._health import Health
from ._load import load
from ._text import MS, WORKERS


def kind_list(given: Sequence[str]) -> list[str] | None:
    """The kind names of `--kinds a,b --kinds c` in order, each once; None when none given.

    Raises:
        click.UsageError: `--kinds` was given, and names no kind (`--kinds ''`).
    """
    names = [name.strip() for value in given for name in value.split(",")]
    names = list(dict.fromkeys(name for name in names if name))
    if given and not names:
        raise click.UsageError("--kinds names no kind: give kind names, or leave it out for all")
    return names or None


@click.command(short_help="Run the queue's workers until SIGTERM or SIGINT.")
@click.argument("target")
@click.option("--workers", type=WORKERS, help="Rows running at once (default: the queue's).")
@click.option(
    "--grace-ms",
    type=MS,
    default=30_000,
    show_default=True,
    help="On SIGTERM/SIGINT, how long running rows may finish before they are cancelled.",
)
@click.option(
    "--kinds",
    "kinds",
    multiple=True,
    metavar="A,B",
    help="Run only these kinds (names, comma-separated or the option repeated); default: all.",
)
@click.option(
    "--loop",
    type=click.Choice(["auto", "uvloop", "asyncio"]),
    default="auto",
    show_default=True,
    envvar="NILO_JOB_LOOP",
    help="The event loop: uvloop when installed (auto), uvloop or else an error, or asyncio's "
    "own. Also NILO_JOB_LOOP.",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65_535),
    default=None,
    metavar="PORT",
    help="Serve /livez, /readyz and /metrics over HTTP on this port (default: no probes).",
)
@click.option(
    "--health-host",
    default="0.0.0.0",
    show_default=True,
    help="The address the probes listen on: all of the machine's (a pod's probes come from the "
    "kubelet to the pod's IP); 127.0.0.1 keeps them to this machine.",
)
def worker(
    target: str,
    workers: int | None,
    grace_ms: int,
    kinds: tuple[str, ...],
    loop: str,
    health_port: int | None,
    health_host: str,
) -> None:
    """Run the workers of the queue TARGET (module:attr) until SIGTERM or SIGINT.

    On the first signal it stops claiming, lets running rows finish for --grace-ms, then cancels
    them and queues their rows again; a second signal ends the grace period at once. Either way
    the process is gone soon after: within --grace-ms and the store's bound on one call
    (PostgreSQL's `answer_ms`, MariaDB's and MySQL's three times it, else 10 s) after the first
    signal, within a second of the second, even when the database does not answer or a sync
    run's thread will not end; rows it still holds then run again after their lease.

    With --health-port, the process answers GET /livez (200 while its event loop turns),
    /readyz (200 when the store answers and the workers run, else 503 and the reason) and
    /metrics (Prometheus's text, with prometheus-client installed).
    """
    factory, said = loop_choice(loop)
    # A signal that arrives while the target is still importing stops the worker before it
    # claims anything, rather than killing it with the default handler.
    early: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda received, _frame: early.append(received))
        for signum in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        jobs = load(target, command="worker")
        names = served_kinds(target, jobs, kind_list(kinds))
    except BaseException:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        raise
    if workers is not None:
        jobs.workers = workers
    bound_ms = getattr(jobs.store, "bound_ms", BOUND_MS)
    exits = Exits(grace_ms, bound_ms)
    health = None
    if health_port is not None:
        health = Health(jobs, bound_ms / 1_000)
        health.measure()  # before serve starts
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(
                _work(
                    jobs, grace_ms, names, early, said, exits, health, health_host, health_port or 0
                )
            )
    except (JobError, Refusal) as error:
        raise click.ClickException(str(error)) from None
    finally:
        exits.cancel()


BOUND_MS = 10_000
"""The bound on one call to the store, in milliseconds, for a store that does not say its own."""
AT_ONCE_S = 1.0
"""After a second signal, how long the worker may take to give its rows back before it exits."""


class Exits:
    """The worker's promise that a signal ends the process: after the first, within the grace
    period and the store's bound (`grace_ms + bound_ms`); after the second, within `AT_ONCE_S`.
    A timer thread (which nothing in the event loop can hold up: a database that does not
    answer, a sync run's thread that will not end) exits the process then, saying so, with the
    rows it still holds left to their lease."""

    def __init__(self, grace_ms: int, bound_ms: int) -> None:
        self.after_first_s = (grace_ms + bound_ms) / 1_000
        self.timers: list[threading.Timer] = []

    def signalled(self, signals: int, name: str) -> None:
        """Signal number `signals` (1 or more), named `name`, arrived."""
        seconds = self.after_first_s if signals == 1 else AT_ONCE_S
        timer = threading.Timer(seconds, _exit_now, (name, seconds))
        timer.daemon = True
        timer.start()
        self.timers.append(timer)

    def cancel(self) -> None:
        for timer in self.timers:
            timer.cancel()


def _exit_now(name: str, seconds: float) -> None:
    logging.getLogger("nilo_job").warning(
        "still stopping %g s after %s: exiting now; any row this process still holds runs "
        "again after its lease",
        seconds, name,
    )  # fmt: skip
    logging.shutdown()
    os._exit(1)


def loop_choice(choice: str) -> tuple[Callable[[], asyncio.AbstractEventLoop] | None, str]:
    """The loop factory for `--loop` (`auto`, `uvloop` or `asyncio`; None: asyncio's own), and
    the sentence the worker logs about it.

    Raises:
        click.ClickException: `uvloop` was asked for and is not installed.
    """
    if choice == "asyncio":
        return None, "asyncio's own (--loop asyncio)"
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":
            raise click.ClickException(
                "--loop uvloop: uvloop is not installed: pip install 'nilo-job[fast]'"
            ) from None
        return None, "asyncio's own (uvloop is not installed: pip install 'nilo-job[fast]')"
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory, f"uvloop {uvloop.__version__}"


def served_kinds(target: str, jobs: Jobs, names: list[str] | None) -> list[str] | None:
    """The kinds `--kinds` names (None: all), each old name of a renamed kind (one of its
    `aliases`) taken as the kind, which runs the rows of both names: a WARNING says so, and to
    write the kind's name before the alias is dropped.

    Raises:
        click.ClickException: a name that is no kind of the queue, nor an old name of one.
    """
    if names is None:
        return None
    known = [kind.name for kind in jobs.kinds]
    renamed = {alias: kind.name for kind in jobs.kinds for alias in kind.aliases}
    unknown = [name for name in names if name not in known and name not in renamed]
    if unknown:
        raise click.ClickException(
            f"{shown(target)} has no kind {', '.join(unknown)}: its kinds are {', '.join(known)}"
        )
    for name in names:
        if name in renamed:
            logging.getLogger("nilo_job").warning(
                "--kinds %s: %s is an old name of %s (in its aliases): serving %s, which runs "
                "the rows of both names; write --kinds %s, since --kinds %s is refused once "
                "the alias is dropped",
                name, name, renamed[name], renamed[name], renamed[name], name,
            )  # fmt: skip
    return list(dict.fromkeys(renamed.get(name, name) for name in names))


async def _work(
    jobs: Jobs,
    grace_ms: int,
    kinds: list[str] | None,
    early: list[int],
    said: str,
    exits: Exits,
    health: Health | None = None,
    health_host: str = "0.0.0.0",
    health_port: int = 0,
) -> None:
    loop = asyncio.get_running_loop()
    logging.getLogger("nilo_job").info("event loop: %s", said)
    if health is not None:
        try:
            where = await health.start(health_host, health_port)
        except OSError as error:
            await jobs.store.close()
            raise click.ClickException(
                f"--health-port {health_port}: cannot listen on {health_host}:{health_port}: "
                f"{error.strerror or error}"
            ) from None
        logging.getLogger("nilo_job").info(
            "health probes on http://%s (/livez, /readyz, /metrics)", where
        )
    task = asyncio.create_task(jobs.serve(grace_ms=grace_ms, kinds=kinds))
    signals = 0

    def stop(signum: int) -> None:
        nonlocal signals
        signals += 1
        name = signal.Signals(signum).name
        if signals == 1:
            logging.getLogger("nilo_job").info("%s: stopping after running rows finish", name)
        else:
            logging.getLogger("nilo_job").info("%s again: cancelling running rows now", name)
        exits.signalled(signals, name)
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
        if health is not None:
            await health.close()
        await jobs.store.close()


@click.command(short_help="Exit 0 when the queue's store answers, 1 otherwise (an exec probe).")
@click.argument("target")
def ready(target: str) -> None:
    """Exit 0 when the store of the queue TARGET (module:attr) answers and its table is usable
    (`jobs.ready()`), else 1 with the reason on stderr: a probe an orchestrator runs."""
    jobs = load(target, command="ready")

    async def ask() -> str | None:
        try:
            if await jobs.ready():
                return None
            try:
                await jobs.store.check()
            except Exception as error:  # the store's sentence for what ready() found
                return str(error)
            return "its store did not answer"
        finally:
            await jobs.store.close()

    reason = asyncio.run(ask())
    if reason is not None:
        raise click.ClickException(f"{shown(target)} is not ready: {reason}")
