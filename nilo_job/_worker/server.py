"""The server: `serve` and `serving`, the worker loop of one process.

One claim loop per process, in a task of its own, claims due rows for the workers that are free
(and, while runs are fast, a few more: claiming ahead), and puts them on the feed; `workers`
long-lived worker tasks each take a row from the feed, which starts it in a task of its own
(`Runner.execute`), and wait until its run frees them. With nothing due the loop sleeps
`poll_ms`, or until a wake-up (`Wakeups`): a push, a row falling due, another process's NOTIFY.
It follows the store's clock where the store has one. A kind with a concurrency limit is claimed
within it (the store counts its live leases); its rows the limit leaves queued are looked at
again when one of its runs ends in this process, or at the poll. A stop gives back the rows
claimed and not started (a claim being answered as the stop comes included), lets running rows
finish for a grace period, then cancels them and gives their rows back unrun.

A process holds a bounded number of rows whose ends are not yet written (`Bound`: two per worker,
plus eight per end of its largest recent write of ends): while ends cannot be written, it stops
claiming once it holds two per worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence

from .._base.bounds import MS, whole
from .._base.clock import now_us
from .._base.errors import Refusal
from .._base.process import worker
from .._base.text import count_of
from ..store.contract import Claimed
from .beat import BEAT_MS, Beat
from .feed import Feed
from .holdback import HoldWatch
from .parts import Parts
from .pauses import Pauses, served
from .pruner import Pruner
from .rebuilds import Rebuilds
from .runner import Runner
from .wakeups import Wakeup

log = logging.getLogger("nilo_job")

_CLOCK_EVERY_US = 60_000_000  # how often serve measures the store's clock again
_SEED_EVERY_US = 60_000_000  # and seeds every schedule again (a tick row deleted by hand)


class Server:
    """Serves one queue in this process.

    Args:
        parts: the queue's parts.
        runner: runs each claimed row.
        workers: rows running at once.
        poll_ms: the longest sleep with nothing due, in milliseconds.
        pruner: deletes done rows past the queue's retention while serve runs (None: the queue
            keeps none).
    """

    def __init__(
        self, parts: Parts, runner: Runner, workers: int, poll_ms: int, pruner: Pruner | None
    ) -> None:
        self.store = parts.store
        self.kinds = parts.kinds
        self.names = tuple(parts.kinds)  # the kinds serve runs
        self.pauses = Pauses(parts.store, parts.wakeups, poll_ms, parts.aliases)  # not paused
        self.pruner = pruner
        self.clock = parts.clock
        self.workers = workers
        self.poll_ms = poll_ms
        self.lease_ms = parts.lease_ms
        self.heartbeat_ms = parts.heartbeat_ms  # None: leases are not renewed
        self.beat: Beat | None = None  # this run of serve's entry in the worker registry
        self.limits = parts.limits  # the kinds with a concurrency limit
        self.timeout_ms = parts.timeout_ms
        self.runner = runner
        self.ends = parts.ends
        self.ticks = parts.ticks
        self.observers = parts.observers
        self.wakeups = parts.wakeups
        self.task: asyncio.Task[None] | None = None  # serve's own, while it runs
        # serve's context (each run gets a copy); the claim loop awaits a claim; serve stops.
        self.context, self.claiming, self.stopping = contextvars.Context(), False, False
        self.stop_began: float | None = None  # loop time serve was asked to stop
        self.claims: asyncio.Task[None] | None = None  # the claim loop's task, while serve runs
        self.tally = Tally()  # what became of the rows this process held as serve stopped
        self.stop_given: set[int] = set()  # rows given back as serve stopped

    def alive(self) -> bool:
        """False once serve was started and its task has ended; True otherwise."""
        return self.task is None or not self.task.done()

    def not_serving(self) -> str | None:
        """Why serve's workers are not running rows now, in words (it has not started, is
        stopping, or has ended); None while they are (what a readiness probe asks)."""
        if self.task is None:
            return "serve has not started yet"
        if self.task.done():
            return "serve has ended"
        if self.stopping:
            return "serve is stopping"
        return None

    async def serve(
        self,
        grace_ms: int,
        ready: asyncio.Event | None = None,
        kinds: Sequence[str] | None = None,
    ) -> None:
        """`Jobs.serve`; `ready` is set once pushes from this loop reach it (its wake-up exists).

        Raises:
            Refusal: serve already runs on this queue, or `kinds` names a kind it lacks.
            StoreUnavailable: at start, the store cannot be reached or its table is not usable.
        """
        whole(grace_ms, MS, "serve(grace_ms={})", "grace_ms")
        if self.task is not None and not self.task.done():
            raise Refusal("this job.Jobs is already serving: call serve() once per queue")
        self.names = served(kinds, self.kinds)
        await self.store.open()
        await self.store.check()
        await self.clock.follow(self.store.now_us)
        self.pauses.serve(self.names)
        self.pauses.set(await self.store.paused())
        wakeup = self.wakeups.start(asyncio.get_running_loop())
        if ready is not None:
            ready.set()
        try:
            await self.ticks.seed_at(self.clock.now())  # its due times go to the wake-ups
        except BaseException:
            self.wakeups.stop()
            raise
        self.task = asyncio.current_task()
        self.context, self.claiming, self.stopping = contextvars.copy_context(), False, False
        self.stop_began, self.tally, self.stop_given = None, Tally(), set()
        self.ends.start_grouping(self.workers)  # (its bound, which the feed keeps to)
        feed = self.wakeups.feed = Feed(
            wakeup.set, self.pauses.claimable, self._start, self.limits,
            now=self.clock.now, bound=self.ends.bound,
        )  # fmt: skip
        self.ends.bound.lapsed = self.wakeups.front.full
        beat = self.beat = Beat(
            self.store, self.clock, self.heartbeat_ms or BEAT_MS,
            None if self.heartbeat_ms is None else self.lease_ms, lambda: held(feed),
        )  # fmt: skip
        beating = asyncio.create_task(beat.run(self.names, self.workers))
        workers = [asyncio.create_task(self._worker(feed)) for _ in range(self.workers)]
        helpers = [
            asyncio.create_task(self.store.watch(self._heard)),
            asyncio.create_task(self.pauses.follow()),
        ]
        if self.pruner is not None:
            helpers.append(asyncio.create_task(self.pruner.run()))
        rebuilds = Rebuilds(self.store, repr(self.store))
        holds = HoldWatch(
            self.store, repr(self.store), ended=rebuilds.arm, quiet=rebuilds.measure,
            held=self.wakeups.front.holding,
        )  # fmt: skip
        helpers += [asyncio.create_task(holds.run()), asyncio.create_task(rebuilds.run())]
        paused = [name for name in self.names if name not in self.pauses.claimable]
        log.info(
            "serving %s with %s%s", ", ".join(self.names), count_of(self.workers, "worker"),
            f" ({', '.join(paused)} paused)" if paused else "",
        )  # fmt: skip
        try:
            await self._claims(feed, wakeup)
        finally:
            for helper in helpers:
                helper.cancel()
            try:
                # The beat goes on through the stop: the grace period's runs keep their leases.
                await self._stop(feed, workers, grace_ms)
            finally:
                self.wakeups.feed = None
                self.ends.group = None
                self.ends.end_serving()
                try:
                    await cancel_and_wait([*helpers, beating])
                    await beat.unregister()
                finally:  # (also when a second cancel comes this late)
                    self.beat = None
                    self.wakeups.stop()
                    log.info(self.tally.said())  # the stop's last line

    @contextlib.asynccontextmanager
    async def serving(
        self, grace_ms: int, kinds: Sequence[str] | None = None
    ) -> AsyncIterator[None]:
        """`Jobs.serving`: serve in a task for the body of the block."""
        # A store that cannot be reached, or a missing table, is raised here rather than lost
        # in the background task.
        whole(grace_ms, MS, "serving(grace_ms={})", "grace_ms")
        await self.store.open()
        await self.store.check()
        ready = asyncio.Event()
        served(kinds, self.kinds)  # a wrong name is refused here, not in the task
        task = asyncio.create_task(self.serve(grace_ms, ready, kinds))
        try:
            # Into the block once serve hears this loop's pushes: a row pushed for later at
            # once is then woken for when due, not found a poll later.
            started = asyncio.ensure_future(ready.wait())
            try:
                await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                started.cancel()
            if task.done():
                task.result()  # serve failed as it started: its error, here
            yield
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # this block itself was cancelled (a timeout around it, say)

    def _heard(self, run_at: int | None) -> None:
        """Another process pushed a row due at `run_at` (the store's watch). None, said as the
        watch (re)starts, stands for rows pushed while nobody listened, due at any time: the
        next claim is then a full one."""
        if run_at is None:
            self.wakeups.front.full()
        self.wakeups.wake_at(run_at)

    async def _claims(self, feed: Feed, wakeup: Wakeup) -> None:
        """Run the claim loop, which awaits each claim itself, in a task of its own
        (`self.claims`) until serve is cancelled. A cancel during a claim lets its answer come
        (the store may finish it in its own thread or on the server), and the loop then gives
        those rows back unrun and ends; `_stop` waits for that, while the running rows have
        their grace period."""
        loop = asyncio.get_running_loop()
        claims = loop.create_task(self._claim_loop(feed, wakeup), context=self.context.copy())
        self.claims = claims
        try:
            await asyncio.shield(claims)
        except asyncio.CancelledError:
            self.stopping = True
            self.stop_began = loop.time()  # the grace period counts from here
            if not self.claiming:
                claims.cancel()
            raise

    async def _claim_loop(self, feed: Feed, wakeup: Wakeup) -> None:
        """Claim for the workers waiting on `feed`, hand the rows over, repeat.

        While runs are fast it claims ahead (`Feed.wanted`), so that workers seldom wait for a
        claim's round trip. With nothing due it sleeps `poll_ms`, or until a wake-up.
        """
        poll_s = self.poll_ms / 1_000
        seeded_at = self.clock.now()  # serve seeded as it started
        outage = Outage(self.lease_ms)
        while not self.stopping:
            stop_if_cancelled()
            wakeup.clear()
            if feed.rows:
                # Rows claimed ahead that no worker took in time (the workers are on long
                # runs): back to the table, where another process can run them.
                await self.ends.give_back(feed.take_stale(self.clock.now()))
            limit = feed.wanted(self.runner.run_s, self.workers)
            if limit <= 0:
                # Until a worker goes idle or takes rows (or, to be safe, the poll; sooner
                # while rows wait here, to give back those that wait too long).
                await wakeup.sleep(feed.nap_s(poll_s))
                continue
            if now_us() - self.clock.measured_at > _CLOCK_EVERY_US:
                with contextlib.suppress(Exception):
                    await self.clock.follow(self.store.now_us)
            now = self.clock.now()
            if self.ticks.scheduled and now - seeded_at > _SEED_EVERY_US:
                seeded_at = now
                await self._seed(now)
            if not self.pauses.claimable:  # every kind served here is paused
                await wakeup.sleep(poll_s)
                continue
            self.claiming = True
            sent = time.monotonic()
            try:
                rows = await self._claim(now, limit)
            except Exception as error:
                if self.stopping:
                    return
                # Rows pushed meanwhile may commit late, due before the front: the next claim
                # is a full one.
                self.wakeups.front.full()
                outage.failed(error, sent, poll_s, feed)
                await asyncio.sleep(poll_s)
                continue
            finally:
                self.claiming = False
            outage.answered()
            if self.stopping:  # serve was cancelled while the claim was answered
                await self._give_back(rows)
                return
            feed.put(rows, now)
            if len(rows) < limit:
                # Nothing more is due now: once the runs just started have begun (a turn of
                # the loop), sleep until a push, a worker asks, a row this process knows of
                # falls due, or the poll.
                if rows:
                    await asyncio.sleep(0)
                await wakeup.sleep(self.wakeups.sleep_s(poll_s, now))

    async def _seed(self, now: int) -> None:
        """Keep every schedule seeded: a tick row deleted some other way (a cancel through the
        table alone, by hand) comes back. The key makes it cheap: a schedule that has its row
        writes nothing."""
        try:
            await self.ticks.seed_at(now)
        except Exception as error:
            log.warning("seeding the schedules again failed (%s); trying at the next minute", error)

    async def _claim(self, now: int, limit: int) -> list[Claimed]:
        """Up to `limit` rows due at `now` (µs), claimed for this process's workers."""
        began = time.monotonic()
        if self.limits:
            rows = await self.store.claim(
                self.pauses.claimable, now, now + self.lease_ms * 1_000, limit, worker(),
                limits=self.limits,
            )  # fmt: skip
        else:
            front = self.wakeups.front
            claimable = self.pauses.claimable
            rows = await self.store.claim(
                claimable, now, now + self.lease_ms * 1_000, limit, worker(),
                due_from_us=front.from_us(claimable),
            )  # fmt: skip
            front.claimed(rows)
        if self.observers.all:
            self.observers.claimed(rows, now, began)
        return rows

    async def _worker(self, feed: Feed) -> None:
        """One of serve's `workers`: take a claimed row from `feed` (which starts it), wait
        until its run frees this worker, repeat, until the feed is closed."""
        while True:
            taken = await feed.get()
            if taken is None:
                return
            row, _claimed_at, freed = taken
            if freed is None:  # it waited here too long to run under its lease
                await self.ends.give_back([row])
                continue
            try:
                await freed
            finally:
                del feed.busy_since[freed]

    def _start(
        self, row: Claimed, claimed_at: int, free: Callable[[], None]
    ) -> asyncio.Task[None] | None:
        """Start `row` (claimed at `claimed_at`, µs) in a task of its own, in a copy of serve's
        context (not the caller's: a push hands its row over here), which calls `free()` once
        the row no longer needs its worker; None when its wait plus its kind's timeout no longer
        fit in its lease (another worker might take it while it ran), or, under `heartbeat_ms`,
        when it waited longer than two beats (its lease may run out before a beat renews it)."""
        kind = self.runner.kinds[row.kind]  # (a renamed kind's row may carry an old name)
        if self.heartbeat_ms is None:
            margin_us = (kind.timeout_ms or self.timeout_ms) * 1_000  # its run within the lease
        else:
            margin_us = self.heartbeat_ms * 1_000  # a beat, before which the lease is renewed
        if self.clock.now() - claimed_at >= self.lease_ms * 1_000 - margin_us:
            return None
        loop = asyncio.get_running_loop()
        return loop.create_task(self._execute(row, free), context=self.context.copy())

    async def _execute(self, row: Claimed, free: Callable[[], None]) -> None:
        try:
            await self.runner.execute(row, self.clock.now, free)
            if row.kind in self.limits:
                # Its end is written: a row of its kind that the limit kept queued may be
                # claimed now, rather than at the next poll.
                self.wakeups.wake_at(None)
        except Exception:
            # A status space or store failing beyond the runner: the row runs after its lease.
            # (When it is its end that could not be written, the ends' WARNING has said so.)
            unwritten = row.id in self.ends.bound.unwritten
            log.log(
                logging.DEBUG if unwritten else logging.ERROR,
                "%s row %d: its run could not be recorded; it runs again after its lease",
                row.kind, row.id, exc_info=True, extra={"kind": row.kind, "row": row.id},
            )  # fmt: skip

    async def _stop(self, feed: Feed, workers: Sequence[asyncio.Task[None]], grace_ms: int) -> None:
        """Stop: rows claimed ahead go back unrun; running rows may finish (and write their
        ends) for `grace_ms` from when serve was asked to stop, then are cancelled (their rows
        are given back). Rows whose runs have ended and whose ends are still not written by
        then, and those whose ends could not be written before, are left to their leases.

        A second cancel during the grace period ends it at once.
        """
        loop = asyncio.get_running_loop()
        deadline = (self.stop_began or loop.time()) + grace_ms / 1_000
        feed.close()
        await self._give_back(feed.take_all())
        running = dict(feed.tasks)  # the runs the grace period is for: task, row id
        live = [row_id for task, row_id in running.items() if not task.done()]
        if live:
            writing = sum(1 for row_id in live if row_id in self.ends.writing)
            log.info("stopping: %s, waiting up to %d ms", _still(len(live), writing), grace_ms)
        task = asyncio.current_task()
        # A second cancel that came before the grace began (while a claim was being undone).
        interrupted = task is not None and task.cancelling() > 1
        try:
            if interrupted:
                raise asyncio.CancelledError
            # Workers leave once their row's run is over (a row handed over as the feed closed
            # included); then the rows' tasks finish writing their ends.
            await asyncio.wait(workers, timeout=max(0.0, deadline - loop.time()))
            if feed.tasks:
                await asyncio.wait(set(feed.tasks), timeout=max(0.0, deadline - loop.time()))
        except asyncio.CancelledError:
            interrupted = True
        late = {task: row_id for task, row_id in feed.tasks.items() if not task.done()}
        # Those whose runs have ended, their ends still being written (or tried again).
        ending = {row_id for row_id in late.values() if row_id in self.ends.writing}
        await cancel_and_wait([*late, *workers])
        # A row a cancelled worker had just been handed.
        await self._give_back(feed.take_all())
        # A claim in flight as the stop came: its answer, whose rows the claim loop gives back
        # (a second cancel cuts the wait short, leaving them to their lease).
        claims, self.claims = self.claims, None
        if claims is not None:
            try:
                if not interrupted:
                    await asyncio.wait({claims})
            except asyncio.CancelledError:
                interrupted = True
            finally:
                await cancel_and_wait([claims])
        await self.ends.stop_grouping()
        await self.ends.settled()  # the observers and status of ends written just now
        # Ends the group wrote after all leave `writing`; the others were never written.
        never = {row_id for row_id in ending if row_id in self.ends.writing}
        cut = sorted(row_id for row_id in late.values() if row_id not in ending)
        # Rows whose ends could not be written (now, or earlier and still under their leases),
        # less those the stop gave back or cut short, which are said as such.
        left = ({*self.ends.bound.unwritten, *never} - self.stop_given).difference(cut)
        ended = {row_id for task, row_id in running.items() if task not in late}
        self.tally.finished = len((ended | (ending - never)) - left)
        if cut:
            fates = _say_cut_short(cut, self.runner.stopped, grace_ms)
            self.tally.cut_short(fates)
        if left:
            _say_left(sorted(left), self.ends.failure)
            self.tally.left = len(left)
        if interrupted:
            raise asyncio.CancelledError

    async def _give_back(self, rows: Sequence[Claimed]) -> None:
        """Give back `rows`, claimed and not started, as serve stops, and count what became of
        them."""
        if rows:
            self.stop_given.update(row.id for row in rows)
            self.tally.given_back(len(rows), await self.ends.give_back(rows))


class Tally:
    """What became of the rows this process held as serve stopped, said in one INFO line as
    the stop ends: runs that finished within the grace period, rows queued again (claimed and
    not started, or cancelled past the grace), rows another worker had taken already, rows left
    to their lease (the store did not answer), rows left running under their lease (a sync
    run's thread), rows whose ends could not be written, left to their leases."""

    def __init__(self) -> None:
        self.finished = 0
        self.queued = 0
        self.lost = 0
        self.unwritten = 0
        self.held = 0
        self.left = 0

    def given_back(self, rows: int, queued: int | None) -> None:
        """`rows` rows were given back, of which `queued` were queued again (None: the store
        did not take the write)."""
        if queued is None:
            self.unwritten += rows
        else:
            self.queued += queued
            self.lost += rows - queued

    def cut_short(self, fates: dict[str, list[int]]) -> None:
        """The fates of the runs cancelled past the grace period (`_say_cut_short`)."""
        self.queued += len(fates.get("queued", ()))
        self.lost += len(fates.get("lost", ()))
        self.unwritten += len(fates.get("unwritten", ()))
        self.held += len(fates.get("held", ()))

    def said(self) -> str:
        """The line: "stopped: 3 runs finished within the grace period, 1 row queued again"."""
        parts = []
        if self.finished:
            parts.append(f"{count_of(self.finished, 'run')} finished within the grace period")
        if self.queued:
            parts.append(f"{count_of(self.queued, 'row')} queued again")
        if self.lost:
            parts.append(f"{count_of(self.lost, 'row')} taken by another worker already")
        if self.unwritten:
            its = "its lease" if self.unwritten == 1 else "their leases"
            parts.append(
                f"{count_of(self.unwritten, 'row')} left to {its} (the store did not answer)"
            )
        if self.held:
            its = "its lease (a sync run's thread)"
            if self.held > 1:
                its = "their leases (sync runs' threads)"
            parts.append(f"{count_of(self.held, 'row')} left running until {its}")
        if self.left:
            parts.append(
                "1 row whose end could not be written left to its lease (it runs again once "
                "that runs out)" if self.left == 1
                else f"{self.left:,} rows whose ends could not be written left to their leases "
                "(they run again once those run out)"
            )  # fmt: skip
        return f"stopped: {', '.join(parts)}" if parts else "stopped: no row was running"


def held(feed: Feed) -> list[int]:
    """The ids of the rows this process holds on `feed`: started and not yet ended (their ends
    being written included), and claimed and waiting for a worker."""
    return [*feed.tasks.values(), *feed.waiting_ids()]


class Outage:
    """The claim loop's account of claims that fail (a store that cannot be reached, or does not
    answer): one WARNING when they begin to fail, one more once they have failed for longer than
    the lease (the rows this process holds may then run again elsewhere: which ones), and one
    INFO when a claim is answered again. Each failure in between is logged at DEBUG."""

    def __init__(self, lease_ms: int) -> None:
        self.lease_ms = lease_ms
        self.since: float | None = None  # when claims began to fail (monotonic, s)
        self.past_lease = False  # the second WARNING was logged

    def failed(self, error: Exception, sent: float, poll_s: float, feed: Feed) -> None:
        """A claim sent at `sent` (monotonic, s) failed with `error`; the next one goes out in
        `poll_s` seconds."""
        name = type(error).__name__
        if self.since is None:
            self.since = sent  # (a claim that had no answer for the bound failed at its end)
            log.warning(
                "claiming failed with %s: %s; asking again every %g s until it is answered",
                name, error, poll_s, extra={"error": name},
            )  # fmt: skip
            return
        log.debug("claiming failed again with %s: %s", name, error, extra={"error": name})
        down_s = time.monotonic() - self.since
        if not self.past_lease and down_s * 1_000 > self.lease_ms:
            self.past_lease = True
            held = sorted({*feed.tasks.values(), *feed.bound.unwritten})
            shown = ", ".join(map(str, held[:20])) + (", …" if len(held) > 20 else "")
            log.warning(
                "no claim has been answered for %.0f s, longer than the lease (%d ms): %s",
                down_s, self.lease_ms,
                f"the {count_of(len(held), 'row')} this process holds ({shown}: running, or "
                "run and their ends not yet written) may be taken and run again by another "
                "worker meanwhile" if held else "this process holds no row",
                extra={"error": name},
            )  # fmt: skip

    def answered(self) -> None:
        """A claim was answered."""
        if self.since is not None:
            log.info(
                "claiming again: the store answered after %.1f s", time.monotonic() - self.since
            )
            self.since, self.past_lease = None, False


def _say_cut_short(
    row_ids: Sequence[int], stopped: dict[int, asyncio.Future[bool | None] | None], grace_ms: int
) -> dict[str, list[int]]:
    """Log, in one WARNING, what became of the rows whose runs the stop cut short: queued again,
    taken already by another worker, not written (left to their lease), or left running under
    their lease (a sync run, whose thread cannot be stopped); answer the ids by fate (`queued`,
    `lost`, `unwritten`, `held`)."""
    fates: dict[str, list[int]] = {}
    for row_id in row_ids:
        fate = "unwritten"  # a run cut short before it could say: its row keeps its lease
        if row_id in stopped:
            writing = stopped.pop(row_id)
            if writing is None:
                fate = "held"
            elif writing.done() and not writing.cancelled() and writing.exception() is None:
                answer = writing.result()
                fate = "queued" if answer else "lost" if answer is False else "unwritten"
        fates.setdefault(fate, []).append(row_id)
    said = {
        "queued": ("is queued again", "are queued again"),
        "lost": (
            "had been taken by another worker already (its lease ran out)",
            "had been taken by other workers already (their leases ran out)",
        ),
        "unwritten": (
            "could not be given back (the store did not answer) and runs again after its lease",
            "could not be given back (the store did not answer) and run again after their lease",
        ),
        "held": (
            "stays running until its lease ends, then runs again: a sync run's thread cannot "
            "be stopped",
            "stay running until their lease ends, then run again: a sync run's thread cannot "
            "be stopped",
        ),
    }
    parts = []
    for fate, (one, many) in said.items():
        ids = fates.get(fate, [])
        if ids:
            shown = ", ".join(map(str, ids[:20])) + (", …" if len(ids) > 20 else "")
            parts.append(f"row {shown} {one}" if len(ids) == 1 else f"rows {shown} {many}")
    log.warning(
        "cancelled %s past the grace period (%d ms): %s",
        count_of(len(row_ids), "run"), grace_ms, "; ".join(parts),
    )  # fmt: skip
    return fates


def _say_left(row_ids: Sequence[int], failure: str) -> None:
    """Log, in one WARNING, the rows whose runs had ended as serve stopped and whose ends could
    not be written (`failure`: the last error, in words): left to their leases."""
    shown = ", ".join(map(str, row_ids[:20])) + (", …" if len(row_ids) > 20 else "")
    why = f" ({failure})" if failure else ""
    if len(row_ids) == 1:
        said = f"the end of row {shown} could not be written{why}: its run had ended; the row is "
        said += "left to its lease, and runs again once that runs out"
    else:
        said = f"the ends of rows {shown} could not be written{why}: their runs had ended; the "
        said += "rows are left to their leases, and run again once those run out"
    log.warning("stopping: %s", said)


def _still(rows: int, ending: int) -> str:
    """What serve's stop waits for: "3 rows still running", "1 row still running and 2 whose
    ends are being written"."""
    if not ending:
        return f"{count_of(rows, 'row')} still running"
    whose = "whose end is" if ending == 1 else "whose ends are"
    if ending == rows:
        return f"{count_of(rows, 'row')} {whose} being written"
    return f"{count_of(rows - ending, 'row')} still running and {ending:,} {whose} being written"


AGAIN_S = 1.0
"""How long `cancel_and_wait` gives a cancelled task before it cancels it once more: long enough
for psycopg to cancel a statement in flight on the server (a second cancel while it waits for
that makes it close the connection and log a WARNING)."""


def stop_if_cancelled() -> None:
    """Raise `asyncio.CancelledError` when the running task was asked to stop and is still
    going (a library in between swallowed the cancel); for the top of a background loop."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_and_wait(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel `tasks` (those not cancelled already) and wait until every one has ended,
    cancelling again each `AGAIN_S` seconds any that carries on (a library in between swallowed
    the cancel); what they raised is not raised here."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        if not task.cancelling():
            task.cancel()
    while pending:
        _done, pending = await asyncio.wait(pending, timeout=AGAIN_S)
        for task in pending:
            task.cancel()
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" at exit
