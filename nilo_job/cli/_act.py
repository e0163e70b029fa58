"""The operator's acting commands: `retry` (dead rows queued again), `cancel` (queued rows taken
back) and `delete` (dead and done rows removed), each on one id, several ids, or `--all` rows
matching `--kind`, `--error` and `--key`; `--dry-run` counts the rows and touches none.

Ids are acted on one at a time, so each can be said to have been acted on or not; `--all` goes
through `retry_many`/`cancel_many`/`delete_many` with a `job.Where`, in batches of 500 rows per
transaction. A command exits 1 when an id it was given was not there to act on; `--all` that
matches no row is not an error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from .._base.text import count_of
from .._base.values import Where
from ._read import filter_options
from ._target import Target, open_target, run_on
from ._text import JSON_OPTION, ROW_ID, TARGET_HELP, print_json


@dataclass(frozen=True, slots=True)
class Verb:
    """What one acting command does, and how it says so."""

    name: str
    states: tuple[str, ...]
    json_key: str
    done_one: str  # "{id}"
    done_many: str  # "{n}", "{what}"
    missing: Callable[[list[int]], str]


def _no_dead(ids: list[int]) -> str:
    return f"no dead job {ids[0]}" if len(ids) == 1 else f"no dead jobs {_ids(ids)}"


def _not_cancelled(ids: list[int]) -> str:
    if len(ids) == 1:
        return (
            f"job {ids[0]} was not cancelled: no queued row has that id (a worker may hold it, "
            "or it finished, died or never existed)"
        )
    return (
        f"jobs {_ids(ids)} were not cancelled: no queued row has those ids (a worker may hold "
        "them, or they finished, died or never existed)"
    )


def _not_deleted(ids: list[int]) -> str:
    if len(ids) == 1:
        return (
            f"job {ids[0]} was not deleted: no dead or done row has that id (cancel takes back "
            "a queued row; a running one is a worker's)"
        )
    return (
        f"jobs {_ids(ids)} were not deleted: no dead or done row has those ids (cancel takes "
        "back a queued row; a running one is a worker's)"
    )


def _ids(ids: list[int]) -> str:
    return ", ".join(str(row_id) for row_id in ids)


RETRY = Verb(
    "retry",
    ("dead",),
    "retried",
    "job {id} is queued again, from its first attempt",
    "queued {n} again, from the first attempt: {what}",
    _no_dead,
)
CANCEL = Verb(
    "cancel",
    ("queued",),
    "cancelled",
    "cancelled job {id}",
    "cancelled {n}: {what}",
    _not_cancelled,
)
DELETE = Verb(
    "delete", ("dead", "done"), "deleted", "deleted job {id}", "deleted {n}: {what}", _not_deleted
)


def describe(verb: Verb, where: Where) -> str:
    """The rows `--all` picks, in words: "every dead row", "dead rows of mail"."""
    narrowed = where.kind is not None or where.error is not None or where.key is not None
    states = where.state or " and ".join(verb.states)
    if not narrowed:
        return f"every {states} row"
    return f"{states} rows{where.words().split(' rows', 1)[1]}"


def _wheres(verb: Verb, where: Where) -> list[Where]:
    if where.state is not None:
        return [where]
    return [dataclasses.replace(where, state=state) for state in verb.states]


def act(
    verb: Verb,
    target: str,
    row_ids: tuple[int, ...],
    everything: bool,
    where: Where,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Carry out `verb` as the command line asked (see the module)."""
    narrowed = any(v is not None for v in (where.state, where.kind, where.error, where.key))
    if row_ids and everything:
        raise click.UsageError("give ids or --all, not both")
    if narrowed and not everything:
        raise click.UsageError("the filters pick rows with --all: add --all")
    if not row_ids and not everything:
        raise click.UsageError(
            f"give the id of a {' or '.join(verb.states)} row, several ids, or --all "
            "(narrowed by --kind, --error, --key)"
        )
    ids = list(dict.fromkeys(row_ids))
    opened = open_target(target)
    if everything:
        _act_all(verb, opened, where, dry_run, as_json)
    elif dry_run:
        wheres = [Where(state=state, ids=tuple(ids)) for state in verb.states]
        n = run_on(opened, lambda at: _count(at, wheres))
        if as_json:
            print_json({"ids": ids, f"would_{verb.name}": n, "dry_run": True})
        else:
            click.echo(f"would {verb.name} {n} of {count_of(len(ids), 'job')}; nothing was changed")
    else:
        _act_ids(verb, opened, ids, as_json)


async def _count(at: Target, wheres: list[Where]) -> int:
    return sum([await at.count(where) for where in wheres])


def _act_all(verb: Verb, opened: Target, where: Where, dry_run: bool, as_json: bool) -> None:
    what = describe(verb, where)
    if dry_run:
        n = run_on(opened, lambda at: _count(at, _wheres(verb, where)))
        if as_json:
            print_json({"filter": what, f"would_{verb.name}": n, "dry_run": True})
        else:
            click.echo(f"would {verb.name} {count_of(n, 'job')}: {what}; nothing was changed")
        return
    n = run_on(opened, lambda at: at.act(verb.name, where))
    if as_json:
        print_json({"filter": what, verb.json_key: n, "dry_run": False})
    else:
        click.echo(verb.done_many.format(n=count_of(n, "job"), what=what))


def _act_ids(verb: Verb, opened: Target, ids: list[int], as_json: bool) -> None:
    async def each(at: Target) -> list[bool]:
        return [await at.act(verb.name, [row_id]) > 0 for row_id in ids]

    acted = run_on(opened, each)
    answers: list[dict[str, Any]] = [
        {"id": row_id, verb.json_key: did} for row_id, did in zip(ids, acted, strict=True)
    ]
    if as_json:
        print_json(answers[0] if len(answers) == 1 else answers)
    else:
        for row_id, did in zip(ids, acted, strict=True):
            if did:
                click.echo(verb.done_one.format(id=row_id))
    missing = [row_id for row_id, did in zip(ids, acted, strict=True) if not did]
    if missing:
        raise click.ClickException(verb.missing(missing))


def _acting(verb: Verb, short_help: str, *, states: bool = False) -> Callable[..., Any]:
    """The decorators every acting command shares."""

    def decorate(function: Callable[..., None]) -> click.Command:
        # Applied last to first, so that --help lists --all, the filters, --dry-run, --json.
        command = JSON_OPTION(function)
        command = click.option(
            "--dry-run", is_flag=True, help="Say how many rows it would touch; touch none."
        )(command)
        command = filter_options(command)
        if states:
            command = click.option(
                "--state", type=click.Choice(verb.states), help="With --all: only this state."
            )(command)
        command = click.option(
            "--all", "everything", is_flag=True, help="Every row the filters match."
        )(command)
        command = click.argument("row_ids", metavar="[ID]...", nargs=-1, type=ROW_ID)(command)
        return click.command(verb.name, epilog=TARGET_HELP, short_help=short_help)(
            click.argument("target")(command)
        )

    return decorate


@_acting(RETRY, "Queue dead rows again from their first attempt.")
def retry(
    target: str,
    row_ids: tuple[int, ...],
    everything: bool,
    kind: str | None,
    error: str | None,
    key: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Queue the dead rows ID... (or --all those the filters match) again, due now, from their
    first attempt. Exits 1 if an ID is not a dead row. --all with no filter retries every dead
    row."""
    where = Where(state=None, kind=kind, error=error, key=key)
    act(RETRY, target, row_ids, everything, where, dry_run, as_json)


@_acting(CANCEL, "Take back queued rows before they run.")
def cancel(
    target: str,
    row_ids: tuple[int, ...],
    everything: bool,
    kind: str | None,
    error: str | None,
    key: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Take back the queued rows ID... (or --all those the filters match; one waiting for a
    retry too) before they run. Exits 1 if an ID is not a queued row: a worker holds it, or it
    finished, died or never was. --all with no filter cancels every queued row."""
    where = Where(state=None, kind=kind, error=error, key=key)
    act(CANCEL, target, row_ids, everything, where, dry_run, as_json)


@_acting(DELETE, "Delete dead and done rows.", states=True)
def delete(
    target: str,
    row_ids: tuple[int, ...],
    everything: bool,
    state: str | None,
    kind: str | None,
    error: str | None,
    key: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Delete the dead or done rows ID... (or --all those the filters match). Exits 1 if an ID
    is not a dead or done row. --all with no filter deletes every dead and done row."""
    where = Where(state=state, kind=kind, error=error, key=key)
    act(DELETE, target, row_ids, everything, where, dry_run, as_json)
