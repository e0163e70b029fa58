"""PostgreSQL's wake-up between processes: LISTEN for the NOTIFY every push sends.

Every push sends `NOTIFY nilo_jobs` with the row's due time in microseconds (for a group of
rows, the earliest), delivered when its transaction commits; never the payload. `listen` keeps
one connection in `LISTEN nilo_jobs` and hands each due time to the queue's wake-ups, so idle
workers in other processes start a row at once, or when it falls due. Each notification is
read in the socket's reader callback and handed over there, with no task of the listener's to
wake first (`_heard`).

A listener can lose its connection two ways. A closed one (a restart, a terminated backend) is
noticed at once and opened again after a short pause that doubles up to 5 s. A silent one (a
half-open TCP connection: a firewall or a NAT that forgot it, a server host that vanished) is
noticed by a check of its own: once `CHECK_S` seconds have passed without a notification, the
listener asks the server `SELECT 1`, within the store's bound like every call (`Deadline`), so a
silent connection is replaced within `CHECK_S` seconds and the bound (40 s by default) of its
last notification. TCP keepalives are on as well. Meanwhile, and whenever the listener is away,
the queue's poll still finds every row.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from ..._base.errors import StoreUnavailable
from .._target import scrubbed
from .bounds import Deadline
from .connections import DOWN, Connections

log = logging.getLogger("nilo_job")

CHANNEL = "nilo_jobs"
CHECK_S = 30.0
"""Seconds without a notification after which the listener checks that the server still
answers."""
ON = "the listener's connection"


async def listen(connections: Connections, wake: Callable[[int | None], None]) -> None:
    """Call `wake(run_at)` for every row another process pushes, until cancelled; `wake(None)`
    (wake now) each time listening (re)starts, for rows pushed while nobody listened. Behind a
    pooler with no direct URL to listen on, return: at once, or as soon as the store finds that
    pooler (`Connections.found_pooler`); the poll finds every row. Either way, say so in the
    log."""
    pause = 0.05
    said: str | None = None  # where the log says serve listens

    def started() -> None:
        nonlocal pause
        pause = 0.05
        wake(None)  # rows pushed while nobody listened

    while True:
        at = connections.listening_where()
        if at is None:
            log.info(
                "not listening for other processes' pushes: PostgreSQL at %s is behind a pooler "
                "(%s) and no listen_url was given; their rows are found by the poll (poll_ms)",
                connections.where, "pooler=True" if connections.told else "found, not told",
            )  # fmt: skip
            return
        if at != said:
            through = " (direct, beside the pooler)" if connections.pooler else ""
            log.info("listening for other processes' pushes on PostgreSQL at %s%s", at, through)
            said = at
        try:
            async with connections.listening() as conn:
                await _session(connections, conn, wake, started)
        except (*DOWN, StoreUnavailable) as error:
            if connections.listening_where() is None:
                continue  # a pooler was found in between: its connection was shut
            said_error = scrubbed(str(error), connections.listen_to or connections.conninfo)
            log.warning(
                "listening for pushes failed (%s); listening again in %.2f s", said_error, pause
            )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)


async def _session(
    connections: Connections,
    conn: psycopg.AsyncConnection[Any],
    wake: Callable[[int | None], None],
    started: Callable[[], None],
) -> None:
    """LISTEN on `conn`, call `started()` once it listens, then hand every notification's due
    time to `wake` until cancelled; check the server after `CHECK_S` seconds of silence.

    Raises:
        psycopg.OperationalError: the connection broke.
        StoreUnavailable: the server did not answer the LISTEN or the check within the bound.
    """
    seconds = connections.bound_s or connections.answer_s  # (the check is bounded even when
    # the URL lets statements run for ever: it is the listener's only way to find silence)
    at = connections.where

    def tell(note: psycopg.Notify) -> None:
        wake(due_at(note.payload))

    # psycopg calls the handler for what arrives while a statement of its own runs on `conn`
    # (the LISTEN, a check); `_heard` for everything else.
    conn.add_notify_handler(tell)
    try:
        with Deadline(conn, "the listener's LISTEN", ON, seconds, at, connections.replace_soon):
            await conn.execute(f"LISTEN {CHANNEL}")
        started()
        while True:
            await _heard(conn, CHECK_S)
            what = f"the listener's check after {CHECK_S:g} s without a notification"
            with Deadline(conn, what, ON, seconds, at, connections.replace_soon):
                await conn.execute("SELECT 1")
    finally:
        conn.remove_notify_handler(tell)


async def _heard(conn: psycopg.AsyncConnection[Any], quiet_s: float) -> None:
    """Read the notifications `conn` receives, handing each to the connection's notify
    handlers, until `quiet_s` seconds pass without one.

    Each is read and handed over in the socket's reader callback, as it arrives. psycopg's
    `notifies()` would wake this task first, and only then the task the handler wakes: the
    worker's claim would go out a turn of the event loop later, after this task had gone back to
    waiting. (What an idle worker spends between a NOTIFY and its claim is latency, one for
    one, on a machine whose idle cores sleep.)

    Raises:
        psycopg.OperationalError: the connection broke.
    """
    loop = asyncio.get_running_loop()
    pgconn = conn.pgconn
    broken: asyncio.Future[None] = loop.create_future()
    heard_at = loop.time()

    def readable() -> None:
        nonlocal heard_at
        try:
            pgconn.consume_input()
            while (note := pgconn.notifies()) is not None:
                heard_at = loop.time()
                if pgconn.notify_handler is not None:
                    pgconn.notify_handler(note)  # as psycopg's own generators do
        except Exception as error:  # the connection broke (or a handler failed)
            loop.remove_reader(fd)
            if not broken.done():
                broken.set_exception(error)

    async with conn.lock:  # no statement of psycopg's meanwhile, as in its notifies()
        fd = pgconn.socket
        loop.add_reader(fd, readable)
        try:
            readable()  # anything already received
            while (left := heard_at + quiet_s - loop.time()) > 0:
                await asyncio.wait({broken}, timeout=left)
                if broken.done():
                    broken.result()  # raises what broke it
        finally:
            loop.remove_reader(fd)


def due_at(payload: str) -> int | None:
    """The due time a push's NOTIFY carries (µs); None for anything else (an older version
    sent the row's id, which reads as long past: wake now either way)."""
    try:
        return int(payload)
    except ValueError:
        return None
