"""The status Space: what a route polling `jobs.status(row)` reads, kept beside the table.

A status is a side record that may be forgotten on purpose (the Space has a time to live), so a
write that fails (Redis down, say) is logged as a warning and fails neither the push whose row
committed nor the run. Without a Space every call here returns at once.
"""

from __future__ import annotations

import logging

import msgspec

from ._spaces import Space
from ._values import State, Status

log = logging.getLogger("nilo_job")

_ENCODE = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder(Status)


def status_key(row_id: int) -> str:
    """The Space key of row `row_id`'s status."""
    return f"nilo_job:status:{row_id}"


class Statuses:
    """Rows' statuses in `space` (None: the queue keeps none)."""

    __slots__ = ("space",)

    def __init__(self, space: Space | None) -> None:
        self.space = space

    async def put(
        self, row_id: int, state: State, attempts: int, progress: int | None = None
    ) -> None:
        """Record a row's state; a failure is logged, never raised."""
        if self.space is None:
            return
        status = Status(state, attempts, progress)
        try:
            await self.space.put(status_key(row_id), _ENCODE.encode(status))
        except Exception as error:
            log.warning(
                "row %d: its status (%s) could not be recorded in %r: %s",
                row_id, state.value, self.space, error, extra={"row": row_id},
            )  # fmt: skip

    async def get(self, row_id: int) -> Status | None:
        """What the Space remembers of the row, or None.

        Raises:
            Exception: whatever the Space raises when it cannot be read.
        """
        if self.space is None:
            return None
        data = await self.space.get(status_key(row_id))
        return None if data is None else _DECODE.decode(data)

    async def forget(self, row_id: int) -> None:
        """Forget the row (it was cancelled)."""
        if self.space is not None:
            await self.space.delete(status_key(row_id))
