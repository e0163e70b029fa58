"""Reading a job class: every mistake is a `job.Refusal` raised by `job.Jobs(...)`, naming the class
and the field and saying what to write (raised when the queue is built)."""

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec
import pytest

import nilo_job as job


def refusal(*kinds: Any, deps: object = None, **settings: Any) -> str:
    """The message of the Refusal that building a queue of `kinds` raises."""
    with pytest.raises(job.Refusal) as caught:
        job.Jobs(kinds=list(kinds), store=job.Memory(), deps=deps, **settings)
    return str(caught.value)


def test_refusal_is_a_type_error_and_a_value_error() -> None:
    assert issubclass(job.Refusal, TypeError)
    assert issubclass(job.Refusal, ValueError)
    with pytest.raises(TypeError):
        raise job.Refusal("x")
    with pytest.raises(ValueError, match="x"):
        raise job.Refusal("x")


def test_a_well_formed_kind_is_read() -> None:
    class Rejected(Exception):
        pass

    @dataclass
    class SendWelcome:
        nilo_job: ClassVar[str] = "send-welcome"
        retry: ClassVar[job.Retry] = job.Retry(
            times=5, backoff=job.Exponential(from_ms=1_000, to_ms=3_600_000)
        )
        final = (Rejected,)
        timeout_ms = 300_000

        user_id: int
        email: str

        def run(self, tick: job.Tick) -> None:
            pass

    jobs = job.Jobs(kinds=[SendWelcome], store=job.Memory())
    assert [kind.name for kind in jobs.kinds] == ["send-welcome"]
    assert jobs.lease_ms == 301_000


# ------------------------------------------------------------------------------- the class


def test_a_class_that_is_not_a_dataclass_is_refused() -> None:
    class Plain:
        nilo_job = "plain"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    message = refusal(Plain)
    assert "Plain" in message
    assert "not a dataclass" in message
    assert "@dataclass" in message


def test_something_that_is_not_a_class_is_refused() -> None:
    message = refusal("send-welcome")
    assert "'send-welcome'" in message
    assert "not a class" in message


def test_a_class_without_nilo_job_is_refused_with_the_line_to_add() -> None:
    @dataclass
    class SendWelcome:
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    message = refusal(SendWelcome)
    assert "SendWelcome has no nilo_job" in message
    assert 'nilo_job = "send-welcome"' in message


@pytest.mark.parametrize("name", ["", "   ", 7])
def test_a_nilo_job_that_is_not_a_non_empty_str_is_refused(name: object) -> None:
    @dataclass
    class Blank:
        nilo_job = name
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    message = refusal(Blank)
    assert "Blank.nilo_job" in message
    assert "non-empty str" in message


@pytest.mark.parametrize("name", ["n" * 65, "é" * 33])
def test_a_nilo_job_over_64_bytes_is_refused(name: str) -> None:
    @dataclass
    class Long:
        nilo_job = name
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    message = refusal(Long)
    assert "Long.nilo_job" in message
    assert f"{len(name.encode())} bytes" in message
    assert "at most 64 bytes" in message


@pytest.mark.parametrize("name", ["n" * 64, "é" * 32])
def test_a_nilo_job_of_64_bytes_is_taken(name: str) -> None:
    @dataclass
    class Long:
        nilo_job = name
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    assert [kind.name for kind in job.Jobs(kinds=[Long], store=job.Memory()).kinds] == [name]


def test_two_kinds_with_one_name_are_refused_naming_both() -> None:
    @dataclass
    class SendWelcome:
        nilo_job = "send-welcome"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    @dataclass
    class SendWelcomeV2:
        nilo_job = "send-welcome"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    message = refusal(SendWelcome, SendWelcomeV2)
    assert "SendWelcome " in message
    assert "SendWelcomeV2" in message
    assert "'send-welcome'" in message


@pytest.mark.parametrize("setting", ["nilo_job", "retry"])
def test_a_setting_declared_as_a_dataclass_field_is_refused(setting: str) -> None:
    namespace: dict[str, Any] = {
        "__annotations__": {setting: Any},
        "nilo_job": "fielded",
        "retry": job.Retry.NONE,
        "run": lambda self: None,
    }
    Fielded = dataclass(type("Fielded", (), namespace))
    message = refusal(Fielded)
    assert f"Fielded.{setting} is a dataclass field" in message
    assert "ClassVar" in message


def test_a_class_without_run_is_refused() -> None:
    @dataclass
    class Lazy:
        nilo_job = "lazy"
        retry = job.Retry.NONE

    message = refusal(Lazy)
    assert "Lazy has no run method" in message
    assert "def run(self)" in message


def test_a_static_run_is_refused() -> None:
    @dataclass
    class Static:
        nilo_job = "static"
        retry = job.Retry.NONE

        @staticmethod
        def run() -> None:
            pass

    message = refusal(Static)
    assert "Static.run" in message
    assert "self" in message


# ---------------------------------------------------------------------------------- retry


def test_a_class_without_retry_is_refused_because_retry_has_no_default() -> None:
    @dataclass
    class SendWelcome:
        nilo_job = "send-welcome"

        def run(self) -> None:
            pass

    message = refusal(SendWelcome)
    assert "SendWelcome has no retry" in message
    assert "no default" in message
    assert "job.Retry.NONE" in message


@pytest.mark.parametrize("retry", [3, {"times": 3}, "none"])
def test_a_retry_that_is_not_a_retry_is_refused(retry: object) -> None:
    @dataclass
    class Odd:
        nilo_job = "odd"

        def run(self) -> None:
            pass

    Odd.retry = retry  # type: ignore[attr-defined]
    message = refusal(Odd)
    assert "Odd.retry" in message
    assert "job.Retry" in message


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda: job.Retry(times=-1), "times"),
        (lambda: job.Retry(times=1.5), "times"),
        (lambda: job.Retry(times=1, backoff=30_000), "backoff"),
        (lambda: job.Fixed(ms=-1), "ms"),
        (lambda: job.Exponential(from_ms=0, to_ms=10), "from_ms"),
        (lambda: job.Exponential(from_ms=100, to_ms=50), "to_ms"),
    ],
)
def test_a_retry_that_cannot_work_is_refused(build: Callable[[], object], fragment: str) -> None:
    with pytest.raises(job.Refusal, match=fragment):
        build()


def test_retry_none_is_one_attempt() -> None:
    assert job.Retry(times=0) == job.Retry.NONE
    assert job.Retry.NONE.backoff is None


# ---------------------------------------------------------------------------------- final


class Rejected(Exception):
    pass


def test_final_on_a_kind_whose_retry_is_none_is_refused() -> None:
    @dataclass
    class Pointless:
        nilo_job = "pointless"
        retry = job.Retry.NONE
        final = (Rejected,)

        def run(self) -> None:
            pass

    message = refusal(Pointless)
    assert "Pointless.final" in message
    assert "Retry.NONE" in message


def test_final_listing_timed_out_is_refused() -> None:
    class MyTimeout(job.TimedOut):
        pass

    for listed in ((Rejected, job.TimedOut), (MyTimeout,)):

        @dataclass
        class Impatient:
            nilo_job = "impatient"
            retry = job.Retry(times=3)
            final = listed

            def run(self) -> None:
                pass

        message = refusal(Impatient)
        assert "Impatient.final" in message
        assert "TimedOut" in message
        assert "never final" in message


@pytest.mark.parametrize("item", ["Rejected", int, Rejected("x"), BaseException])
def test_final_holding_something_other_than_an_exception_class_is_refused(item: object) -> None:
    @dataclass
    class Confused:
        nilo_job = "confused"
        retry = job.Retry(times=3)
        final = (Rejected, item)

        def run(self) -> None:
            pass

    message = refusal(Confused)
    assert "Confused.final" in message
    assert "exception classes" in message


# ------------------------------------------------------------------------------ timeout_ms


@pytest.mark.parametrize("timeout_ms", [0, -5, 1.5, True, "60s"])
def test_a_timeout_ms_that_is_not_a_positive_int_is_refused(timeout_ms: object) -> None:
    @dataclass
    class Report:
        nilo_job = "report"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    Report.timeout_ms = timeout_ms  # type: ignore[attr-defined]
    message = refusal(Report)
    assert message.startswith(f"Report.timeout_ms = {timeout_ms!r} ")
    assert message.endswith(
        ": timeout_ms must be whole milliseconds from 1 to 315,360,000,000 (ten years)"
    )


# ------------------------------------------------------------------------ run's parameters


def test_a_run_parameter_without_annotation_is_refused() -> None:
    @dataclass
    class Loose:
        nilo_job = "loose"
        retry = job.Retry.NONE

        def run(self, tick) -> None:  # type: ignore[no-untyped-def]
            pass

    message = refusal(Loose)
    assert "Loose.run" in message
    assert "tick" in message
    assert "no annotation" in message


class Mailer:
    pass


class Db:
    pass


@dataclass
class OnlyDb:
    db: Db


def test_a_run_parameter_deps_cannot_answer_is_refused_naming_the_job_and_what_to_add() -> None:
    @dataclass
    class SendWelcome:
        nilo_job = "send-welcome"
        retry = job.Retry.NONE

        def run(self, db: Db, mail: Mailer) -> None:
            pass

    for deps, missing in ((None, "db: Db"), (OnlyDb(db=Db()), "mail: Mailer")):
        message = refusal(SendWelcome, deps=deps)
        assert "SendWelcome.run" in message
        assert f"add `{missing}` to the deps" in message


def test_a_request_object_is_refused_because_a_job_runs_outside_any_request() -> None:
    class Request:
        pass

    @dataclass
    class Handler:
        nilo_job = "handler"
        retry = job.Retry.NONE

        def run(self, request: Request) -> None:
            pass

    message = refusal(Handler)
    assert "Handler.run" in message
    assert "request" in message


def test_two_deps_of_the_asked_type_and_no_name_to_tell_them_apart_are_refused() -> None:
    @dataclass
    class TwoMailers:
        primary: Mailer
        fallback: Mailer

    @dataclass
    class Send:
        nilo_job = "send"
        retry = job.Retry.NONE

        def run(self, mail: Mailer) -> None:
            pass

    message = refusal(Send, deps=TwoMailers(primary=Mailer(), fallback=Mailer()))
    assert "Send.run" in message
    assert "primary" in message
    assert "fallback" in message


def test_an_optional_tick_is_refused_naming_the_rule() -> None:
    @dataclass
    class Maybe:
        nilo_job = "maybe"
        retry = job.Retry.NONE

        def run(self, tick: job.Tick | None) -> None:
            pass

    message = refusal(Maybe)
    assert "Maybe.run" in message
    assert "tick: job.Tick" in message


@pytest.mark.parametrize("star", ["args", "kwargs"])
def test_a_run_taking_star_args_is_refused(star: str) -> None:
    @dataclass
    class Variadic:
        nilo_job = "variadic"
        retry = job.Retry.NONE

        if star == "args":

            def run(self, *args: Any) -> None:
                pass

        else:

            def run(self, **kwargs: Any) -> None:
                pass

    message = refusal(Variadic)
    assert "Variadic.run" in message
    assert ("*args" if star == "args" else "**kwargs") in message


def test_deps_with_an_annotated_attribute_that_is_not_set_is_refused() -> None:
    class Half:
        db: Db
        mail: Mailer

        def __init__(self) -> None:
            self.db = Db()

    @dataclass
    class Send:
        nilo_job = "send"
        retry = job.Retry.NONE

        def run(self) -> None:
            pass

    message = refusal(Send, deps=Half())
    assert "Half" in message
    assert "mail" in message


# --------------------------------------------------------------------------------- payload


@pytest.mark.parametrize(
    ("annotation", "shown"),
    [(sqlite3.Connection, "Connection"), (Callable[[], None], "Callable"), (Mailer, "Mailer")],
)
def test_a_payload_field_that_cannot_travel_through_json_is_refused_naming_it(
    annotation: object, shown: str
) -> None:
    namespace: dict[str, Any] = {
        "__annotations__": {"user_id": int, "handle": annotation},
        "nilo_job": "carrier",
        "retry": job.Retry.NONE,
        "run": lambda self: None,
    }
    Carrier = dataclass(type("Carrier", (), namespace))
    message = refusal(Carrier)
    assert "Carrier.handle" in message
    assert shown in message
    assert "JSON" in message


def test_a_msgspec_struct_is_a_kind_too() -> None:
    class Ping(msgspec.Struct):
        nilo_job: ClassVar[str] = "ping"
        retry: ClassVar[job.Retry] = job.Retry.NONE

        host: str

        def run(self) -> None:
            pass

    jobs = job.Jobs(kinds=[Ping], store=job.Memory())
    assert [kind.name for kind in jobs.kinds] == ["ping"]


# ------------------------------------------------------------------------- queue settings


@dataclass
class Fine:
    nilo_job = "fine"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


@pytest.mark.parametrize("setting", ["workers", "poll_ms", "timeout_ms"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_a_queue_setting_that_is_not_a_positive_int_is_refused(setting: str, value: object) -> None:
    message = refusal(Fine, **{setting: value})
    assert message.startswith(f"job.Jobs({setting}={value!r}) ")
    assert f": {setting} must be " in message
    assert " from 1 to " in message


@pytest.mark.parametrize("kinds", [[], Fine, None])
def test_kinds_that_are_not_a_non_empty_list_are_refused(kinds: object) -> None:
    with pytest.raises(job.Refusal, match="kinds"):
        job.Jobs(kinds=kinds, store=job.Memory())  # type: ignore[arg-type]


@pytest.mark.parametrize("store", [None, "sqlite:///app.db", object()])
def test_a_store_that_is_not_a_store_is_refused(store: object) -> None:
    with pytest.raises(job.Refusal, match=r"job\.Memory"):
        job.Jobs(kinds=[Fine], store=store)  # type: ignore[arg-type]


@pytest.mark.parametrize("target", ["mssql://x/y", "app.db", 5])
def test_a_table_target_that_is_not_a_database_url_is_refused(target: object) -> None:
    with pytest.raises(job.Refusal, match="sqlite:///"):
        job.Table(target)


@pytest.mark.parametrize(
    "build",
    [
        lambda: job.Memory(bytes=0),
        lambda: job.Memory(max_payload=-1),
        lambda: job.Memory(bytes=1.5),
        lambda: job.MemorySpace(ttl_s=0),
        lambda: job.MemorySpace(ttl_s=30, max_keys=0),
    ],
)
def test_a_memory_bound_that_is_not_positive_is_refused(build: Callable[[], object]) -> None:
    with pytest.raises(job.Refusal, match="positive"):
        build()


def test_a_scheduled_struct_without_a_default_is_refused_like_a_dataclass() -> None:
    import msgspec

    class Tidy(msgspec.Struct):
        nilo_job: ClassVar[str] = "tidy"
        retry: ClassVar[job.Retry] = job.Retry.NONE
        schedule: ClassVar[job.Schedule] = job.every(60_000)
        overlap: ClassVar[job.Overlap] = job.Overlap.SKIP
        missed: ClassVar[job.Missed] = job.Missed.DROP

        older_than_days: int

        def run(self) -> None:
            pass

    with pytest.raises(job.Refusal, match=r"Tidy\.older_than_days has no default"):
        job.Jobs(kinds=[Tidy], store=job.Memory())


async def test_serve_refuses_a_grace_that_is_not_milliseconds() -> None:
    jobs = job.Jobs(kinds=[Fine], store=job.Memory())
    with pytest.raises(job.Refusal, match=r"serve\(grace_ms=-1\)"):
        await jobs.serve(grace_ms=-1)


# Durations past ten years are refused where they are written: a timeout, a retry's wait or a
# schedule's period that long would make a lease, a retry or a tick no store can keep.

TEN_YEARS_MS = 10 * 365 * 86_400_000


@dataclass
class Ok:
    nilo_job = "ok"
    retry = job.Retry.NONE

    def run(self) -> None:
        pass


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (
            lambda: job.every(TEN_YEARS_MS + 1),
            "job.every(315360000001) is more than 315,360,000,000: ms must be whole "
            "milliseconds from 1 to 315,360,000,000 (ten years)",
        ),
        (
            lambda: job.Fixed(ms=TEN_YEARS_MS + 1),
            "Fixed(ms=315360000001) is more than 315,360,000,000: ms must be whole "
            "milliseconds from 0 to 315,360,000,000 (ten years)",
        ),
        (
            lambda: job.Exponential(from_ms=1, to_ms=TEN_YEARS_MS + 1),
            "Exponential(to_ms=315360000001) is more than 315,360,000,000: to_ms must be whole "
            "milliseconds from 1 to 315,360,000,000 (ten years)",
        ),
        (lambda: job.cron("0 3 * * *", tz=5), "job.cron('0 3 * * *', tz=5): a zoneinfo name"),
        (
            lambda: job.MemorySpace(ttl_s=float("nan")),
            "MemorySpace(ttl_s=nan) is not a number: ttl_s must be a positive number of "
            "seconds, at most 315,360,000 (ten years)",
        ),
        (
            lambda: job.MemorySpace(ttl_s=float("inf")),
            "MemorySpace(ttl_s=inf) is not a finite number: ttl_s must be a positive number of "
            "seconds, at most 315,360,000 (ten years)",
        ),
        (
            lambda: job.Jobs(kinds=[Ok], store=job.Memory(), timeout_ms=TEN_YEARS_MS + 1),
            "job.Jobs(timeout_ms=315360000001) is more than 315,360,000,000: timeout_ms must be "
            "whole milliseconds from 1 to 315,360,000,000 (ten years)",
        ),
        (
            lambda: job.Jobs(kinds=[Ok], store=job.Memory(), poll_ms=TEN_YEARS_MS + 1),
            "job.Jobs(poll_ms=315360000001) is more than 315,360,000,000: poll_ms must be "
            "whole milliseconds from 1 to 315,360,000,000 (ten years)",
        ),
    ],
)
def test_a_setting_out_of_bounds_is_refused_in_a_sentence(
    make: Callable[[], object], words: str
) -> None:
    with pytest.raises(job.Refusal) as caught:
        make()
    assert str(caught.value).startswith(words)


def test_a_kind_whose_timeout_is_over_ten_years_is_refused() -> None:
    @dataclass
    class Slow:
        nilo_job = "slow"
        retry = job.Retry.NONE
        timeout_ms = TEN_YEARS_MS + 1

        def run(self) -> None:
            pass

    assert refusal(Slow).startswith(
        "Slow.timeout_ms = 315360000001 is more than 315,360,000,000: timeout_ms must be whole "
        "milliseconds from 1 to 315,360,000,000 (ten years)"
    )


@pytest.mark.parametrize("now_us", ["x", 1.5, -1, 2**63, True])
async def test_seed_at_refuses_what_is_no_moment_and_writes_nothing(now_us: object) -> None:
    @dataclass
    class Tick:
        nilo_job = "tick"
        retry = job.Retry.NONE
        schedule = job.every(60_000)
        overlap = job.Overlap.SKIP
        missed = job.Missed.DROP

        def run(self) -> None:
            pass

    jobs = job.Jobs(kinds=[Tick], store=job.Memory())
    with pytest.raises(job.Refusal, match=r"seed_at\(.*\) .*: now_us must be µs since the epoch"):
        await jobs.seed_at(now_us)  # type: ignore[arg-type]
    assert await jobs.stats() == (0, 0, 0)
