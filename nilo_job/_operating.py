"""The operator's calls of `job.Jobs`: a row's story, pages, counts, acting on many rows,
pausing a kind, the flow, pruning. `Jobs` inherits them; each hands its arguments to the queue's
`_operate.Operator` (or its pruner), so this module is the public face and its docstrings, and
the work is done there."""

from __future__ import annotations

from collections.abc import Sequence

from ._errors import Refusal
from ._operate import Operator, is_row_id
from ._prune import Pruner
from ._views import Flow, Found, Row, Where
from .store.contract import Store


class Operating:
    """The operator's calls of a queue (see `job.Jobs`)."""

    store: Store
    _operator: Operator
    _pruner: Pruner | None

    async def row(self, row_id: int) -> Row | None:
        """A row's whole story: its state, payload, times, attempt, lease and worker, the last
        error (name, message, traceback), and for a done row what its run returned (`result`).
        A done row is found while it is kept (`retention_ms`).

        Returns:
            The row, or None when there is no row with that id (any more).

        Raises:
            Refusal: `row_id` is not an int.
            StoreUnavailable: the store cannot be reached.
        """
        if not is_row_id(row_id):
            return None
        return await self._operator.row(row_id)

    async def find(self, where: Where, *, after: str | None = None, limit: int = 100) -> Found:
        """A page of the rows that match `where`, at most `limit` (1 to 1,000).

        Queued and running rows come by due time, oldest first; dead and done rows newest first.
        Pass the page's `next` as `after` for the page after it: pages are keyset pages, so page
        500 costs what page 1 does. Without `where.state`, rows of every state (no paging).

        Raises:
            Refusal: `where` is not a `job.Where`, `limit` is out of range, `after` is not a
                cursor `find` gave, or `after` without a state.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.find(where, after, limit)

    async def count(self, where: Where) -> int:
        """How many rows match `where` (of every state when it names none).

        Raises:
            Refusal: `where` is not a `job.Where`.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.count(where)

    async def retry_many(self, rows: Sequence[int] | Where, *, at_most: int | None = None) -> int:
        """`retry_dead` for many rows: the dead rows among the ids `rows`, or every dead row
        that matches the filter `rows`, at most `at_most` (None: all), in batches of 500 rows,
        one transaction each. How many were queued again.

        Raises:
            Refusal: an id is not an int, `rows` names a state other than dead, or `at_most`
                is negative.
            StoreUnavailable: the store cannot be reached (whole batches before it stand).
        """
        return await self._operator.retry_many(rows, at_most)

    async def cancel_many(self, rows: Sequence[int] | Where, *, at_most: int | None = None) -> int:
        """`cancel` for many rows: the queued rows among the ids, or every queued row that
        matches the filter, at most `at_most`, in batches as for `retry_many`. How many were
        taken back (a row a worker holds runs on and is not counted).

        Raises:
            Refusal, StoreUnavailable: as for `retry_many`.
        """
        return await self._operator.cancel_many(rows, at_most)

    async def delete_many(self, rows: Sequence[int] | Where, *, at_most: int | None = None) -> int:
        """Delete dead and done rows: among the ids, or every dead or done row that matches the
        filter, at most `at_most`, in batches as for `retry_many`. Queued and running rows are
        never deleted here (`cancel_many` takes queued ones back). How many went.

        Raises:
            Refusal, StoreUnavailable: as for `retry_many`.
        """
        return await self._operator.delete_many(rows, at_most)

    async def pause(self, kind: str) -> bool:
        """Stop claiming rows of the kind named `kind`, in every process on this table: each
        serving process stops within its `poll_ms` (this one at once). Pushes are still
        accepted and rows wait; a run already started finishes. The pause is kept in the
        table, so it outlasts restarts. False when the kind was paused already.

        Raises:
            Refusal: `kind` is not the name of a kind of this queue.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.pause(kind)

    async def resume(self, kind: str) -> bool:
        """Claim rows of a paused kind again, in every process within its `poll_ms`. False when
        it was not paused.

        Raises:
            Refusal, StoreUnavailable: as for `pause`.
        """
        return await self._operator.resume(kind)

    async def paused(self) -> dict[str, int]:
        """The paused kinds, each with when it was paused (µs since the epoch).

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        return await self.store.paused()

    async def flow(self, *, minutes: int = 60) -> list[Flow]:
        """Per kind, the last `minutes` minutes (1 to 1,440): rows done and died per minute,
        run durations (p50, p95 of the last 1,000 done rows), and how long the oldest due row
        has waited (queue latency), with the counts now and whether the kind is paused.

        Raises:
            Refusal: `minutes` is out of range.
            StoreUnavailable: the store cannot be reached.
        """
        return await self._operator.flow(minutes)

    async def prune_at(self, now_us: int) -> int:
        """Delete every done row that finished more than `retention_ms` before `now_us` (µs
        since the epoch): what `serve` does in small batches as it runs, here all at once (for a
        test's clock, or a cron job of yours). How many went; 0 with `retention_ms=0`.

        Raises:
            Refusal: `now_us` is not an int.
            StoreUnavailable: the store cannot be reached.
        """
        if isinstance(now_us, bool) or not isinstance(now_us, int):
            raise Refusal(f"prune_at({now_us!r}): microseconds since the epoch, as an int")
        if self._pruner is None:
            return 0
        return await self._pruner.prune_at(now_us)
