"""`nilo-job workers TARGET`: the serving processes of the worker registry, alive or lost.

Each serving process (serve in an application, or `nilo-job worker`) records itself in the table
as it starts, beats at its interval, and removes itself on a clean stop. An entry whose last beat
is older than three of its beats is lost: its process died, or cannot reach the database.
"""

from __future__ import annotations

import click

from .._base.clock import now_us
from .._worker.beat import is_alive
from ..store.contract import WorkerEntry
from ._target import Target, open_target, run_on
from ._text import JSON_OPTION, TARGET_HELP, print_json, table, utc


def ago(us: int) -> str:
    """A duration in µs as "0.2 s ago", "3 min ago", "2 h ago"."""
    seconds = max(0, us) / 1_000_000
    if seconds < 60:
        return f"{seconds:.1f} s ago"
    if seconds < 3_600:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3_600:.0f} h ago"


def entry_json(entry: WorkerEntry, now: int) -> dict[str, object]:
    """An entry as `--json` prints it; times in µs since the epoch."""
    return {
        "id": entry.id, "host": entry.host, "pid": entry.pid, "version": entry.version,
        "kinds": list(entry.kinds), "workers": entry.workers, "beat_ms": entry.beat_ms,
        "started_at": entry.started_at, "beat_at": entry.beat_at,
        "alive": is_alive(entry, now), "running": list(entry.running),
    }  # fmt: skip


@click.command(epilog=TARGET_HELP, short_help="List the worker processes, alive or lost.")
@click.argument("target")
@JSON_OPTION
def workers(target: str, as_json: bool) -> None:
    """Print every serving process the table knows: host, pid, nilo-job's version, its kinds,
    workers, when it started, its last beat, alive or lost, and the ids of the rows it runs.

    A process is lost once its last beat is older than three of its beats (every 5 s unless
    the queue sets heartbeat_ms); a lost entry is deleted an hour after its last beat.

    --json prints {"now": µs, "workers": [{"id", "host", "pid", "version", "kinds", "workers",
    "beat_ms", "started_at", "beat_at", "alive", "running"}]}, times in µs since the epoch.
    """

    async def read(found: Target) -> tuple[int, list[WorkerEntry]]:
        entries = await found.store.workers()
        return (await found.store.now_us()) or now_us(), entries

    now, entries = run_on(open_target(target), read)
    if as_json:
        print_json({"now": now, "workers": [entry_json(entry, now) for entry in entries]})
        return
    if not entries:
        click.echo("no worker process is registered")
        return
    rows = [
        (
            entry.host,
            str(entry.pid),
            entry.version,
            ", ".join(entry.kinds),
            str(entry.workers),
            f"{utc(entry.started_at)} UTC",
            ago(now - entry.beat_at),
            "alive" if is_alive(entry, now) else "lost",
            ", ".join(map(str, entry.running)) or "-",
        )
        for entry in entries
    ]
    header = ("host", "pid", "version", "kinds", "workers", "started", "last beat", "state",
              "running")  # fmt: skip
    click.echo(table(rows, header))
