"""The operator's calls: read a row's whole story, find rows page by page, act on many rows at
once, pause a kind, and read the flow of each kind over the last hour.

A list (`find`, `dead_ones`) reads only the start of each payload from the store, and shows at
most `LISTED_CHARS` characters of it: a page costs a bounded read whatever its rows carry, and
`row` reads the whole payload.

Acting on many rows goes in batches of `BATCH` rows, each batch one transaction: a call over
every row that matches a filter never holds the table for long, and one that fails part way has
changed whole batches only. The dashboard and the command line are thin faces over these calls.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Awaitable, Callable, Sequence

from .._base.bounds import ROW_ID, ROWS, Span, row_ids, whole
from .._base.bounds import row_id as check_row_id
from .._base.errors import Refusal
from .._base.values import Dead, Flow, Found, Row, State, Stats, Status, Where, is_unicode
from .._kinds.codec import plain
from .._worker.parts import Parts
from .._worker.ticks import SCHEDULE_KEY
from ..store.contract import INT64_MAX, INT64_MIN, LISTED_CHARS, DeadRow, RowView, Store

BATCH = 500
"""Rows per transaction when acting on many rows."""

PAGE_MOST = 1_000
"""The most rows one page of `find` holds."""

DEAD_MOST = 100_000
"""The most rows one call of `dead_ones` reads."""

MINUTES = Span(1, 1_440, "whole minutes", "a day")
"""The windows `flow` reads."""

SAMPLE = 1_000
"""The done rows per kind whose durations give a flow's p50 and p95."""

_CURSOR = re.compile(r"^(-?\d{1,19})\.(\d{1,19})$")

Target = Sequence[int] | Where


def dead_of(row: DeadRow) -> Dead:
    """A dead row as a list shows it: its payload as plain values (it may no longer fit its
    class), or the start of its JSON as a str when longer than `LISTED_CHARS` (`cut_short`)."""
    short = cut_short(row.payload)
    return Dead(
        row.id, row.kind, row.error, row.attempts, plain(row.payload) if short is None else short,
        row.died_at, row.detail, row.traceback, payload_cut=short is not None,
    )  # fmt: skip


def cut_short(payload: bytes) -> str | None:
    """The first `LISTED_CHARS` characters of `payload`, when it is longer than that (a store
    answered a list with its start, `contract.listed`); None when it is all there."""
    if len(payload) <= LISTED_CHARS:
        return None  # no longer in characters than in bytes
    text = payload.decode("utf-8", "replace")
    return text[:LISTED_CHARS] if len(text) > LISTED_CHARS else None


def row_of(view: RowView, *, in_list: bool = False) -> Row:
    """A stored row as users read it: payload and result as plain values. `in_list`: read by a
    list, so a payload longer than `LISTED_CHARS` is the start of its JSON (`cut_short`)."""
    short = cut_short(view.payload) if in_list and not view.unreadable else None
    payload = None if view.unreadable else _plain_or_none(view.payload) if short is None else short
    result = None if view.result is None else _plain_or_none(view.result)
    return Row(
        id=view.id, kind=view.kind, state=view.state, payload=payload, attempts=view.attempts,
        run_at=view.run_at, unique_key=view.unique_key, pushed_at=view.pushed_at,
        started_at=view.started_at, finished_at=view.finished_at, died_at=view.died_at,
        lease_until=view.lease_until, worker=view.worker, error=view.error, message=view.detail,
        traceback=view.traceback, result=result, unreadable=view.unreadable,
        payload_cut=short is not None, snoozes=view.snoozes, attempts_log=view.attempts_log,
    )  # fmt: skip


def _plain_or_none(data: bytes) -> object:
    try:
        return plain(data)
    except Exception:
        return None


def cursor_of(view: RowView) -> str:
    """The cursor of the page that starts after `view`."""
    value, row_id = view.sort_key()
    return f"{value}.{row_id}"


def read_cursor(cursor: str) -> tuple[int, int]:
    """(sort value, id) from a cursor `find` gave.

    Raises:
        Refusal: it is not one.
    """
    found = _CURSOR.match(cursor) if isinstance(cursor, str) else None
    if (
        found is None
        or not INT64_MIN <= int(found[1]) <= INT64_MAX
        or not ROW_ID.least <= int(found[2]) <= ROW_ID.most
    ):
        raise Refusal(f"after={cursor!r} is not a cursor find() gave (its Found.next)")
    return int(found[1]), int(found[2])


def percentile(values: Sequence[int], q: float) -> float:
    """The `q` quantile (0 < q ≤ 1) of `values` by nearest rank: the smallest value with at
    least `q` of them at or below it."""
    ordered = sorted(values)
    return float(ordered[max(math.ceil(q * len(ordered)) - 1, 0)])


class Operator:
    """The operator's calls over one queue's rows, one row or many (see the module's docstring).

    Args:
        store: the table's store.
        parts: the queue's parts; None for the table alone (no kinds known, no status Space),
            as the command line and the dashboard may use it.
        on_pause: called with the paused kinds after a pause or a resume, to tell this
            process's serve at once.
    """

    def __init__(
        self,
        store: Store,
        parts: Parts | None = None,
        on_pause: Callable[[dict[str, int]], None] | None = None,
    ) -> None:
        parts = Parts.build(store) if parts is None else parts
        self.store = store
        self.clock = parts.clock
        self.kinds = parts.kinds
        self.statuses = parts.statuses
        self.ticks = parts.ticks
        self.wakeups = parts.wakeups
        self.on_pause = on_pause

    # --------------------------------------------------------------------------- one row

    async def cancel(self, row_id: int) -> bool:
        """`Jobs.cancel`."""
        check_row_id(row_id, "cancel({})")
        tick = await self.ticks.holding(row_id)
        gone = await self.store.cancel(row_id)
        if gone:
            await self.statuses.forget(row_id)
            if tick is not None:
                await self.ticks.skip(*tick, self.clock.now())
        return gone

    async def stats(self) -> Stats:
        """`Jobs.stats`."""
        return await self.store.stats()

    async def dead_ones(self, limit: int) -> list[Dead]:
        """`Jobs.dead_ones`."""
        whole(limit, Span(1, DEAD_MOST, "a count of rows"), "dead_ones(limit={})", "limit")
        return [dead_of(row) for row in await self.store.dead_ones(limit)]

    async def retry_dead(self, row_id: int) -> bool:
        """`Jobs.retry_dead`."""
        check_row_id(row_id, "retry_dead({})")
        again = await self.store.retry_dead(row_id, self.clock.now())
        if again:
            await self.statuses.put(row_id, State.QUEUED, 0)
            self.wake()
        return again

    async def status(self, row_id: int) -> Status | None:
        """`Jobs.status`."""
        check_row_id(row_id, "status({})")
        if self.statuses.space is None:
            return None
        return await self.statuses.get(row_id)

    def wake(self) -> None:
        """`Jobs.wake`: this process's serve, and on SQLite the other processes serving the
        file."""
        self.wakeups.wake_at(None)
        others = getattr(self.store, "wake_others", None)
        if callable(others):
            others()

    # ------------------------------------------------------------------------------ reading

    async def row(self, row_id: int) -> Row | None:
        check_row_id(row_id, "row({})")
        view = await self.store.row(row_id)
        return None if view is None else row_of(view)

    async def find(self, where: Where, after: str | None, limit: int) -> Found:
        if not isinstance(where, Where):
            raise Refusal(f"find({where!r}): pass a job.Where(state=..., kind=..., error=...)")
        whole(limit, Span(1, PAGE_MOST, "a count of rows"), "find(limit={})", "limit")
        if where.state is None:
            if after is not None:
                raise Refusal("find(after=...) pages through one state: give Where(state=...)")
            rows: list[RowView] = []
            for state in ("queued", "running", "dead", "done"):
                found = await self.store.find(dataclasses.replace(where, state=state), None, limit)
                rows.extend(found[: limit - len(rows)])
            return Found([row_of(view, in_list=True) for view in rows], None)
        key = None if after is None else read_cursor(after)
        views = await self.store.find(where, key, limit + 1)
        more = len(views) > limit
        views = views[:limit]
        page = [row_of(view, in_list=True) for view in views]
        return Found(page, cursor_of(views[-1]) if more else None)

    async def count(self, where: Where) -> int:
        if not isinstance(where, Where):
            raise Refusal(f"count({where!r}): pass a job.Where(state=..., kind=..., error=...)")
        if where.state is not None:
            return await self.store.count(where)
        total = 0
        for state in ("queued", "running", "dead", "done"):
            total += await self.store.count(dataclasses.replace(where, state=state))
        return total

    # ------------------------------------------------------------------------------- acting

    async def retry_many(self, target: Target, at_most: int | None) -> int:
        async def retry(views: list[RowView]) -> list[int]:
            again = await self.store.retry_many([v.id for v in views], self.clock.now())
            for row_id in again:
                await self.statuses.put(row_id, State.QUEUED, 0)
            if again:
                self.wakeups.wake_at(None)
            return again

        return await self._each("retry", ("dead",), target, at_most, retry)

    async def cancel_many(self, target: Target, at_most: int | None) -> int:
        async def cancel(views: list[RowView]) -> list[int]:
            gone = await self.store.cancel_many([v.id for v in views])
            taken = set(gone)
            for view in views:
                if view.id not in taken:
                    continue
                await self.statuses.forget(view.id)
                kind = self.kinds.get(view.kind)
                if (
                    kind is not None
                    and kind.schedule is not None
                    and (view.unique_key == SCHEDULE_KEY)
                ):
                    # The schedule's next tick: that tick is skipped, the one after queued.
                    now = self.clock.now()
                    await self.ticks.skip(kind, view.run_at, now)
            return gone

        return await self._each("cancel", ("queued",), target, at_most, cancel)

    async def delete_many(self, target: Target, at_most: int | None) -> int:
        async def delete(views: list[RowView]) -> list[int]:
            gone = await self.store.delete_many([v.id for v in views])
            for row_id in gone:
                await self.statuses.forget(row_id)
            return gone

        return await self._each("delete", ("dead", "done"), target, at_most, delete)

    async def _each(
        self,
        verb: str,
        states: tuple[str, ...],
        target: Target,
        at_most: int | None,
        act: Callable[[list[RowView]], Awaitable[list[int]]],
    ) -> int:
        """Act on the rows of `target` in `states`, a batch at a time, at most `at_most` rows;
        how many it changed."""
        if at_most is not None:
            whole(at_most, ROWS, f"{verb}_many(at_most={{}})", "at_most")
        if isinstance(target, Where):
            if target.state is not None and target.state not in states:
                raise Refusal(
                    f"{verb}_many(Where(state={target.state!r})): {verb} acts on "
                    f"{' and '.join(states)} rows"
                )
            wheres = [dataclasses.replace(target, state=s) for s in states]
            if target.state is not None:
                wheres = [target]
        elif isinstance(target, Sequence) and not isinstance(target, str | bytes):
            ids = list(row_ids(target, f"{verb}_many({{}})"))
            wheres = [
                Where(state=s, ids=tuple(ids[i : i + BATCH]))
                for s in states
                for i in range(0, len(ids), BATCH)
            ]
        else:
            raise Refusal(f"{verb}_many({target!r}): pass a list of row ids or a job.Where")
        done = 0
        for where in wheres:
            # At most the rows that match as it starts: rows the action itself makes (the tick
            # after a cancelled one) or that arrive meanwhile are not chased.
            most = await self.store.count(where) if where.ids is None else len(where.ids)
            if at_most is not None:
                most = min(most, at_most - done)
            stop = done + most
            while done < stop:
                want = min(BATCH, stop - done)
                views = await self.store.find(where, None, want)
                if not views:
                    break
                changed = await act(views)
                done += len(changed)
                if not changed or where.ids is not None:
                    break  # every row raced away (or a list of ids, read once)
        return done

    # ------------------------------------------------------------------------------ pausing

    async def pause(self, kind: str) -> bool:
        self._known(kind, "pause")
        paused = await self.store.pause(kind, self.clock.now())
        if self.on_pause is not None:
            self.on_pause(await self.store.paused())
        return paused

    async def resume(self, kind: str) -> bool:
        self._known(kind, "resume")
        resumed = await self.store.resume(kind)
        if self.on_pause is not None:
            self.on_pause(await self.store.paused())
        return resumed

    def _known(self, kind: object, verb: str) -> None:
        if not isinstance(kind, str) or kind not in self.kinds:
            raise Refusal(
                f"{verb}({kind!r}): not a kind of this queue (it has {', '.join(self.kinds)})"
            )

    # --------------------------------------------------------------------------------- flow

    async def flow(self, minutes: int) -> list[Flow]:
        whole(minutes, MINUTES, "flow(minutes={})", "minutes")
        now = self.clock.now()
        first = now - now % 60_000_000 - (minutes - 1) * 60_000_000
        starts = [first + i * 60_000_000 for i in range(minutes)]
        ended = await self.store.ended(first)
        oldest = await self.store.oldest_due(now)
        counts = await self.store.counts()
        paused = await self.store.paused()
        names = list(dict.fromkeys([*self.kinds, *(kind for kind, _state in counts)]))
        flows = []
        for name in names:
            done = [0] * minutes
            died = [0] * minutes
            for kind, state, minute, n in ended:
                if kind == name and first <= minute <= starts[-1]:
                    (done if state == "done" else died)[(minute - first) // 60_000_000] += n
            # A kind another program named with text no store can be asked about has none.
            took = await self.store.durations(name, first, SAMPLE) if is_unicode(name) else []
            flows.append(
                Flow(
                    kind=name,
                    minutes=starts,
                    done=done,
                    died=died,
                    p50_ms=percentile(took, 0.5) / 1_000 if took else None,
                    p95_ms=percentile(took, 0.95) / 1_000 if took else None,
                    oldest_due_ms=max(0, now - oldest[name]) // 1_000 if name in oldest else 0,
                    queued=counts.get((name, "queued"), 0),
                    running=counts.get((name, "running"), 0),
                    dead=counts.get((name, "dead"), 0),
                    paused=name in paused,
                )
            )
        return flows
