"""The public names: what `import nilo_job as job` offers, and the shape of its values."""

import dataclasses

import pytest

import nilo_job as job

EXPORTS = {
    "Attempt",
    "BadPayload",
    "Cron",
    "Dead",
    "Every",
    "Exponential",
    "Fixed",
    "Flow",
    "Found",
    "JobError",
    "Jobs",
    "LeaseLost",
    "Memory",
    "MemorySpace",
    "Missed",
    "Overlap",
    "PayloadTooLarge",
    "QueueFull",
    "RedisSpace",
    "Refusal",
    "Retry",
    "RetryIn",
    "Row",
    "Run",
    "Schedule",
    "Snooze",
    "Space",
    "State",
    "Stats",
    "Status",
    "Store",
    "StoreUnavailable",
    "Table",
    "Tick",
    "TimedOut",
    "Where",
    "cron",
    "every",
    "now_us",
}


def test_all_is_exactly_the_public_names() -> None:
    assert set(job.__all__) == EXPORTS
    assert len(job.__all__) == len(EXPORTS)
    for name in job.__all__:
        assert hasattr(job, name), name


def test_star_import_gives_the_public_names() -> None:
    scope: dict[str, object] = {}
    exec("from nilo_job import *", scope)
    assert set(scope) - {"__builtins__"} == EXPORTS


@pytest.mark.parametrize(
    ("cls", "values"),
    [
        (job.Stats, (1, 2, 3)),
        (job.Status, (job.State.DONE, 1, 5)),
        (job.Dead, (1, "k", "Boom", 1, {}, 0)),
        (job.Tick, (1, 1, 0, True)),
    ],
)
def test_values_are_frozen_dataclasses(cls: type, values: tuple[object, ...]) -> None:
    assert dataclasses.is_dataclass(cls)
    assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    value = cls(*values)
    first = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, first, 9)


def test_value_fields_are_the_documented_ones() -> None:
    def names(cls: type) -> list[str]:
        return [field.name for field in dataclasses.fields(cls)]

    assert names(job.Stats) == ["queued", "running", "dead", "done"]
    assert names(job.Status) == ["state", "attempts", "progress"]
    assert names(job.Dead) == [
        "id", "kind", "error", "attempts", "payload", "died_at", "message", "traceback",
        "payload_cut",
    ]  # fmt: skip
    assert names(job.Tick) == ["id", "attempts", "run_at", "last"]
    assert names(job.Where) == ["state", "kind", "error", "key", "ids"]
    assert names(job.Found) == ["rows", "next"]
    assert names(job.Row) == [
        "id", "kind", "state", "payload", "attempts", "run_at", "unique_key", "pushed_at",
        "started_at", "finished_at", "died_at", "lease_until", "worker", "error", "message",
        "traceback", "result", "unreadable", "payload_cut", "snoozes", "attempts_log",
    ]  # fmt: skip
    assert names(job.Attempt) == [
        "attempt", "outcome", "started_at", "ended_at", "worker", "error", "message", "traceback",
    ]  # fmt: skip


def test_stats_read_by_attribute_and_equal_to_the_plain_tuple() -> None:
    stats = job.Stats(queued=1, running=2, dead=3)
    assert (stats.queued, stats.running, stats.dead) == (1, 2, 3)
    assert stats == (1, 2, 3)
    assert stats == job.Stats(1, 2, 3)
    assert stats != (1, 2, 4)
    assert tuple(stats) == (1, 2, 3)
    kept = job.Stats(1, 2, 3, done=40)
    assert (kept == (1, 2, 3), kept.done, len(kept)) == (True, 40, 3)  # done is not in the tuple


@pytest.mark.parametrize(
    "error",
    [job.QueueFull, job.PayloadTooLarge, job.TimedOut, job.BadPayload, job.StoreUnavailable],
)
def test_the_queue_errors_share_one_root(error: type[Exception]) -> None:
    assert issubclass(error, job.JobError)


def test_payload_too_large_is_also_a_refusal() -> None:
    assert issubclass(job.PayloadTooLarge, job.Refusal)
    assert not issubclass(job.QueueFull, job.Refusal)


@pytest.mark.parametrize(("word", "text"), [(job.Snooze, "snooze for"), (job.RetryIn, "retry in")])
def test_snooze_and_retry_in_are_exceptions_a_run_raises_not_queue_errors(
    word: type[job.Snooze] | type[job.RetryIn], text: str
) -> None:
    import pickle

    assert issubclass(word, Exception)
    assert not issubclass(word, job.JobError)
    assert word.__module__ == "nilo_job"
    said = word(ms=60_000)
    assert (said.ms, str(said)) == (60_000, f"{text} 60,000 ms")
    again = pickle.loads(pickle.dumps(said))
    assert (type(again), again.ms) == (word, 60_000)


def test_state_is_a_str_enum_of_the_four_states() -> None:
    assert {state.value for state in job.State} == {"queued", "running", "done", "dead"}
    assert all(isinstance(state, str) for state in job.State)


def test_now_us_is_microseconds_since_the_epoch() -> None:
    import time

    before = time.time_ns() // 1_000
    now = job.now_us()
    after = time.time_ns() // 1_000
    assert isinstance(now, int)
    assert before <= now <= after
