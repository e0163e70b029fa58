"""Every exception nilo-job raises or records, under one root.

    JobError             the root of the queue's own errors
    ├── QueueFull        a job.Memory store has no room for the row
    ├── PayloadTooLarge  a payload's JSON is larger than the store's max_payload (also a
    │                    Refusal: refused at push, nothing written)
    ├── TimedOut         the name a run that outlived its timeout_ms records; never final
    ├── BadPayload       the name a row records when its stored JSON no longer fits its class
    ├── LeaseLost        a worker tried to finish a row another worker has since claimed
    └── StoreUnavailable the store could not be reached or answered with an error

    Refusal(TypeError, ValueError)
                         a mistake in how the queue is defined or called: raised where the
                         mistake is made, naming the class, the field and what to write

A job's own exceptions are never wrapped: a dead row keeps their class name, so `dead_ones`
says `Rejected` rather than a word of the queue's.

`job.Snooze` and `job.RetryIn` are not errors but words a run raises to say when it runs again
(`values`); they stand outside this tree.
"""

from __future__ import annotations

from typing import TypeGuard


class JobError(Exception):
    """The root of every error the queue itself raises or records."""


class QueueFull(JobError):
    """A `job.Memory` store holds `bytes` of payload already and the new row does not fit.

    A full Memory answers QueueFull rather than writing over the oldest row: it is a queue, not a
    cache. Nothing is written by the push that raised it.
    """


class TimedOut(JobError):
    """A run outlived its `timeout_ms` (real time) and was cancelled.

    It is recorded as a failed attempt named ``TimedOut`` and is retried or dead by the kind's
    `retry`. It is never final: the next attempt may finish. Listing it in a kind's
    `final` is a `Refusal`.
    """


class BadPayload(JobError):
    """A row's stored JSON no longer fits its kind's class (a field renamed, a type changed).

    The row dies at once under this name, without calling `run`, and the worker goes on.
    """


class LeaseLost(JobError):
    """The name the log gives an end that was not written: a worker's lease on a row ran out and
    another worker claimed it before this one finished.

    Never raised to your code: the late worker's outcome is dropped (the row belongs to its new
    holder), the log says so as a warning with `error="LeaseLost"`, and observers see `lost`.
    """


class StoreUnavailable(JobError):
    """The store could not be reached, or answered with an error that is not the caller's fault."""


class Refusal(TypeError, ValueError):
    """A definition or a call that cannot be right, refused before anything is written.

    Raised where the mistake is made: by `job.Jobs(...)` for a kind that cannot work, by
    `job.cron(...)` for a bad expression, and by `push` for options that cannot go together or a
    payload that cannot round-trip. The message names the class and the field and says what to
    write instead. `nilo-job check module:attr` prints them for CI.
    """


class PayloadTooLarge(JobError, Refusal):
    """A payload's JSON is larger than the store's `max_payload` (bytes): refused at `push`,
    `push_many` and `push_in`, naming the size, the limit and how to raise it. Nothing is
    written. Both a `JobError` and a `Refusal`.
    """


# Named where users import them, so that a path built from an error's class (Django's
# `exception_class_path`, a pickle, a log) is one they can import.
for _public in (
    JobError,
    QueueFull,
    PayloadTooLarge,
    TimedOut,
    BadPayload,
    LeaseLost,
    StoreUnavailable,
    Refusal,
):
    _public.__module__ = "nilo_job"


def is_int(value: object, least: int | None = None, most: int | None = None) -> TypeGuard[int]:
    """Whether `value` is an int (a bool is not) from `least` to `most`, both included; a bound
    that is None sets no limit. The check under `bounds.whole`, which says why in a sentence."""
    if isinstance(value, bool) or not isinstance(value, int):
        return False
    return (least is None or value >= least) and (most is None or value <= most)


def refuse_within(within: object) -> None:
    """Refuse `within` given to `push_in`: a Space cannot roll back with the caller's
    transaction.

    Raises:
        Refusal: `within` is not None.
    """
    if within is not None:
        raise Refusal(
            "push_in cannot take within=...: the row commits or rolls back with your "
            "transaction, and a Space cannot roll back with it (a rolled-back push_in would "
            "leave its mark for the whole window). Use unique=... (the table's own index) "
            "here, or push(..., within=...) outside the transaction"
        )
