"""What a run is handed (parameters by annotation, deps told apart by type and name), a follow-up
pushed by a run, sync runs off the event loop, and drain and run_one: their counts, their order,
and the clock read once."""

import logging
import threading
from dataclasses import dataclass
from typing import Any

import nilo_job as job
from nilo_job.store.contract import Store
from tests.helpers.outcomes import Boom, HardRejected, Rejected

# ------------------------------------------------------------------------ what run gets


class Mailer:
    def __init__(self, name: str) -> None:
        self.name = name


class SmtpMailer(Mailer):
    pass


class Db:
    pass


@dataclass
class Deps:
    db: Db
    mail: Mailer


async def test_run_parameters_are_answered_by_their_annotations(store: Store, t: int) -> None:
    got: dict[str, Any] = {}

    @dataclass
    class Everything:
        nilo_job = "everything"
        retry = job.Retry(times=2)

        async def run(
            self, scope: job.Run, outbox: Mailer, which: job.Tick, queue: job.Jobs, conn: Db
        ) -> None:
            got.update(scope=scope, outbox=outbox, which=which, queue=queue, conn=conn)

    deps = Deps(db=Db(), mail=Mailer("primary"))
    jobs = job.Jobs(kinds=[Everything], store=store, deps=deps)
    row = await jobs.push(Everything(), at=t - 7)
    assert await jobs.drain_at(t) == 1
    assert got["which"] == job.Tick(id=row, attempts=1, run_at=t - 7, last=False)
    assert got["scope"].now_us == t
    assert got["scope"].tick == got["which"]
    assert isinstance(got["scope"].log, logging.LoggerAdapter)
    assert got["queue"] is jobs
    assert got["outbox"] is deps.mail
    assert got["conn"] is deps.db


async def test_a_dep_of_a_subclass_answers_a_parameter_of_its_base(store: Store, t: int) -> None:
    got: list[Mailer] = []

    @dataclass
    class SmtpDeps:
        mail: SmtpMailer

    @dataclass
    class Send:
        nilo_job = "send"
        retry = job.Retry.NONE

        def run(self, mail: Mailer) -> None:
            got.append(mail)

    deps = SmtpDeps(mail=SmtpMailer("smtp"))
    jobs = job.Jobs(kinds=[Send], store=store, deps=deps)
    await jobs.push(Send())
    assert await jobs.drain_at(t) == 1
    assert got == [deps.mail]


async def test_two_deps_of_one_type_are_told_apart_by_the_parameter_name(
    store: Store, t: int
) -> None:
    got: list[str] = []

    @dataclass
    class TwoMailers:
        primary: Mailer
        fallback: Mailer

    @dataclass
    class Send:
        nilo_job = "send"
        retry = job.Retry.NONE

        def run(self, fallback: Mailer, primary: Mailer) -> None:
            got.extend([fallback.name, primary.name])

    jobs = job.Jobs(
        kinds=[Send], store=store, deps=TwoMailers(primary=Mailer("p"), fallback=Mailer("f"))
    )
    await jobs.push(Send())
    assert await jobs.drain_at(t) == 1
    assert got == ["f", "p"]


async def test_a_run_can_push_a_follow_up_that_runs_in_the_same_drain(store: Store, t: int) -> None:
    order: list[str] = []

    @dataclass
    class Process:
        nilo_job = "process"
        retry = job.Retry.NONE

        file: int

        def run(self) -> None:
            order.append(f"process {self.file}")

    @dataclass
    class Download:
        nilo_job = "download"
        retry = job.Retry(times=3, backoff=job.Fixed(ms=30_000))

        file: int

        async def run(self, jobs: job.Jobs) -> None:
            order.append(f"download {self.file}")
            await jobs.push(Process(file=self.file))

    jobs = job.Jobs(kinds=[Download, Process], store=store)
    await jobs.push(Download(file=9))
    assert await jobs.drain_at(t) == 2
    assert order == ["download 9", "process 9"]
    assert await jobs.stats() == (0, 0, 0)


async def test_a_sync_run_executes_off_the_event_loop_thread(store: Store, t: int) -> None:
    threads: list[int] = []
    ticks: list[tuple[int, int]] = []

    @dataclass
    class Blocking:
        nilo_job = "blocking"
        retry = job.Retry.NONE

        def run(self, tick: job.Tick, scope: job.Run) -> None:
            ticks.append((scope.now_us, tick.attempts))
            threads.append(threading.get_ident())

    @dataclass
    class Cooperative:
        nilo_job = "cooperative"
        retry = job.Retry.NONE

        async def run(self) -> None:
            threads.append(threading.get_ident())

    jobs = job.Jobs(kinds=[Blocking, Cooperative], store=store)
    await jobs.push(Blocking(), at=t - 2)
    await jobs.push(Cooperative(), at=t - 1)
    assert await jobs.drain_at(t) == 2
    assert ticks == [(t, 1)]
    loop_thread = threading.get_ident()
    assert threads[0] != loop_thread
    assert threads[1] == loop_thread


async def test_an_exception_in_a_sync_run_is_recorded_by_name(store: Store, t: int) -> None:
    @dataclass
    class Sync:
        nilo_job = "sync"
        retry = job.Retry.NONE

        def run(self) -> None:
            raise HardRejected("550 no such user")

    jobs = job.Jobs(kinds=[Sync], store=store)
    await jobs.push(Sync())
    assert await jobs.drain_at(t) == 1
    assert [d.error for d in await jobs.dead_ones()] == ["HardRejected"]


# ------------------------------------------------------------------------ drain, run_one


async def test_drain_counts_runs_and_only_what_is_due(store: Store, t: int) -> None:
    @dataclass
    class Task:
        nilo_job = "task"
        retry = job.Retry.NONE

        fail: bool = False

        def run(self) -> None:
            if self.fail:
                raise Boom

    jobs = job.Jobs(kinds=[Task], store=store)
    await jobs.push(Task(), at=t)
    await jobs.push(Task(fail=True), at=t)
    await jobs.push(Task(), at=t + 1)
    assert await jobs.drain_at(t) == 2  # a failed run is a run
    assert await jobs.stats() == (1, 0, 1)
    assert await jobs.drain_at(t) == 0
    assert await jobs.drain_at(t + 1) == 1
    assert await jobs.drain() == 0


async def test_run_one_runs_one_row_or_answers_false(store: Store, t: int) -> None:
    ran: list[int] = []

    @dataclass
    class Task:
        nilo_job = "task"
        retry = job.Retry.NONE

        n: int

        def run(self) -> None:
            ran.append(self.n)

    jobs = job.Jobs(kinds=[Task], store=store)
    assert await jobs.run_one_at(t) is False
    assert await jobs.run_one() is False
    await jobs.push(Task(n=1), at=t)
    await jobs.push(Task(n=2), at=t + 5)
    assert await jobs.run_one_at(t + 4) is True
    assert await jobs.run_one_at(t + 4) is False
    assert ran == [1]
    assert await jobs.run_one_at(t + 5) is True
    assert ran == [1, 2]
    await jobs.push(Task(n=3))
    assert await jobs.run_one() is True
    assert ran == [1, 2, 3]


async def test_drain_runs_in_run_at_order(store: Store, t: int) -> None:
    ran: list[int] = []

    @dataclass
    class Task:
        nilo_job = "task"
        retry = job.Retry.NONE

        n: int

        def run(self) -> None:
            ran.append(self.n)

    jobs = job.Jobs(kinds=[Task], store=store)
    for n, offset in [(3, 30), (1, 10), (2, 20)]:
        await jobs.push(Task(n=n), at=t + offset)
    assert await jobs.drain_at(t + 30) == 3
    assert ran == [1, 2, 3]


async def test_drain_reads_the_clock_once(store: Store) -> None:
    # A follow-up due a microsecond after the drain's reading is not due in that drain, however
    # long the run took.
    readings: list[int] = []

    @dataclass
    class Next:
        nilo_job = "next"
        retry = job.Retry.NONE

        def run(self) -> None:
            readings.append(-1)

    @dataclass
    class First:
        nilo_job = "first"
        retry = job.Retry.NONE

        async def run(self, scope: job.Run, jobs: job.Jobs) -> None:
            readings.append(scope.now_us)
            while job.now_us() <= scope.now_us + 1:  # the wall clock passes the follow-up's time
                pass
            await jobs.push(Next(), at=scope.now_us + 1)

    jobs = job.Jobs(kinds=[First, Next], store=store)
    await jobs.push(First())
    assert await jobs.drain() == 1
    assert len(readings) == 1
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.drain_at(readings[0] + 1) == 1
    assert readings[1] == -1


async def test_a_dead_row_keeps_the_name_of_the_error_that_killed_it(store: Store, t: int) -> None:
    @dataclass
    class Changing:
        nilo_job = "changing"
        retry = job.Retry(times=1)

        def run(self, tick: job.Tick) -> None:
            raise ConnectionResetError if tick.attempts == 1 else Rejected("550")

    jobs = job.Jobs(kinds=[Changing], store=store)
    await jobs.push(Changing())
    assert await jobs.drain_at(t) == 2
    assert [(d.error, d.attempts) for d in await jobs.dead_ones()] == [("Rejected", 2)]
