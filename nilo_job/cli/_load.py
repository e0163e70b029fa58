"""Finding the queue a command names: `module:attr`, imported as uvicorn imports an app.

The command line's worker, check and operator commands, and the dashboard's command, all start
from here. Every failure is a `click.ClickException` with one sentence, never a traceback from
inside the library; a queue that cannot be built is a `Refused`, which keeps the `Refusal` so
that `nilo-job check` can look further.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from .._base.errors import Refusal
from .._queue.jobs import Jobs
from ..store._target import shown
from ._log import print_once


class Refused(click.ClickException):
    """The target's queue could not be built: `refusal` is what `job.Jobs(...)` (or the module
    building it) raised, `said` the sentence's start naming the target."""

    def __init__(self, said: str, refusal: Refusal) -> None:
        super().__init__(f"{said}: {refusal}")
        self.said = said
        self.refusal = refusal


def load(target: str, *, command: str | None = None) -> Jobs:
    """The `job.Jobs` that `module:attr` names.

    Args:
        target: `module:attr`, naming a queue or a function of no arguments returning one.
        command: the command that needs the queue itself (its kinds), named in the sentence
            that refuses a database URL; None for a command that takes a URL elsewhere.

    Raises:
        click.ClickException: the target is a database URL, malformed, cannot be imported, or
            is not a queue; a `Refusal` raised while the module builds its queue is a
            `Refused`, shown as its sentence.
    """
    said = shown(target)  # a target is named without its password, whatever it is
    if "://" in target:
        who = f"`nilo-job {command}`" if command else "this command"
        raise click.ClickException(
            f"{said} is a database URL, but {who} needs the queue's kinds: pass module:attr "
            "naming your job.Jobs (or a function returning one), like myapp.jobs:jobs"
        )
    if "=" in target:
        url = "" if command else "the database's URL, like postgresql://user@host/db, or "
        raise click.ClickException(
            f"{said!r} is a libpq keyword string, which nilo-job does not take: pass "
            f"{url}module:attr naming your job.Jobs, like myapp.jobs:jobs"
        )
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise click.ClickException(f"{said!r}: write module:attr, like myapp.jobs:jobs")
    if module_name.endswith(".py") or "/" in module_name or "\\" in module_name:
        dotted = module_name.removesuffix(".py").replace("\\", "/").strip("/").replace("/", ".")
        raise click.ClickException(
            f"{module_name} is a file's path; name its module with dots instead, run from the "
            f"folder that holds it: {dotted}:{attr}"
        )
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Refusal as refusal:
        raise Refused(f"{module_name} defines a queue that cannot work", refusal) from None
    except ImportError as error:
        raise click.ClickException(f"cannot import {module_name}: {error}") from None
    except Exception:
        raise click.ClickException(
            f"importing {module_name} raised:\n{traceback.format_exc(limit=-3)}"
        ) from None
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise click.ClickException(f"{module_name} has no attribute {attr}")
        value = getattr(value, part)
    if inspect.isclass(value):
        raise click.ClickException(f"{said} is a class, not a job.Jobs{_queues_in(module)}")
    called = callable(value) and not isinstance(value, Jobs)
    if called:
        needs = _required_parameters(value)
        if needs:
            raise click.ClickException(
                f"{said} takes {', '.join(needs)}; nilo-job calls a factory with no "
                "arguments: name the job.Jobs itself, or a function of none that returns it"
            )
        try:
            value = value()
        except Refusal as refusal:
            raise Refused(f"{said} builds a queue that cannot work", refusal) from None
        except Exception:
            raise click.ClickException(
                f"calling {said} raised:\n{traceback.format_exc(limit=-3)}"
            ) from None
    if inspect.iscoroutine(value):
        value.close()
        raise click.ClickException(
            f"{said} is an async function; nilo-job calls a factory without awaiting it: "
            "make it a plain function that returns the job.Jobs"
        )
    if not isinstance(value, Jobs):
        what = f"calling {said} returned" if called else f"{said} is"
        raise click.ClickException(
            f"{what} {_a(type(value).__name__)}, not a job.Jobs{_queues_in(module)}"
        )
    print_once()  # the module may have set up logging of its own (Django does)
    return value


def _queues_in(module: object) -> str:
    """The end of a sentence naming the queues `module` holds: ": the queue in m is m:jobs"."""
    name = getattr(module, "__name__", "?")
    found = [attr for attr, value in vars(module).items() if isinstance(value, Jobs)]
    if not found:
        return ": name your job.Jobs (or a function returning one), like myapp.jobs:jobs"
    named = " or ".join(f"{name}:{attr}" for attr in found[:3])
    return f": the queue in {name} is {named}"


def _required_parameters(fn: object) -> list[str]:
    """The names of `fn`'s parameters that have no default (none when it has no signature)."""
    try:
        parameters = inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in parameters
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _a(noun: str) -> str:
    """`noun` with its indefinite article: "an int", "a dict"."""
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"
