"""The operator's reading commands: `stats` (the counts and the paused kinds), `dead` (the dead
rows, newest first), `list` (rows by a filter, page by page) and `show` (one row's whole story).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .._base.errors import Refusal
from .._base.text import printable
from .._base.values import Attempt, Dead, Found, Row, Stats, Where
from .._queue.operator import read_cursor
from ._target import Target, open_target, run_on
from ._text import (
    JSON_OPTION,
    ROW_ID,
    TARGET_HELP,
    cut,
    one_line,
    print_json,
    table,
    utc,
    utc_exact,
)

F = TypeVar("F", bound=Callable[..., Any])

STATES = ("queued", "running", "dead", "done")


@click.command(epilog=TARGET_HELP, short_help="Count the rows by state; the paused kinds.")
@click.argument("target")
@JSON_OPTION
def stats(target: str, as_json: bool) -> None:
    """Print how many rows are queued, running, dead and done (kept as history), and which kinds
    are paused.

    --json prints {"queued": …, "running": …, "dead": …, "done": …, "paused": {kind: paused_at}},
    paused_at in microseconds since the epoch.
    """

    async def read(found: Target) -> tuple[Stats, dict[str, int]]:
        return await found.stats(), await found.paused()

    counts, paused = run_on(open_target(target), read)
    numbers = {
        "queued": counts.queued,
        "running": counts.running,
        "dead": counts.dead,
        "done": counts.done,
    }
    if as_json:
        print_json({**numbers, "paused": dict(sorted(paused.items()))})
        return
    rows = [(name, str(n)) for name, n in numbers.items()]
    rows += [("paused", f"{kind} (since {utc(at)} UTC)") for kind, at in sorted(paused.items())]
    click.echo(table(rows))


@click.command(epilog=TARGET_HELP, short_help="List the dead rows, newest first.")
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

    --json prints a list of objects with the payload, message and traceback, and `died_at` in
    microseconds since the epoch. A payload longer than 4,096 characters of JSON is its start,
    as a string, with "payload_cut": true; `show ID` prints it whole.
    """
    rows = run_on(open_target(target), lambda found: found.dead_ones(limit))
    if as_json:
        print_json(
            [
                {
                    "id": row.id,
                    "kind": row.kind,
                    "error": row.error,
                    "attempts": row.attempts,
                    "died_at": row.died_at,
                    "payload": row.payload,
                    "payload_cut": row.payload_cut,
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
                    cut(payload_text(row), 60),
                )
                for row in rows
            ],
            header=("ID", "KIND", "ERROR", "MESSAGE", "ATTEMPTS", "DIED (UTC)", "PAYLOAD"),
        )
    )


def text_value(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A filter's text, refused (a usage error) when no store can hold it: not valid Unicode
    (bytes that are not UTF-8 on the command line) or holding a NUL character."""
    if value is None:
        return None
    try:
        value.encode()
    except UnicodeEncodeError:
        raise click.BadParameter(f"{value!a} is not valid UTF-8 text, so no row holds it") from None
    if "\x00" in value:
        raise click.BadParameter("it holds a NUL character, so no row holds it")
    return value


def filter_options(command: F) -> F:
    """Add `--kind`, `--error` and `--key` to a command's function (they narrow a
    `job.Where`)."""
    for option in reversed(
        [
            click.option("--kind", callback=text_value, help="Only rows of this kind (its name)."),
            click.option(
                "--error",
                callback=text_value,
                help="Only rows whose last error is this class name.",
            ),
            click.option(
                "--key", callback=text_value, help="Only the row holding this unique key."
            ),
        ]
    ):
        command = option(command)
    return command


def when(row: Row) -> int | None:
    """The time `list` shows for a row: due (queued), started (running), died, finished."""
    return {
        "queued": row.run_at,
        "running": row.started_at or row.run_at,
        "dead": row.died_at,
        "done": row.finished_at,
    }.get(row.state)


def payload_text(row: Row | Dead) -> str:
    """A row's payload on one line, or why it cannot be read. A payload a list read only the
    start of (`payload_cut`) is that start of its JSON, ending in "…"."""
    if isinstance(row, Row) and row.unreadable is not None:
        return f"unreadable: {row.unreadable}"
    if row.payload_cut and isinstance(row.payload, str):
        return row.payload + "…"
    return one_line(row.payload)


@click.command("list", epilog=TARGET_HELP, short_help="List rows by state, kind, error or key.")
@click.argument("target")
@click.option("--state", type=click.Choice(STATES), help="Only rows in this state.")
@filter_options
@click.option(
    "--limit",
    type=click.IntRange(1, 1_000),
    default=100,
    show_default=True,
    help="Rows at most (a page).",
)
@click.option("--after", metavar="CURSOR", help="The page after this cursor (from a page before).")
@JSON_OPTION
def list_rows(
    target: str,
    state: str | None,
    kind: str | None,
    error: str | None,
    key: str | None,
    limit: int,
    after: str | None,
    as_json: bool,
) -> None:
    """List the rows that match the filters, a page at a time.

    Queued and running rows come by due time, oldest first; dead and done rows newest first.
    Without --state it lists rows of every state, in that order, with no further pages. With
    --state, when more rows match, the last line gives the cursor of the next page: pass it
    as --after. WHEN is the time due (queued), started (running), died (dead) or finished (done).
    ERROR is the last failure's class name; a done row's is "-" (`show` tells an earlier
    attempt's failure).

    --json prints {"rows": [a row as `show --json` prints it, …], "next": cursor or null}.
    """
    if after is not None and state is None:
        raise click.UsageError("--after pages through one state: give --state too")
    if after is not None:
        try:
            read_cursor(after)
        except Refusal:
            raise click.BadParameter(
                f"{after!r} is not a cursor a page of `nilo-job list` gave (`more: --after …`)",
                param_hint="--after",
            ) from None
    where = Where(state=state, kind=kind, error=error, key=key)
    found: Found = run_on(open_target(target), lambda at: at.find(where, after, limit))
    if as_json:
        print_json({"rows": [row_json(row) for row in found.rows], "next": found.next})
        return
    if not found.rows:
        words = where.words().replace("all rows", "rows", 1)
        click.echo(f"no {words}" if after is None else f"no more {words}")
        return
    click.echo(
        table(
            [
                (
                    str(row.id),
                    row.kind,
                    row.state,
                    str(row.attempts),
                    "-" if (at := when(row)) is None else utc(at),
                    "-" if row.state == "done" else row.error or "-",
                    cut(payload_text(row), 60),
                )
                for row in found.rows
            ],
            header=("ID", "KIND", "STATE", "ATTEMPTS", "WHEN (UTC)", "ERROR", "PAYLOAD"),
        )
    )
    if found.next is not None:
        click.echo(f"more: --after {found.next}")


def row_json(row: Row) -> dict[str, Any]:
    """A row as `show --json` and `list --json` print it: every field of `job.Row`."""
    return dataclasses.asdict(row)


@click.command(epilog=TARGET_HELP, short_help="A row's whole story.")
@click.argument("target")
@click.argument("row_id", metavar="ID", type=ROW_ID)
@JSON_OPTION
def show(target: str, row_id: int, as_json: bool) -> None:
    """Print the row ID's whole story: kind, state, payload, unique key, when it was pushed, due,
    started, finished or died (UTC), attempts, snoozes, lease, worker, the last error's name,
    message, a done row's result, the last traceback, then its attempts (the newest 20), one
    line each: number, outcome, start and end (UTC), worker, error and message. A done row's
    error is the failure of an earlier attempt: "last failure (attempt N): NAME". Exits 1 when
    there is no such row.

    --json prints every field of job.Row, times in microseconds since the epoch.
    """
    row = run_on(open_target(target), lambda at: at.row(row_id))
    if row is None:
        raise click.ClickException(
            f"no job {row_id}: no row has that id (a done row is kept only for the queue's "
            "retention_ms)"
        )
    if as_json:
        print_json(row_json(row))
        return
    fields = [
        ("id", str(row.id)),
        ("kind", row.kind),
        ("state", row.state),
        ("payload", payload_text(row)),
        ("key", row.unique_key if row.unique_key is not None else "-"),
        ("attempts", str(row.attempts)),
        ("snoozes", "-" if row.snoozes is None else str(row.snoozes)),
        ("pushed", utc_exact(row.pushed_at)),
        ("due", utc_exact(row.run_at)),
        ("started", utc_exact(row.started_at)),
        ("finished", utc_exact(row.finished_at)),
        ("died", utc_exact(row.died_at)),
        ("lease until", utc_exact(row.lease_until)),
        ("worker", row.worker or "-"),
        ("error", error_text(row)),
        ("message", row.message or "-"),
        ("result", "-" if row.state != "done" else one_line(row.result)),
    ]
    click.echo(fields_text(fields))
    if row.traceback:
        click.echo("traceback:" if row.state != "done" else f"traceback of the {failed(row)}:")
        traceback = printable(row.traceback.rstrip("\n"), lines=True)
        click.echo("\n".join("  " + line for line in traceback.split("\n")))
    if row.attempts_log:
        click.echo("attempts:")
        click.echo("\n".join(attempt_line(attempt) for attempt in row.attempts_log))


def failed(row: Row) -> str:
    """A done row's last failure, an earlier attempt's: "last failure (attempt N)", N the
    newest of its attempts kept that failed, or "last failure (an earlier attempt)" when none
    of those did."""
    numbers = [attempt.attempt for attempt in row.attempts_log if attempt.error is not None]
    return (
        f"last failure (attempt {numbers[-1]})" if numbers else "last failure (an earlier attempt)"
    )


def error_text(row: Row) -> str:
    """`show`'s error: the last failure's class name, or "-"; for a done row, labelled as an
    earlier attempt's failure."""
    if not row.error:
        return "-"
    return row.error if row.state != "done" else f"{failed(row)}: {row.error}"


def attempt_line(attempt: Attempt) -> str:
    """One attempt on one line: its number, outcome, start and end (UTC), worker, and its
    failure's name and message (or "-"), `printable`."""
    failure = "-" if attempt.error is None else f"{attempt.error}: {attempt.message or ''}"
    return printable(
        f"  {attempt.attempt:>2}  {attempt.outcome:<8}  {utc_exact(attempt.started_at)}  "
        f"{utc_exact(attempt.ended_at)}  {attempt.worker or '-'}  {failure}".rstrip()
    )


def fields_text(fields: list[tuple[str, str]]) -> str:
    """Names and values in two columns; a value of several lines stays in its column; each
    value `printable`."""
    width = max(len(name) for name, _value in fields) + 2
    lines = []
    for name, value in fields:
        first, *rest = printable(value, lines=True).split("\n")
        lines.append((name.ljust(width) + first).rstrip())
        lines += [(" " * width + line).rstrip() for line in rest]
    return "\n".join(lines)
