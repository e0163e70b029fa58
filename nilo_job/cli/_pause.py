"""`nilo-job pause TARGET KIND` and `nilo-job resume TARGET KIND`: stop and start the claiming of
a kind's rows in every process serving the table (each within its `poll_ms`).

With `module:attr`, KIND must be one of the queue's kinds. With a database URL the kinds are not
known; a pause is only a row in `nilo_jobs_paused`, so any kind name is accepted, and a name with
no rows in the table is said on stderr in case it is a typo. Pausing a paused kind, or resuming
one that is not paused, changes nothing and is not an error.
"""

from __future__ import annotations

import click

from ..store._target import shown
from ._target import Target, open_target, run_on
from ._text import JSON_OPTION, TARGET_HELP, print_json


def _known(opened: Target, target: str, kind: str) -> None:
    names = opened.kind_names
    if names is not None and kind not in names:
        raise click.ClickException(
            f"{shown(target)} has no kind {kind!r}: its kinds are {', '.join(names)}"
        )


async def _pause(at: Target, kind: str) -> tuple[bool, bool]:
    """Pause `kind`: whether it changed, and whether (for a table alone) it has no rows."""
    unseen = at.jobs is None and kind not in await at.kinds_in_table()
    return await at.pause(kind), unseen


@click.command(epilog=TARGET_HELP, short_help="Stop claiming a kind's rows, in every process.")
@click.argument("target")
@click.argument("kind")
@JSON_OPTION
def pause(target: str, kind: str, as_json: bool) -> None:
    """Stop claiming rows of KIND in every process serving the table, each within its poll_ms.
    Pushes are still accepted and the rows wait; runs already started finish. The pause is kept
    in the table, so it outlasts restarts, until `nilo-job resume`."""
    opened = open_target(target)
    _known(opened, target, kind)
    changed, unseen = run_on(opened, lambda at: _pause(at, kind))
    if as_json:
        print_json({"kind": kind, "paused": True, "changed": changed})
        return
    if unseen:
        click.echo(f"note: the table holds no rows of {kind!r}; check the name", err=True)
    if changed:
        click.echo(f"paused {kind}: workers stop claiming its rows within their poll_ms")
    else:
        click.echo(f"{kind} was paused already")


@click.command(epilog=TARGET_HELP, short_help="Claim a paused kind's rows again.")
@click.argument("target")
@click.argument("kind")
@JSON_OPTION
def resume(target: str, kind: str, as_json: bool) -> None:
    """Claim rows of the paused KIND again, in every process serving the table, each within its
    poll_ms."""
    opened = open_target(target)
    _known(opened, target, kind)
    changed = run_on(opened, lambda at: at.resume(kind))
    if as_json:
        print_json({"kind": kind, "paused": False, "changed": changed})
        return
    if changed:
        click.echo(f"resumed {kind}: workers claim its rows again within their poll_ms")
    else:
        click.echo(f"{kind} was not paused")
