"""The producer: a value pushed becomes a row in the store.

`push`, `push_many` and `push_in` check their options (one of `after_ms` and `at`, a key of at
most 64 bytes, a time a store can hold), encode the value with its kind's codec (refusing what
would not come back equal), check the JSON's size against the store's `max_payload` (the one
place every payload the queue writes is measured: a scheduled kind's tick payload, built once,
is measured as the queue is built), and write the row: alone when nothing else is being written,
grouped with concurrent pushes of this queue otherwise (`Grouped`), or through the caller's own
transaction (`push_in`). `within` asks a Space before the table. After the write, serve in this
process is woken for the row (`Wakeups`), or, when one of its workers is idle on this event loop
and the row is due now, the row is inserted already claimed and handed to that worker
(`handover`).

Each row records the trace context current at its call (`_watch.tracing`): inside the push span an
observer makes current (`Metrics`' `push <kind>`), or else the application's own span; None
without one, or without OpenTelemetry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from .._base.bounds import PAYLOAD_BYTES, due, moment
from .._base.errors import PayloadTooLarge, Refusal, is_int
from .._base.group_commit import Grouped
from .._base.spaces import Space
from .._base.values import State
from .._kinds.kind import MAX_NAME_BYTES, Kind, name_problem
from .._watch.tracing import current
from .._worker.handover import HandOver
from .._worker.parts import Parts
from ..store.contract import NewRow, Store
from ..store.memory import Memory


class Producer:
    """Pushes rows of one queue's kinds, through the queue's `parts`.

    Raises (at construction):
        PayloadTooLarge: a scheduled kind's tick payload (every field at its default) is over
            the store's `max_payload`.
    """

    def __init__(self, parts: Parts) -> None:
        self.kinds = {kind.cls: kind for kind in parts.kinds.values()}
        self.store = parts.store
        # The largest payload the store takes (bytes of JSON); None: a store without the limit.
        self.max_payload = max_payload_of(parts.store)
        for kind in parts.ticks.scheduled:
            self.check_size(kind, parts.ticks.payloads[kind.name], "job.Jobs(kinds=[...])")
        self.clock = parts.clock  # for `after_ms`
        self.statuses = parts.statuses
        self.observers = parts.observers
        self.wakeups = parts.wakeups
        self.ends = parts.ends
        # Concurrent pushes of this queue share a transaction (see Grouped).
        self.grouped: Grouped[NewRow, int | None] = Grouped(self._write)
        self.handover = HandOver(parts, self.grouped)  # a row due now, to an idle worker

    async def _write(self, rows: list[NewRow]) -> list[int | None]:
        return await self.store.push(rows)

    def new_row(
        self,
        value: object,
        after_ms: int | None,
        at: int | datetime | None,
        unique: str | None,
        call: str = "push",
    ) -> tuple[Kind, NewRow]:
        """`value` as a row to insert, its options checked (`call` names the call in a refusal).

        Raises:
            Refusal: `value` is not of a kind of this queue, the options cannot go together, a
                time is not one a store can hold (`_base.bounds`), or the payload cannot round-trip.
            PayloadTooLarge: the payload's JSON is over the store's `max_payload`.
        """
        kind = self.kinds.get(type(value))
        if kind is None:
            raise Refusal(not_a_kind(value, list(self.kinds), call))
        now, run_at = self.run_at(after_ms, at, call)
        if unique is not None:
            if not isinstance(unique, str) or not unique:
                raise Refusal(f"unique={unique!r}: a non-empty str key")
            if (problem := name_problem(unique)) is not None:
                raise Refusal(
                    f"unique={unique[:80]!a} cannot be a key: {problem}. Hash it or shorten it "
                    f"(a key is at most {MAX_NAME_BYTES} bytes of UTF-8)"
                )
        payload = kind.codec.encode(value)
        if self.max_payload is not None and len(payload) > self.max_payload:
            self.check_size(kind, payload, call)
        return kind, NewRow(kind.name, payload, run_at, unique, pushed_at=now)

    def run_at(self, after_ms: int | None, at: int | datetime | None, call: str) -> tuple[int, int]:
        """Now, and when a row pushed now with `after_ms` or `at` is due (µs).

        Raises:
            Refusal: both are given, or one is not a time a store can hold (`_base.bounds`).
        """
        if after_ms is not None and at is not None:
            raise Refusal(f"{call} takes after_ms or at, not both: one says when the row is due")
        now = self.clock.now()
        if after_ms is not None:
            return now, due(now, after_ms, f"{call}(after_ms={{}})")
        if at is not None:
            return now, moment(at, f"{call}(at={{}})", "at")
        return now, now

    def check_size(self, kind: Kind, payload: bytes, call: str) -> None:
        """Refuse `payload`, of `kind`, when it is over the store's `max_payload`.

        Raises:
            PayloadTooLarge: it is; the sentence names `call`, the size, the limit and how to
                raise it.
        """
        limit = self.max_payload
        if limit is None or len(payload) <= limit:
            return
        name = kind.cls.__name__
        if call.startswith("job.Jobs"):
            what = f"the scheduled kind {name}'s tick payload (every field at its default)"
            instead = "give its fields smaller defaults"
        else:
            what = f"this {name} payload"
            instead = "push a reference to large data (a file's path, an object's key) instead"
        raise PayloadTooLarge(
            f"{call}: {what} is {len(payload):,} bytes of JSON, over the store's max_payload of "
            f"{limit:,} bytes; nothing was pushed. {instead[:1].upper()}{instead[1:]}, or raise "
            f"the limit: {_raise_with(self.store)} takes up to {PAYLOAD_BYTES.most:,} bytes"
        )

    async def push(
        self,
        value: object,
        after_ms: int | None,
        at: int | datetime | None,
        unique: str | None,
        within: Space | None,
    ) -> int | None:
        """`Jobs.push`: the new row's id, or None when its key was taken."""
        if within is not None and unique is None:
            raise Refusal("push(within=...) needs unique=...: the window has to remember a key")
        if within is not None and not isinstance(within, Space):
            raise Refusal(f"within={within!r}: pass a job.MemorySpace or job.RedisSpace")
        kind, row = self.new_row(value, after_ms, at, unique)
        mark = f"within:{kind.name}:{unique}" if within is not None else ""
        if within is not None and not await within.add(mark, b"1"):
            return None
        feed = self.handover.idle_feed(row)
        claimed_at = 0
        if feed is not None:  # a worker of this process is idle: the row is claimed for it
            row, claimed_at = self.handover.claim(row)
        try:
            if feed is None and not self.observers.all:  # the common push, with nothing around
                row = _traced(row)
                row_id = await self.grouped(row)
            else:
                with self.observers.pushing(kind.name):
                    row = _traced(row)
                    if feed is None:
                        row_id = await self.grouped(row)
                    else:
                        row_id = await self.handover.push(feed, row, claimed_at)
                    self.observers.pushed([row], [row_id])
        except BaseException:
            if within is not None:
                await within.delete(mark)
            raise
        if row_id is None:
            return None
        try:
            if self.statuses.space is not None:  # before the run's own statuses
                await self.statuses.put(row_id, State.QUEUED, 0)
        finally:
            if feed is None:
                self.wakeups.wake_at(row.run_at)
            else:
                self.handover.hand_over(feed, row, row_id, claimed_at)
        if self.ends.background:  # serve stopped meanwhile: its row is being queued again
            await self.ends.settled()
        return row_id

    async def push_many(
        self, values: Sequence[object], after_ms: int | None, at: int | datetime | None
    ) -> list[int]:
        """`Jobs.push_many`: the new rows' ids, in order."""
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise Refusal("push_many takes a list of values (instances of the queue's kinds)")
        if not values:
            return []
        self.run_at(after_ms, at, "push_many")  # the options, refused once for every value
        made = []
        for index, value in enumerate(values):
            try:
                made.append(self.new_row(value, after_ms, at, None, "push_many"))
            except Refusal as refusal:
                raise _of_item(refusal, index, len(values)) from None
        rows = [row for _kind, row in made]
        with self.observers.pushing(rows[0].kind):
            rows = [_traced(row) for row in rows]
            ids = await self.store.push(rows)
            self.observers.pushed(rows, ids)
        self.wakeups.wake_at(min(row.run_at for row in rows))
        return [row_id for row_id in ids if row_id is not None]

    async def push_in(
        self,
        tx: object,
        value: object,
        after_ms: int | None,
        at: int | datetime | None,
        unique: str | None,
    ) -> int | None:
        """`Jobs.push_in`: the new row's id (visible once `tx` commits), or None."""
        kind, row = self.new_row(value, after_ms, at, unique, "push_in")
        with self.observers.pushing(kind.name):
            (row_id,) = await self.store.push_in(tx, [_traced(row)])
            self.observers.pushed([row], [row_id])
        return row_id

    def push_in_now(
        self,
        tx: object,
        value: object,
        after_ms: int | None,
        at: int | datetime | None,
        unique: str | None,
    ) -> int | None:
        """`push_in` through a synchronous connection or session, in the caller's thread
        (`jobs.sync.push_in`), with the store's `push_in_now`.

        Raises:
            Refusal: the store writes through no synchronous transaction, or as `push_in`.
        """
        kind, row = self.new_row(value, after_ms, at, unique, "push_in")
        push_in_now = getattr(self.store, "push_in_now", None)
        if not callable(push_in_now):
            raise Refusal(
                f"jobs.sync.push_in: {self.store!r} writes push_in only through an async "
                "connection or session: use await jobs.push_in(...)"
            )
        with self.observers.pushing(kind.name):
            answers: list[int | None] = push_in_now(tx, [_traced(row)])
            self.observers.pushed([row], answers)
        return answers[0]


def _of_item(refusal: Refusal, index: int, count: int) -> Refusal:
    """`refusal` of one value of push_many, as the same class, its sentence naming the value by
    its place in the list: `push_many: item 3 of 10 (values[2]): …`."""
    said = str(refusal).removeprefix("push_many: ")
    where = f"push_many: item {index + 1:,} of {count:,} (values[{index}])"
    return type(refusal)(f"{where}: {said}")


def _traced(row: NewRow) -> NewRow:
    """`row` with the trace context current here (the push's span, under an observer that makes
    one), or as it is when there is none."""
    trace = current()
    return row if trace is None else dataclasses.replace(row, trace=trace)


def max_payload_of(store: Store) -> int | None:
    """The store's `max_payload` (bytes of JSON), or None when it has none (a store of your own
    may leave it out, and then takes payloads of any size)."""
    limit = getattr(store, "max_payload", None)
    return limit if is_int(limit, 1) else None


def _raise_with(store: Store) -> str:
    """How the limit of `store` is raised, as the user writes it."""
    if isinstance(store, Memory):
        return "job.Memory(max_payload=...)"
    if type(store).__module__.startswith("nilo_job.store."):
        return "job.Table(..., max_payload=...)"
    return f"the max_payload of {type(store).__name__}"


def not_a_kind(value: object, kinds: list[type], call: str = "push") -> str:
    """Why `value` cannot be pushed to a queue of `kinds` by `call` (push, push_many, push_in),
    in a sentence that says what to push."""
    known = ", ".join(cls.__name__ for cls in kinds)
    first = kinds[0].__name__ if kinds else "YourKind"
    if isinstance(value, type):
        if value in kinds:
            return (
                f"{call} takes a {value.__name__} value, not the class itself: "
                f"{_pushed(call, value.__name__)} with its fields"
            )
        return (
            f"{call} takes a value of one of this queue's kinds ({known}), not the class "
            f"{value.__name__}"
        )
    name = type(value).__name__
    if type(value).__module__ == "builtins":
        article = "an" if name[:1] in "aeiou" else "a"
        return (
            f"{call} takes a value of one of this queue's kinds ({known}), not {article} {name}: "
            f"build it first, like {_pushed(call, first)} with its fields"
        )
    return f"{name} is not a kind of this queue ({known}): add it to job.Jobs(kinds=[...])"


def _pushed(call: str, name: str) -> str:
    """How `call` pushes a value of the class `name`, as code."""
    if call == "push_many":
        return f"push_many([{name}(...), ...])"
    if call == "push_in":
        return f"push_in(tx, {name}(...))"
    return f"{call}({name}(...))"
