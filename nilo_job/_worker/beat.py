"""The beat: a serving process in the worker registry, and the leases it keeps alive.

As serve starts, it records an entry for this process in the store's registry
(`nilo_jobs_workers`): host, pid, nilo-job's version, the kinds it serves, its workers, when it
started. Every `beat_ms` it writes one beat: its time and the ids of the rows it holds, and,
under `heartbeat_ms`, the leases of those rows renewed, all in one store call whatever their
number (one statement on PostgreSQL; one transaction on SQLite, whose renewal is one statement).
A clean stop deletes the entry. An entry whose last beat is older than `LOST_BEATS` of its beats
is lost (its process died or cannot reach the store); the beat of any process deletes entries
lost for longer than `FORGET_US`.

The registry is for operators: a beat that fails is said in the log and tried again at the next
beat, and never stops serve. Under `heartbeat_ms`, a process that could not beat for about the
lease says so once, with why and what it means for the rows it holds (another worker may take and
run again those whose lease runs out). A beat cannot be sent on time when the process was paused
(SIGSTOP, a suspended machine) or its event loop was blocked, and cannot be answered when the
store cannot be reached: the beat measures how late the event loop ran (it waits in steps of a
quarter beat, each measured against when it was due to wake; a step late by more than a quarter
beat counts whole) and tells the two apart. When the loop ran late for half the lease or more
since the last beat answered, the loop is why; otherwise the store is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import time
from collections.abc import Callable, Coroutine, Sequence
from importlib import metadata
from typing import Any

from .._base.clock import Clock
from .._base.process import worker
from .._base.text import count_of
from ..store.contract import Store, WorkerEntry

log = logging.getLogger("nilo_job")

BEAT_MS = 5_000
"""How often a serving process beats when the queue has no `heartbeat_ms`, in milliseconds."""

LOST_BEATS = 3
"""An entry whose last beat is older than this many of its beats is shown as lost."""

FORGET_US = 3_600_000_000
"""An entry lost for longer than this (µs: an hour since its last beat) is deleted by the beat
of any process."""


def version() -> str:
    """nilo-job's version in this process ("unknown" when it is not installed as a package)."""
    try:
        return metadata.version("nilo-job")
    except metadata.PackageNotFoundError:
        return "unknown"


def is_alive(entry: WorkerEntry, now_us: int) -> bool:
    """Whether `entry` beat within its last `LOST_BEATS` beats at `now_us` (µs)."""
    return now_us - entry.beat_at <= LOST_BEATS * entry.beat_ms * 1_000


class Beat:
    """One run of serve's entry in the registry, and its beats.

    Args:
        store: where the registry is.
        clock: the queue's clock (µs), which every beat reads.
        beat_ms: how often it beats, in milliseconds.
        lease_ms: under `heartbeat_ms`, how long past each beat the leases of the held rows
            are renewed to, in milliseconds; None: they are left as their claims took them.
        held: the ids of the rows this process holds now (claimed, running, or ending).
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        beat_ms: int,
        lease_ms: int | None,
        held: Callable[[], Sequence[int]],
    ) -> None:
        self.store = store
        self.clock = clock
        self.beat_ms = beat_ms
        self.lease_ms = lease_ms
        self.held = held
        self.entry: WorkerEntry | None = None
        self.failing_since: float | None = None  # when beats began to fail (monotonic, s)
        self.answered_at = time.monotonic()  # when the last beat the store took was sent
        self.late_s = 0.0  # how late the event loop ran since then (s): paused, or blocked
        self.past_lease = False  # the WARNING that held rows may run again was logged
        self.recorded = False  # the store took a write of this run's entry, and still holds it

    async def register(self, kinds: Sequence[str], workers: int) -> None:
        """Record this process's entry as serve starts (a failure is logged, and the next beat
        records it)."""
        now = self.clock.now()
        host, pid = socket.gethostname(), os.getpid()
        sent = time.monotonic()
        self.entry = WorkerEntry(
            id=f"{host}:{pid}:{now}", host=host, pid=pid, version=version(), kinds=tuple(kinds),
            workers=workers, beat_ms=self.beat_ms, started_at=now, beat_at=now,
        )  # fmt: skip
        try:
            await self.store.register(self.entry)
        except Exception as error:
            self._failed(error)
            return
        self.answered_at, self.recorded = sent, True

    async def run(self, kinds: Sequence[str], workers: int) -> None:
        """Record this process's entry (serving `kinds` with `workers`), then beat every
        `beat_ms` until cancelled."""
        await self.register(kinds, workers)
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            # At a fixed rate: a slow beat does not push the next one back.
            due = max(due + self.beat_ms / 1_000, loop.time())
            while (left_s := due - loop.time()) > 0:
                step_s = min(left_s, self.beat_ms / 4_000)
                await self._step(asyncio.sleep(step_s), step_s)
            await self.once()

    async def once(self) -> None:
        """One beat: the entry's time and held rows written, their leases renewed under
        `heartbeat_ms`, the entry recorded again if it was forgotten."""
        entry = self.entry
        if entry is None:
            return
        now = self.clock.now()
        running = sorted(set(self.held()))
        until = None if self.lease_ms is None else now + self.lease_ms * 1_000
        sent, late_s = time.monotonic(), self.late_s
        try:
            found = await self._answer(
                self.store.beat(entry.id, now, running, until, worker(), now - FORGET_US)
            )
            if not found:  # forgotten (a long outage, or deleted by hand): recorded again
                self.recorded = False
                entry = dataclasses.replace(entry, beat_at=now, running=tuple(running))
                self.entry = entry
                await self.store.register(entry)
        except Exception as error:
            self._failed(error)
            return
        unbeaten_s = sent - self.answered_at
        self.answered_at = sent  # the leases it renewed count from when it was sent
        self.recorded = True
        self.late_s -= late_s  # (what the loop ran late after `sent` counts from it)
        if self.failing_since is not None:
            log.info("beating again after %.1f s without a beat answered", unbeaten_s)
            self.failing_since, self.past_lease = None, False

    async def _answer(self, call: Coroutine[Any, Any, bool]) -> bool:
        """The answer of the beat `call`; under `heartbeat_ms`, a call still unanswered when the
        leases it was to renew run out (a store that does not answer: up to its bound on a
        call) says so then, without waiting for the call to fail."""
        if self.lease_ms is None:
            return await call
        beating = asyncio.ensure_future(call)
        try:
            until = self.answered_at + self.lease_ms / 1_000
            while not beating.done() and (left_s := until - time.monotonic()) > 0:
                step_s = min(left_s, self.beat_ms / 4_000)
                await self._step(asyncio.wait({beating}, timeout=step_s), step_s)
            if not beating.done():
                self._past_lease(None)
            return await beating
        finally:
            beating.cancel()  # (only a cancel of this beat leaves it pending here)

    async def _step(self, wait: Coroutine[Any, Any, object], step_s: float) -> None:
        """Await `wait`, which returns within `step_s` seconds on a loop that runs on time;
        what it took past that, when over a quarter beat (less is a busy loop's jitter), is how
        late the loop ran (the process was paused, or the loop blocked), added to `late_s`."""
        woken_at = time.monotonic() + step_s
        await wait
        if (late_s := time.monotonic() - woken_at) > self.beat_ms / 4_000:
            self.late_s += late_s

    async def unregister(self) -> None:
        """Delete this process's entry (a clean stop); a failure is logged, and an entry the
        store took is then shown as lost until it is forgotten."""
        entry, self.entry = self.entry, None
        if entry is None:
            return
        try:
            await self.store.unregister(entry.id)
        except Exception as error:
            left = (
                "the entry shows as lost until it is forgotten"
                if self.recorded
                else "the store holds no entry of this process's that it took, so likely none shows"
            )
            log.warning(
                "leaving the worker registry failed with %s: %s; %s",
                type(error).__name__, error, left, extra={"error": type(error).__name__},
            )  # fmt: skip

    def _failed(self, error: Exception) -> None:
        name = type(error).__name__
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            log.warning(
                "the beat failed with %s: %s; trying again every %d ms",
                name, error, self.beat_ms, extra={"error": name},
            )  # fmt: skip
        else:
            log.debug("the beat failed again with %s: %s", name, error, extra={"error": name})
        # Said once the leases renewed last run out before the next beat could renew them.
        down_ms = (time.monotonic() - self.answered_at) * 1_000
        if self.lease_ms is not None and down_ms + self.beat_ms >= self.lease_ms:
            self._past_lease(name)

    def _past_lease(self, error: str | None) -> None:
        """Say, once per outage, that this process could not beat for about its lease, why,
        and that the rows it holds may be taken and run again once their leases run out
        (`error`: the failed beat's class name, None while a beat waits for its answer)."""
        if self.lease_ms is None or self.past_lease:
            return
        self.past_lease = True
        if self.failing_since is None:
            self.failing_since = time.monotonic()  # (the beat in flight failed nothing yet)
        down_s = time.monotonic() - self.answered_at
        late = self.late_s * 1_000 >= self.lease_ms / 2  # the loop stood still for half of it
        held = sorted(set(self.held()))
        shown = ", ".join(map(str, held[:20])) + (", …" if len(held) > 20 else "")
        log.warning(
            "this process could not beat for %.1f s and the lease is %d ms: %s; %s",
            down_s, self.lease_ms,
            self._why(late, error),
            f"of the {count_of(len(held), 'row')} this process holds ({shown}), any whose lease "
            "runs out before a beat renews it may be taken and run again by another worker (an "
            "end this process writes after that is refused as a lost lease)"
            if held else "this process holds no row",
            extra={"error": error or ("late" if late else "no answer")},
        )  # fmt: skip

    def _why(self, loop_late: bool, error: str | None) -> str:
        """Why no beat was answered: the event loop ran late for half the lease or more
        (`loop_late`: the process was paused, or its loop blocked), or else the store could not
        be reached (`error`: the failed beat's class name; None: the beat is unanswered)."""
        if loop_late:
            said = (
                f"its event loop ran {self.late_s:.1f} s late (the process was paused, or its "
                "event loop was blocked)"
            )
            return said if error is None else f"{said}, and the beat failed with {error}"
        store = f"the beat failed with {error}" if error else "the last beat is still unanswered"
        return f"the store could not be reached ({store})"
