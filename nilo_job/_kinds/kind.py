"""Reading a job class: its name, retry, final errors, timeout, snoozes, concurrency limit, the
run signature and its payload.

Every mistake in a definition is found here, when `job.Jobs(...)` is built rather than when the
first row runs, and each is a `Refusal` naming the class, the field and what to write. The result
is a `Kind`, which the queue uses without looking at the class again.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._base.bounds import POSITIVE_MS, SNOOZES, Span, whole
from .._base.errors import Refusal, TimedOut
from .._base.values import Missed, Overlap, Retry, Run, Tick
from .codec import Codec, field_names, is_record, required
from .schedule import Schedule

MAX_NAME_BYTES = 64
"""The longest kind name and unique key, in UTF-8 bytes."""

SNOOZES_DEFAULT = 100
"""How many times one row of a kind may snooze (`job.Snooze`) before a snooze counts as a failed
attempt, unless the class says `snoozes = N`."""


def name_problem(text: str) -> str | None:
    """Why `text` cannot be a kind's name or a unique key (a column every store keeps as text),
    or None when it can: it must be UTF-8 (no lone surrogate), hold no NUL character, and be at
    most `MAX_NAME_BYTES` bytes."""
    try:
        size = len(text.encode())
    except UnicodeEncodeError as error:
        return (
            f"it holds {text[error.start : error.end]!a}, which is not valid Unicode (a lone "
            "surrogate) and no store can keep"
        )
    if "\x00" in text:
        return "it holds a NUL character, which PostgreSQL cannot keep in text"
    if size > MAX_NAME_BYTES:
        return f"it is {size} bytes, and at most {MAX_NAME_BYTES} bytes are kept"
    return None


_SETTINGS = (
    "nilo_job", "retry", "final", "timeout_ms", "schedule", "overlap", "missed", "snoozes",
    "concurrency", "aliases",
)  # fmt: skip

CONCURRENCY = Span(1, 100_000, "a count of runs at once", "across every process on the store")
"""A kind's `concurrency`: the most of its rows running at once, across every process."""


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of `run` after `self`: what answers it, and for a dep, which attribute."""

    name: str
    source: Literal["tick", "run", "jobs", "dep"]
    attr: str = ""


@dataclass(frozen=True, slots=True)
class Kind:
    """A job class as the queue uses it. `snoozes` is how many times one of its rows may
    snooze before a snooze counts as a failed attempt (`SNOOZES_DEFAULT` unless the class
    says). `concurrency` is the most of its rows running at once across every process on the
    store (None: no limit). `aliases` are the names it had before a rename: rows that carry one
    are claimed and run as this kind."""

    cls: type
    name: str
    retry: Retry
    final: tuple[type[BaseException], ...]
    timeout_ms: int | None
    params: tuple[Param, ...]
    is_async: bool
    codec: Codec
    schedule: Schedule | None = None
    overlap: Overlap | None = None
    missed: Missed | None = None
    snoozes: int = SNOOZES_DEFAULT
    concurrency: int | None = None
    aliases: tuple[str, ...] = ()

    def is_final(self, error: BaseException) -> bool:
        """Whether `error` kills the row at once, whatever retry says (`final`)."""
        return isinstance(error, self.final) and not isinstance(error, TimedOut)


def read_deps(deps: object) -> dict[str, Any]:
    """The annotated attributes of `deps` by name, with their types.

    Raises:
        Refusal: the annotations cannot be resolved, or an annotated attribute is not set.
    """
    if deps is None:
        return {}
    owner = type(deps).__name__
    try:
        hints = typing.get_type_hints(type(deps))
    except Exception as error:
        raise Refusal(
            f"the annotations of deps ({owner}) cannot be resolved "
            f"({type(error).__name__}: {error}): import the types its fields name"
        ) from None
    hints = {
        name: hint for name, hint in hints.items() if typing.get_origin(hint) is not typing.ClassVar
    }
    for name in hints:
        if not hasattr(deps, name):
            raise Refusal(f"deps ({owner}) annotates {name} but has no value for it: set it")
    return hints


def read_kind(cls: object, deps: Mapping[str, Any], jobs_type: type) -> Kind:
    """Read `cls` as a job class, answering its run parameters from `deps` (name → type).

    Raises:
        Refusal: the class cannot work as a kind; the message names the class, the field and
            the fix.
    """
    if not isinstance(cls, type):
        raise Refusal(f"kinds=[...] holds {cls!r}, which is not a class: list the job classes")
    name = cls.__name__
    if not is_record(cls):
        raise Refusal(
            f"{name} is not a dataclass: put @dataclass on it (or make it a msgspec Struct or a "
            "Pydantic model), so that its fields are the payload"
        )
    fields = set(field_names(cls))
    for setting in _SETTINGS:
        if setting in fields:
            raise Refusal(
                f"{name}.{setting} is a dataclass field, so it would be part of every payload: "
                f"annotate it as ClassVar (`{setting}: ClassVar[...] = ...`) or leave it "
                "unannotated"
            )
    kind_name = _read_name(cls)
    retry = _read_retry(cls)
    final = _read_final(cls, retry)
    timeout_ms = _read_timeout(cls)
    snoozes = _read_snoozes(cls)
    concurrency = _read_concurrency(cls)
    aliases = _read_aliases(cls, kind_name)
    run = getattr(cls, "run", None)
    if run is None or not callable(run):
        raise Refusal(f"{name} has no run method: add `def run(self) -> None:` with the work")
    if isinstance(inspect.getattr_static(cls, "run"), staticmethod | classmethod):
        raise Refusal(f"{name}.run must be a plain method taking self (the payload), not static")
    params = _read_params(cls, run, deps, jobs_type)
    schedule, overlap, missed = _read_schedule(cls)
    return Kind(
        cls=cls,
        name=kind_name,
        retry=retry,
        final=final,
        timeout_ms=timeout_ms,
        params=params,
        is_async=inspect.iscoroutinefunction(run),
        codec=Codec(cls),
        schedule=schedule,
        overlap=overlap,
        missed=missed,
        snoozes=snoozes,
        concurrency=concurrency,
        aliases=aliases,
    )


def check_unique_names(kinds: Sequence[Kind]) -> None:
    """Refuse two kinds with one name, and two kinds that answer to one name (as their name or
    among their `aliases`), naming both classes."""
    seen: dict[str, type] = {}
    for kind in kinds:
        other = seen.setdefault(kind.name, kind.cls)
        if other is not kind.cls:
            raise Refusal(
                f"{other.__name__} and {kind.cls.__name__} both say nilo_job = {kind.name!r}: "
                "a kind's name is what a row carries, so give each class its own"
            )
    claimed: dict[str, Kind] = {kind.name: kind for kind in kinds}
    for kind in kinds:
        for alias in kind.aliases:
            other_kind = claimed.setdefault(alias, kind)
            if other_kind is not kind:
                said = "nilo_job =" if other_kind.name == alias else "aliases holds"
                raise Refusal(
                    f"{kind.cls.__name__}.aliases holds {alias!r}, and {other_kind.cls.__name__} "
                    f"{said} {alias!r} too: a row of that name would be run by both kinds, so "
                    "only one kind may answer to it"
                )


def answers(kinds: Sequence[Kind]) -> dict[str, Kind]:
    """Every name a row of `kinds` may carry (each kind's name and its aliases), with the kind
    that runs it."""
    found = {kind.name: kind for kind in kinds}
    for kind in kinds:
        found.update(dict.fromkeys(kind.aliases, kind))
    return found


def _read_name(cls: type) -> str:
    name = cls.__name__
    value = getattr(cls, "nilo_job", None)
    if value is None:
        slug = "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")
        raise Refusal(
            f"{name} has no nilo_job name, which is what its rows carry: add "
            f'`nilo_job = "{slug}"` to the class'
        )
    if not isinstance(value, str) or not value.strip():
        raise Refusal(f'{name}.nilo_job must be a non-empty str, like nilo_job = "send-welcome"')
    if (problem := name_problem(value)) is not None:
        raise Refusal(f"{name}.nilo_job cannot be a kind's name: {problem}. Choose another")
    return value


def _read_aliases(cls: type, kind_name: str) -> tuple[str, ...]:
    """A kind's `aliases`: the names it had before a rename, each a valid kind name, none its
    own name, none twice."""
    name = cls.__name__
    value = getattr(cls, "aliases", None)
    if value is None:
        return ()
    example = 'aliases = ("send-welcome",)'
    if not isinstance(value, tuple) or not all(isinstance(item, str) for item in value):
        raise Refusal(
            f"{name}.aliases is {value!r}; aliases is a tuple of the kind's old names (str), "
            f"like {example}"
        )
    for alias in value:
        if not alias.strip():
            raise Refusal(f"{name}.aliases holds an empty name; each alias is an old kind name")
        if (problem := name_problem(alias)) is not None:
            raise Refusal(
                f"{name}.aliases holds {alias!r}, which cannot be a kind's name: {problem}"
            )
        if alias == kind_name:
            raise Refusal(
                f"{name}.aliases holds {alias!r}, its own nilo_job name: an alias is a name the "
                "kind had before, so remove it from aliases"
            )
    if len(set(value)) != len(value):
        twice = next(alias for alias in value if value.count(alias) > 1)
        raise Refusal(f"{name}.aliases holds {twice!r} twice: list each old name once")
    return value


def _read_retry(cls: type) -> Retry:
    name = cls.__name__
    value = getattr(cls, "retry", None)
    if value is None:
        raise Refusal(
            f"{name} has no retry, and retry has no default: how many times a job is tried is a "
            f"promise about it. Add `retry = job.Retry.NONE` or, e.g., `retry = job.Retry(times=5, "
            "backoff=job.Exponential(from_ms=1_000, to_ms=3_600_000))`"
        )
    if not isinstance(value, Retry):
        raise Refusal(
            f"{name}.retry is {value!r}; write job.Retry.NONE or job.Retry(times=..., backoff=...)"
        )
    return value


def _read_final(cls: type, retry: Retry) -> tuple[type[BaseException], ...]:
    name = cls.__name__
    value = getattr(cls, "final", None)
    if value is None:
        return ()
    items = value if isinstance(value, tuple | list | frozenset | set) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, Exception)):
            raise Refusal(
                f"{name}.final holds {item!r}; final is a tuple of exception classes, like "
                "final = (Rejected, NoSuchAddress)"
            )
        if issubclass(item, TimedOut):
            raise Refusal(
                f"{name}.final lists TimedOut, and a timeout is never final: the next attempt "
                "may finish. Remove it from final"
            )
    if items and retry.times == 0:
        raise Refusal(
            f"{name}.final decides nothing on a kind whose retry is Retry.NONE (every failure is "
            "final already): remove final, or give retry some times"
        )
    return tuple(items)


def _read_timeout(cls: type) -> int | None:
    value = getattr(cls, "timeout_ms", None)
    if value is None:
        return None
    return whole(value, POSITIVE_MS, f"{cls.__name__}.timeout_ms = {{}}", "timeout_ms")


def _read_concurrency(cls: type) -> int | None:
    value = getattr(cls, "concurrency", None)
    if value is None:
        return None
    return whole(value, CONCURRENCY, f"{cls.__name__}.concurrency = {{}}", "concurrency")


def _read_snoozes(cls: type) -> int:
    value = getattr(cls, "snoozes", None)
    if value is None:
        return SNOOZES_DEFAULT
    return whole(value, SNOOZES, f"{cls.__name__}.snoozes = {{}}", "snoozes")


def _read_schedule(cls: type) -> tuple[Schedule | None, Overlap | None, Missed | None]:
    """A scheduled kind's schedule, overlap and missed; each required once `schedule` is set."""
    name = cls.__name__
    schedule = getattr(cls, "schedule", None)
    overlap = getattr(cls, "overlap", None)
    missed = getattr(cls, "missed", None)
    if schedule is None:
        for setting, value in (("overlap", overlap), ("missed", missed)):
            if value is not None:
                raise Refusal(
                    f"{name}.{setting} decides nothing on a kind with no schedule: add "
                    "`schedule = job.cron(...)` or remove it"
                )
        return None, None, None
    if not isinstance(schedule, Schedule):
        raise Refusal(
            f"{name}.schedule is {schedule!r}; write schedule = job.cron('0 3 * * *') or "
            "schedule = job.every(600_000)"
        )
    if not isinstance(overlap, Overlap):
        raise Refusal(
            f"{name} has a schedule and no overlap, which has no default: add "
            "`overlap = job.Overlap.SKIP` (no new tick while a run is running) or "
            "`overlap = job.Overlap.QUEUE` (start it anyway, on another worker)"
        )
    if not isinstance(missed, Missed):
        raise Refusal(
            f"{name} has a schedule and no missed, which has no default: add "
            "`missed = job.Missed.DROP` (forget a tick later than its successor) or "
            "`missed = job.Missed.CATCH_UP` (run it once, then continue from the clock)"
        )
    for field_name in required(cls)[:1]:
        raise Refusal(
            f"{name}.{field_name} has no default, and nobody pushes a scheduled job to "
            f"fill it in: give it one (`{field_name}: ... = ...`)"
        )
    return schedule, overlap, missed


def _read_params(
    cls: type, run: Callable[..., object], deps: Mapping[str, Any], jobs_type: type
) -> tuple[Param, ...]:
    name = cls.__name__
    try:
        hints = typing.get_type_hints(run)
    except Exception as error:
        raise Refusal(
            f"{name}.run's annotations cannot be resolved ({type(error).__name__}: {error}): "
            "import every type its parameters name in the module that defines the class"
        ) from None
    params = list(inspect.signature(run).parameters.values())
    if not params or params[0].kind not in (
        params[0].POSITIONAL_ONLY,
        params[0].POSITIONAL_OR_KEYWORD,
    ):
        raise Refusal(f"{name}.run must take self first: def run(self, ...)")
    found: list[Param] = []
    for param in params[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise Refusal(
                f"{name}.run takes {'*' if param.kind is param.VAR_POSITIONAL else '**'}"
                f"{param.name}; every parameter is answered by its type, so name each one"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise Refusal(f"{name}.run's parameter {param.name} is positional-only: drop the /")
        hint = hints.get(param.name)
        if hint is None:
            raise Refusal(
                f"{name}.run's parameter {param.name} has no annotation, and a parameter is "
                f"answered by its type: write {param.name}: job.Tick, job.Run, job.Jobs or a "
                "type that deps has"
            )
        found.append(_answer(name, param.name, hint, deps, jobs_type))
    return tuple(found)


def _answer(name: str, param: str, hint: Any, deps: Mapping[str, Any], jobs_type: type) -> Param:
    if hint is Tick:
        return Param(param, "tick")
    if hint is Run:
        return Param(param, "run")
    if isinstance(hint, type) and issubclass(hint, jobs_type):
        return Param(param, "jobs")
    if typing.get_origin(hint) is not None and Tick in typing.get_args(hint):
        raise Refusal(
            f"{name}.run asks for {param}: {_shown(hint)}; a tick is handed by value, always "
            f"present: write {param}: job.Tick"
        )
    exact = [attr for attr, kind in deps.items() if kind == hint]
    loose = [attr for attr, kind in deps.items() if _subclass(kind, hint)] if not exact else []
    for matches in (exact, loose):
        if len(matches) == 1:
            return Param(param, "dep", matches[0])
        if len(matches) > 1:
            if param in matches:
                return Param(param, "dep", param)
            raise Refusal(
                f"{name}.run asks for {param}: {_shown(hint)}, and deps has {len(matches)} fields "
                f"of that type ({', '.join(matches)}): name the parameter after one of them"
            )
    return _missing(name, param, hint)


def _subclass(kind: Any, hint: Any) -> bool:
    """Whether a deps field typed `kind` answers a parameter typed `hint` (a subclass does; a
    Protocol that cannot be checked at run time answers only by exact type)."""
    if not (isinstance(kind, type) and isinstance(hint, type)):
        return False
    try:
        return issubclass(kind, hint)
    except TypeError:
        return False


def _missing(name: str, param: str, hint: Any) -> Param:
    raise Refusal(
        f"{name}.run asks for {param}: {_shown(hint)}, and deps has no field of that type: add "
        f"`{param}: {_shown(hint)}` to the deps class and pass the value to job.Jobs(deps=...). "
        "A job runs outside any request, so a request object cannot be asked for"
    )


def _shown(hint: Any) -> str:
    return hint.__qualname__ if isinstance(hint, type) else repr(hint).replace("typing.", "")
