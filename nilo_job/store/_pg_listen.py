"""PostgreSQL's wake-up between processes: LISTEN for the NOTIFY every push sends.

Every push sends `NOTIFY nilo_jobs` with the row's due time in microseconds (for a group of
rows, the earliest), delivered when its transaction commits; never the payload. `listen` keeps
one connection of its own in `LISTEN nilo_jobs` and hands each due time to the queue's
wake-ups, so idle workers in other processes start a row at once, or when it falls due. A lost
connection (a restart, a terminated backend) is opened again after a short pause that doubles
up to 5 s, and the queue's poll finds whatever was pushed meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg

from ._pg_connections import DOWN

log = logging.getLogger("nilo_job")

CHANNEL = "nilo_jobs"


async def listen(conninfo: str, wake: Callable[[int | None], None]) -> None:
    """Call `wake(run_at)` for every row another process pushes, until cancelled; `wake(None)`
    (wake now) each time listening (re)starts, for rows pushed while nobody listened."""
    pause = 0.05
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
            try:
                await conn.execute(f"LISTEN {CHANNEL}")
                pause = 0.05
                wake(None)  # rows pushed while nobody listened
                async for note in conn.notifies():
                    wake(due_at(note.payload))
            finally:
                await conn.close()
        except DOWN as error:
            log.warning("listening for pushes failed (%s); listening again in %.2f s", error, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)


def due_at(payload: str) -> int | None:
    """The due time a push's NOTIFY carries (µs); None for anything else (an older version
    sent the row's id, which reads as long past: wake now either way)."""
    try:
        return int(payload)
    except ValueError:
        return None
