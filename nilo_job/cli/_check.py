"""`nilo-job check module:attr`: build the queue as the worker would, and report every refusal,
for CI.

`job.Jobs(...)` stops at its first refusal, and a module that builds its queue at import hands
the command that one exception only. So when building the queue is refused, check looks in the
refusal's traceback for the `job.Jobs(...)` call that raised it, takes the `kinds` (and `deps`)
it was given, and reads each kind class again on its own: every class that cannot work is
reported, each with its sentence, then two classes sharing a name, then the refusal itself when
it was about the queue's settings rather than a kind. A refusal raised before any `job.Jobs(...)`
(a `job.cron(...)` in a class body, say) is the one reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

import click

from .._errors import Refusal
from .._jobs import Jobs
from .._kinds import Kind, check_unique_names, read_deps, read_kind
from .._text import count_of
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
    if as_json:
        print_json({"ok": True, "kinds": names, "lease_ms": jobs.lease_ms})
        return
    click.echo(f"ok: {count_of(len(names), 'kind')} ({', '.join(names)}), lease {jobs.lease_ms} ms")
