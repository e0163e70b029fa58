"""What `job.Memory` answers an operator: counts, pages, a row's story, the flow figures. A part
of `Memory` (its base), kept apart so that each module holds one idea: `memory.py` pushes,
claims and ends rows; this reads them. The row as Memory keeps it (`_Row`) is here too."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from .._values import Stats
from .contract import NEWEST_FIRST, DeadRow, RowView, Where, check_state


@dataclass(slots=True)
class _Row:
    id: int
    kind: str
    payload: bytes
    state: str
    run_at: int
    attempts: int = 0
    lease_until: int = 0
    unique_key: str | None = None
    error: str | None = None
    detail: str | None = None
    traceback: str | None = None
    died_at: int | None = None
    pushed_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    worker: str | None = None
    result: bytes | None = None


class Reading:
    """The read-only calls of `job.Memory`, over the rows it holds."""

    _rows: dict[int, _Row]
    _history: dict[int, _Row]
    _unique: dict[tuple[str, str], int]
    _paused: dict[str, int]
    _lock: threading.Lock

    async def stats(self) -> Stats:
        counts = {"queued": 0, "running": 0, "dead": 0}
        with self._lock:
            for row in self._rows.values():
                counts[row.state] += 1
            done = len(self._history)
        return Stats(counts["queued"], counts["running"], counts["dead"], done)

    async def dead_ones(self, limit: int) -> list[DeadRow]:
        with self._lock:
            dead = [row for row in self._rows.values() if row.state == "dead"]
        dead.sort(key=lambda row: (row.died_at or 0, row.id), reverse=True)
        return [
            DeadRow(
                row.id,
                row.kind,
                row.error or "",
                row.attempts,
                row.payload,
                row.died_at or 0,
                row.detail or "",
                row.traceback or "",
            )
            for row in dead[:limit]
        ]

    async def rows(self, state: str, limit: int) -> list[RowView]:
        return await self.find(Where(state=check_state(state)), None, limit)

    async def row(self, row_id: int) -> RowView | None:
        with self._lock:
            found = self._rows.get(row_id) or self._history.get(row_id)
            return None if found is None else _view(found)

    def _matching(self, where: Where) -> list[_Row]:
        """The rows that match `where`, in its state's order; the caller holds the lock."""
        state = check_state(where.state or "")
        pool = self._history.values() if state == "done" else self._rows.values()
        found = [
            row
            for row in pool
            if where.matches(row.state, row.kind, row.error, row.unique_key, row.id)
        ]
        found.sort(key=lambda row: _view(row).sort_key(), reverse=state in NEWEST_FIRST)
        return found

    async def find(self, where: Where, after: tuple[int, int] | None, limit: int) -> list[RowView]:
        newest_first = check_state(where.state or "") in NEWEST_FIRST
        with self._lock:
            views = [_view(row) for row in self._matching(where)]
        if after is not None:
            views = [
                view
                for view in views
                if (view.sort_key() < after if newest_first else view.sort_key() > after)
            ]
        return views[:limit]

    async def count(self, where: Where) -> int:
        with self._lock:
            return len(self._matching(where))

    async def paused(self) -> dict[str, int]:
        with self._lock:
            return dict(self._paused)

    async def ended(self, since_us: int) -> list[tuple[str, str, int, int]]:
        counts: dict[tuple[str, str, int], int] = {}
        with self._lock:
            for row in (*self._history.values(), *self._rows.values()):
                at = row.finished_at if row.state == "done" else row.died_at
                if row.state in ("done", "dead") and at is not None and at >= since_us:
                    key = (row.kind, row.state, at - at % 60_000_000)
                    counts[key] = counts.get(key, 0) + 1
        return [(kind, state, minute, n) for (kind, state, minute), n in sorted(counts.items())]

    async def durations(self, kind: str, since_us: int, limit: int) -> list[int]:
        with self._lock:
            done = [
                row
                for row in self._history.values()
                if row.kind == kind and (row.finished_at or 0) >= since_us
            ]
        done.sort(key=lambda row: (row.finished_at or 0, row.id), reverse=True)
        return [
            (row.finished_at or 0) - (row.started_at or 0)
            for row in done[:limit]
            if row.started_at is not None
        ]

    async def oldest_due(self, now_us: int) -> dict[str, int]:
        oldest: dict[str, int] = {}
        with self._lock:
            for row in self._rows.values():
                if row.state == "queued" and row.run_at <= now_us:
                    oldest[row.kind] = min(oldest.get(row.kind, row.run_at), row.run_at)
        return oldest

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]:
        with self._lock:
            return [
                _view(self._rows[row_id])
                for kind in sorted(set(kinds))
                if (row_id := self._unique.get((kind, key))) is not None
            ]

    async def counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for row in (*self._rows.values(), *self._history.values()):
                counts[(row.kind, row.state)] = counts.get((row.kind, row.state), 0) + 1
        return counts


def _view(row: _Row) -> RowView:
    lease = row.lease_until if row.state == "running" else None
    return RowView(
        row.id, row.kind, row.state, row.payload, row.run_at, row.attempts, row.unique_key,
        lease, row.error, row.died_at, row.detail, row.traceback, None, row.pushed_at,
        row.started_at, row.finished_at, row.worker, row.result,
    )  # fmt: skip
