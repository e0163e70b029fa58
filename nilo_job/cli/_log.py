"""The `nilo-job` command's logging: `--log-level` and `--log-format`, given before the subcommand
or after it, and the JSON lines format.

    nilo-job --log-level debug worker app:jobs
    nilo-job worker app:jobs --log-level debug --log-format json

The group's options are read first and the subcommand's after, so a value given after the
subcommand wins. Logging goes to stderr through one handler of this module's, set up as
`logging.basicConfig` would: not at all when the process has handlers of its own already (a
test runner, an application calling `main()`).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_KEY = "nilo_job.log"

# What every LogRecord carries; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonLines(logging.Formatter):
    """One JSON object per record: `time` (UTC, ISO 8601 with microseconds), `level`, `logger`,
    `message`, then each field the record was given in `extra=` (kind, row, attempt, error, ms,
    …), and `traceback` when it carries an exception."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        moment = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, Any] = {
            "time": moment.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _STANDARD and not name.startswith("_"):
                entry.setdefault(name, value)
        if record.exc_text:  # given already (a failed attempt's, as its row keeps it)
            entry["traceback"] = record.exc_text
        elif record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=repr)


class _Ours(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler this module puts on the root logger (and replaces when asked again)."""


def configure(level: str | None, style: str | None) -> None:
    """Log at `level` (default INFO) in `style` ("text", the default, or "json") to stderr,
    unless the process set up logging of its own."""
    root = logging.getLogger()
    if any(not isinstance(handler, _Ours) for handler in root.handlers):
        return
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = _Ours(sys.stderr)
    handler.setFormatter(JsonLines() if style == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    root.setLevel((level or "INFO").upper())


def print_once() -> None:
    """When this module's handler is on the root logger, take off every other handler that
    writes to the terminal (stderr or stdout) from a logger whose records reach the root too:
    each record is then printed once, in the command's format. Django's default logging (with
    `DEBUG = True`) puts such a handler on `django`, set up as the command imports the queue."""
    root = logging.getLogger()
    if not any(isinstance(handler, _Ours) for handler in root.handlers):
        return
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if not isinstance(logger, logging.Logger) or not _reaches_root(logger):
            continue
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler and getattr(handler, "stream", None) in (
                sys.stderr,
                sys.stdout,
            ):
                logger.removeHandler(handler)


def _reaches_root(logger: logging.Logger) -> bool:
    """Whether `logger`'s records go on to the root logger's handlers."""
    current: logging.Logger | None = logger
    while current is not None and current.parent is not None:
        if not current.propagate:
            return False
        current = current.parent
    return True


def _given(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    settings: dict[str, str] = ctx.find_root().meta.setdefault(_KEY, {})
    if value is not None and param.name is not None:
        settings[param.name] = value
    configure(settings.get("log_level"), settings.get("log_format"))


def log_options() -> list[click.Parameter]:
    """New `--log-level` and `--log-format` options, for the group and for each subcommand."""
    return [
        click.Option(
            ["--log-level"],
            type=click.Choice(LEVELS, case_sensitive=False),
            default=None,
            expose_value=False,
            callback=_given,
            help="Python logging level (default: INFO).",
        ),
        click.Option(
            ["--log-format"],
            type=click.Choice(["text", "json"]),
            default=None,
            expose_value=False,
            callback=_given,
            help="text (default), or json: one object per line with time, level, logger, "
            "message and the record's fields (kind, row, attempt, error, ms).",
        ),
    ]


def with_log_options(command: F) -> F:
    """Add `log_options()` to a click command (or group)."""
    if isinstance(command, click.Command):
        command.params.extend(log_options())
    return command
