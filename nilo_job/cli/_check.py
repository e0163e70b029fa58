"""`nilo-job check module:attr`: build the queue as the worker would, and report every refusal,
for CI.

`job.Jobs(...)` stops at its first refusal, and a module that builds its queue at import hands
the command that one exception only. So when building the queue is refused, check looks in the
refusal's traceback for the `job.Jobs(...)` call that raised it, takes the `kinds` (and `deps`)
it was given, and reads each kind class again on its own: every class that cannot work is
reported, each with its sentence, then two classes sharing a name, then the refusal itself when
it was about the queue's settings rather than a kind. A refusal raised before any `job.Jobs(...)`
(a `job.cron(...)` in a class body, say) is the one reported.

A queue that builds is then checked against its table, when the table can be read: the rows that
carry a renamed kind's old name (one of its `aliases`), which it runs, and the rows of a name no
kind answers to, which nothing runs. Rows that may still run count: queued, running, and dead
(an operator may retry them); done rows are history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import click

from .._base.errors import JobError, Refusal
from .._base.text import count_of
from .._kinds.kind import Kind, check_unique_names, read_deps, read_kind
from .._queue.jobs import Jobs
from ._load import Refused, load
from ._text import JSON_OPTION, print_json


def every_refusal(refusal: Refusal) -> list[str]:
    """The sentences of every refusal behind `refusal`, raised by a `job.Jobs(...)` call: each
    kind class read on its own, the names, and the queue's settings (see the module)."""
    arguments = _jobs_arguments(refusal.__traceback__)
    said: list[str] = []
    if arguments is not None:
        kinds = arguments.get("kinds")
        if isinstance(kinds, Sequence) and not isinstance(kinds, str | bytes | type):
            try:
                deps = read_deps(arguments.get("deps"))
            except Refusal as error:
                said.append(str(error))
            else:
                read: list[Kind] = []
                for cls in kinds:
                    try:
                        read.append(read_kind(cls, deps, Jobs))
                    except Refusal as error:
                        said.append(str(error))
                try:
                    check_unique_names(read)
                except Refusal as error:
                    said.append(str(error))
    said.append(str(refusal))
    return list(dict.fromkeys(said))


def _jobs_arguments(tb: TracebackType | None) -> dict[str, Any] | None:
    """The local names of the `job.Jobs.__init__` call in the traceback `tb`, if it has one."""
    code = Jobs.__init__.__code__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return dict(tb.tb_frame.f_locals)
        tb = tb.tb_next
    return None


@click.command(short_help="Build the queue; report every refusal (for CI).")
@click.argument("target")
@JSON_OPTION
def check(target: str, as_json: bool) -> None:
    """Build the queue TARGET (module:attr) and report every refusal; exits 1 on any (for CI).

    When the queue cannot be built, each kind class is read again on its own, so every class
    that cannot work is reported, not only the first.
    """
    try:
        jobs = load(target, command="check")
    except Refused as refused:
        said = every_refusal(refused.refusal)
        if as_json:
            print_json({"ok": False, "refusals": said})
        if len(said) == 1:
            raise click.ClickException(f"{refused.said}: {said[0]}") from None
        lines = "\n".join(f"- {sentence}" for sentence in said)
        raise click.ClickException(
            f"{refused.said}, with {count_of(len(said), 'refusal')}:\n{lines}"
        ) from None
    names = [kind.name for kind in jobs.kinds]
    try:
        names_in_table = asyncio.run(_rows_by_name(jobs))
    except JobError as error:
        names_in_table = None
        if any(kind.aliases for kind in jobs.kinds):  # a rename under way: say what is unknown
            click.echo(
                f"the table was not read ({error}): rows of old names are not counted", err=True
            )
    found = Names.of(jobs.kinds, names_in_table)
    if as_json:
        print_json(
            {
                "ok": True,
                "kinds": names,
                "lease_ms": jobs.lease_ms,
                "renamed": [
                    {"name": alias, "kind": kind, "rows": rows}
                    for alias, kind, rows in found.renamed
                ],
                "stranded": [{"name": name, "rows": rows} for name, rows in found.stranded],
            }
        )
        return
    click.echo(f"ok: {count_of(len(names), 'kind')} ({', '.join(names)}), lease {jobs.lease_ms} ms")
    for line in found.lines():
        click.echo(line)


LIVE_STATES = ("queued", "running", "dead")
"""The states of a row that may still run (a dead one once retried): what `check` counts."""


async def _rows_by_name(jobs: Jobs) -> dict[str, int]:
    """How many rows that may still run (`LIVE_STATES`) the queue's table holds, by the name
    they carry.

    Raises:
        JobError: the store cannot be reached, or the table is missing or not nilo-job's.
    """
    store = jobs.store
    try:
        await store.check()
        counts = await store.counts()
    finally:
        await store.close()
    found: dict[str, int] = {}
    for (name, state), rows in counts.items():
        if state in LIVE_STATES:
            found[name] = found.get(name, 0) + rows
    return found


@dataclass(frozen=True, slots=True)
class Names:
    """The table's rows by the name they carry, as the queue's kinds answer to them.

    Attributes:
        renamed: (old name, kind, rows) for each alias of each kind, in the kinds' order; rows
            is 0 when none is left (the alias may go), None when the table was not read.
        stranded: (name, rows) for each name with rows that no kind answers to, by name.
    """

    renamed: list[tuple[str, str, int | None]]
    stranded: list[tuple[str, int]]

    @classmethod
    def of(cls, kinds: Sequence[Kind], rows: dict[str, int] | None) -> Names:
        """The names of `rows` (rows by name; None: the table was not read) against `kinds`."""
        renamed = [
            (alias, kind.name, None if rows is None else rows.get(alias, 0))
            for kind in kinds
            for alias in kind.aliases
        ]
        if rows is None:
            return cls(renamed, [])
        known = {name for kind in kinds for name in (kind.name, *kind.aliases)}
        stranded = sorted((name, n) for name, n in rows.items() if name not in known and n)
        return cls(renamed, stranded)

    def lines(self) -> list[str]:
        """A sentence for each old name and each stranded name."""
        said = []
        for alias, kind, rows in self.renamed:
            if rows is None:
                continue
            if rows:
                said.append(f"{count_of(rows, 'row')} of {alias} {_are(rows)} run as {kind}")
            else:
                said.append(f"no row of {alias} is left: {kind} may drop it from its aliases")
        for name, rows in self.stranded:
            said.append(
                f"{count_of(rows, 'row')} of {name} {_are(rows)} stranded: no kind answers to "
                f"{name} (name it in a kind's aliases, or cancel them)"
            )
        return said


def _are(n: int) -> str:
    return "is" if n == 1 else "are"
