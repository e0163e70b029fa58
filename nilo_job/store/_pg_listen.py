"""PostgreSQL's wake-up between processes: LISTEN for the NOTIFY every push sends.

Every push sends `NOTIFY nilo_jobs` with the row's due time in microseconds (for a group of
rows, the earliest), delivered when its transaction commits; never the payload. `listen` keeps
one connection in `LISTEN nilo_jobs` and hands each due time to the queue's wake-ups, so idle
workers in other processes start a row at once, or when it falls due.

A listener can lose its connection two ways. A closed one (a restart, a terminated backend) is
noticed at once and opened again after a short pause that doubles up to 5 s. A silent one (a
half-open TCP connection: a firewall or a NAT that forgot it, a server host that vanished) is
noticed by a check of its own: after `CHECK_S` seconds without a notification the listener asks
the server `SELECT 1` and gives it `ANSWER_S` seconds to answer, so a silent connection is
replaced within `CHECK_S + ANSWER_S` seconds (40 s). TCP keepalives are on as well. Meanwhile,
and whenever the listener is away, the queue's poll still finds every row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from .._errors import StoreUnavailable
from ._pg_connections import DOWN, Connections

log = logging.getLogger("nilo_job")

CHANNEL = "nilo_jobs"
CHECK_S = 30.0
"""Seconds without a notification after which the listener checks that the server still
answers."""
ANSWER_S = 10.0
"""Seconds the server has to answer that check before the connection is given up for silent."""


class Silent(Exception):
    """The listener's connection did not answer the check in time."""


async def listen(connections: Connections, wake: Callable[[int | None], None]) -> None:
    """Call `wake(run_at)` for every row another process pushes, until cancelled; `wake(None)`
    (wake now) each time listening (re)starts, for rows pushed while nobody listened. Behind a
    pooler with no direct URL to listen on, return at once: the poll finds every row. Either
    way, say so in the log."""
    at = connections.listening_where()
    if at is None:
        log.info(
            "not listening for other processes' pushes: PostgreSQL at %s is behind a pooler "
            "(pooler=True) and no listen_url was given; their rows are found by the poll "
            "(poll_ms)", connections.where,
        )  # fmt: skip
        return
    through = " (direct, beside the pooler)" if connections.pooler else ""
    log.info("listening for other processes' pushes on PostgreSQL at %s%s", at, through)
    pause = 0.05
    while True:
        try:
            async with connections.listening() as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                pause = 0.05
                wake(None)  # rows pushed while nobody listened
                while True:
                    heard = False
                    async for note in conn.notifies(timeout=CHECK_S):
                        heard = True
                        wake(due_at(note.payload))
                    if heard:
                        continue
                    check = asyncio.ensure_future(conn.execute("SELECT 1"))
                    answered, _ = await asyncio.wait({check}, timeout=ANSWER_S)
                    if answered:
                        check.result()
                        continue
                    # Silent: close the socket without a word (a cancel would wait for the
                    # server that does not answer), and the check fails at once.
                    conn.pgconn.finish()
                    with contextlib.suppress(BaseException):
                        await check
                    raise Silent(f"no answer within {ANSWER_S:g} s after {CHECK_S:g} s of silence")
        except (*DOWN, StoreUnavailable, Silent) as error:
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
