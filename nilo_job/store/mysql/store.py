"""The MariaDB/MySQL store: `job.Table("mysql://…")` or `job.Table("mariadb://…")`, through
asyncmy.

Any number of worker processes on any number of hosts share one table. A claim is one
transaction: a read of the ids of the due rows and of the rows whose lease ran out, each in the
order of its index and locking nothing; a locking read of those rows by their primary key,
skipping rows another claim holds (`FOR UPDATE SKIP LOCKED`, MariaDB 10.6 and MySQL 8.0 or
newer) and rows no longer due; then one UPDATE of those it takes. (Locking as it reads the
index, a claim would also lock the entry after its range, another kind's most due row.) Kinds
with a concurrency limit are counted and claimed in the same transaction, each under a named
lock of its own. The unique index over (kind, unique_key) gives `unique` its verdict: a key
another queued or running row of the kind holds is the server's duplicate-key error, which
undoes that one INSERT and nothing else of its transaction.

Neither database has NOTIFY: another host's push is found at the poll (`poll_ms`). Processes on
one host wake each other at once with a datagram (`store/_wake.py`, as on SQLite), through a
folder of this user's (`wake_folder`).

This module holds what each call sends and what it answers; the statements and their
parameters are in `statements` (and `queries.sql`), the connections in `connections`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from asyncmy.connection import Connection
from asyncmy.cursors import Cursor
from asyncmy.errors import MySQLError

from ..._base.bounds import PAYLOAD_BYTES, Span, whole
from ..._base.errors import Refusal, StoreUnavailable
from ..._base.text import count_of
from ..._base.values import Stats
from .. import _schema
from .._sql import (
    attempt_of,
    attempt_values,
    dead_row,
    death_values,
    end_statement,
    entry_params,
    is_async_sqlalchemy,
    keep_values,
    lost_values,
    row_view,
    unwrap_django,
    unwrap_sqlalchemy,
    unwrap_sqlalchemy_async,
    worker_entry,
)
from .._target import shown
from .._wake import Signals, listen
from ..contract import (
    LISTED_CHARS,
    MAX_PAYLOAD,
    Claimed,
    DeadRow,
    Died,
    Done,
    End,
    HeldBack,
    NewRow,
    Rebuilt,
    Released,
    RowView,
    Where,
    WorkerEntry,
    check_state,
    limited,
)
from .connections import DENIED, NO_TABLE, Connections, code_of, is_dup, server_of
from .statements import (
    SQL,
    claim_params,
    claim_statement,
    count_statement,
    find_statement,
    insert_many,
    keep_many,
    row_params,
    spelled,
)

log = logging.getLogger("nilo_job")

ANSWER_MS = 10_000
"""How long the server has to answer one call, in milliseconds, unless the store is told."""

NO_PROCESS = 1227
"""ER_SPECIFIC_ACCESS_DENIED_ERROR: the user lacks a privilege (PROCESS, to read the server's
transactions)."""

ANSWER = Span(100, 86_400_000, "whole milliseconds", "a day")
"""`answer_ms`."""

POOL = Span(1, 10_000, "a count of connections", "far past any server's max_connections")
"""`max_size`."""

CLAIM_ROUNDS = 4
"""How many times a claim reads on past rows other claims hold, before it takes what it has."""

BULK_ROWS = 500
BULK_BYTES = 4 << 20
"""The most rows, and about the most bytes of payload, one multi-row INSERT carries."""

SERVER_STATUS_IN_TRANS = 1
"""The server's status flag for a session inside a transaction."""

ACCEPTED_TX = (
    "an asyncmy Connection inside a transaction (or without autocommit), or (jobs.sync.push_in) "
    "a PyMySQL or mysqlclient connection inside one, or a SQLAlchemy AsyncSession or "
    "AsyncConnection of mysql+asyncmy, or Session or Connection of mysql+pymysql or "
    "mysql+mysqldb, or Django's connection inside transaction.atomic()"
)

SQLALCHEMY_AUTOCOMMIT = (
    "push_in got a SQLAlchemy session or connection whose isolation_level is AUTOCOMMIT, so the "
    "row would commit on its own: use one without it"
)

MYSQL_COLLATION = "utf8mb4_0900_bin"
"""MySQL 8's binary collation that does not pad, written instead of MariaDB's
`utf8mb4_nopad_bin` when the server is MySQL."""


class MysqlTable:
    """The `nilo_jobs` table in a MariaDB (10.6 or newer) or MySQL (8.0 or newer) database.

    Args:
        url: `mysql://user:password@host:3306/database` (or `mariadb://…`), the user and the
            password percent-encoded; `?connect_timeout=S` (seconds, 10 by default) and
            `?unix_socket=PATH` as options.
        max_size: the most connections the store opens at once (per event loop).
        answer_ms: how long the server has to answer one call, in milliseconds (default
            10,000; from 100 to 86,400,000): a call not answered in time has its connection
            closed and raises `StoreUnavailable` naming the call. A call that meets a deadlock
            is made again twice, each try within `answer_ms` (`bound_ms`). Migrations get no
            bound.
        max_payload: the largest payload one row may carry, in bytes of JSON (1 MiB by
            default; from 1 to 1,000,000,000; the server's `max_allowed_packet` must hold it):
            the queue refuses a larger push with `PayloadTooLarge`, before this store is
            called.

    Raises:
        Refusal: the URL cannot be used (see `connections.server_of`), or an option is out of
            its range.
    """

    def __init__(
        self,
        url: str,
        *,
        max_size: int = 10,
        answer_ms: int = ANSWER_MS,
        max_payload: int = MAX_PAYLOAD,
    ) -> None:
        whole(max_payload, PAYLOAD_BYTES, "job.Table(..., max_payload={})", "max_payload")
        whole(answer_ms, ANSWER, "job.Table(..., answer_ms={})", "answer_ms")
        whole(max_size, POOL, "job.Table(..., max_size={})", "max_size")
        self.max_payload = max_payload
        self.max_size = max_size
        self.answer_ms = answer_ms
        self.url = url
        self.server = server_of(url)
        self._db = Connections(self.server, max_size, self._target(), answer_ms)
        self._signals = Signals(
            wake_folder(self.server.host, self.server.port, self.server.database)
        )

    def __repr__(self) -> str:
        """`job.Table('mysql://user@host:port/database')`: the URL as PostgreSQL's repr shows
        its own, the user kept (percent-encoded), never the password nor the options."""
        server = self.server
        user = f"{quote(server.user, safe='')}@" if server.user else ""
        return f"job.Table('{self._scheme()}://{user}{server.address}/{server.database}')"

    def _scheme(self) -> str:
        return "mariadb" if self.server.flavor == "MariaDB" else "mysql"

    def _target(self) -> str:
        """The URL an operator passes to `nilo-job migrate`, without its password (`shown`)."""
        return shown(self.url)

    def _where(self) -> str:
        return f"{self.server.flavor} at {self.server.where}"

    @property
    def bound_ms(self) -> int:
        """The longest one call waits for its answer, in milliseconds: `answer_ms` for each of
        the three tries a call that meets a deadlock is given, and the pauses between them
        (30,015 with the default `answer_ms`). `nilo-job worker` waits that long past its grace
        period on a stop."""
        return self._db.bound_ms

    @property
    def ddl(self) -> str:
        """The statements that create the tables and their indexes, as text (MariaDB's; on
        MySQL the collation is `utf8mb4_0900_bin`)."""
        return SQL["create"]

    # ------------------------------------------------------------------------------ plumbing

    async def open(self) -> None:
        await self.ping()

    async def close(self) -> None:
        await self._db.close()
        self._signals.close()

    async def ping(self) -> None:
        await self._one("SELECT 1", what="a ping")

    async def now_us(self) -> int | None:
        """The server's clock, in microseconds since the epoch."""
        found = await self._one(SQL["now"], what="a reading of its clock")
        return int(found[0])

    async def watch(self, wake: Callable[[int | None], None]) -> None:
        """Call `wake(run_at)` whenever another process on this host commits a push to this
        database, until cancelled (a datagram to a socket of this process, as on SQLite);
        return at once when there is no folder for the sockets. A process on another host is
        found at the poll."""
        folder = self._signals.folder
        if folder is None:
            return
        if not _own_folder(folder.parent):
            log.info(
                "no wake-ups between processes: %s is not this user's alone; rows pushed by "
                "other processes start at the poll",
                folder.parent,
            )
            return
        await listen(folder, wake)

    def wake_others(self) -> None:
        """Wake the other processes on this host serving this database now: for a row your
        own transaction committed (`push_in`), which the store did not see. Safe from any
        thread; never raises. `Jobs.wake()` calls it."""
        self._signals.send(None)

    async def create_missing(self) -> None:
        """Create `nilo_jobs` and the tables beside it where missing, and record their version
        (idempotent, and safe to race: one migration of a database at a time, under a named
        lock).

        Raises:
            StoreUnavailable: the table is from a newer nilo-job, or one this store did not
                make, or the server cannot be reached or refused a statement (a user without
                CREATE, a read-only server: in its words), or another migration held the lock
                for 30 s.
        """
        where = self._where()

        async def create(cur: Cursor) -> None:
            await cur.execute(SQL["lock_migration"], (30,))
            (got,) = await cur.fetchone()
            if got != 1:
                raise StoreUnavailable(f"{where}: another migration held its lock for 30 s")
            try:
                columns, recorded, tables = await _read_schema(cur)
                steps = _schema.steps_from(columns, recorded, where)
                # As this version wants it (or newer, and fine as it is): nothing is written,
                # so that a user without CREATE may run it, but a table beside it that is
                # missing is made.
                as_wanted = steps is None or (not steps and recorded is not None and columns)
                if as_wanted and not _schema.SIDE_TABLES - tables:
                    return
                await cur.execute("SET SESSION sql_notes = 0", ())  # (IF NOT EXISTS notes)
                try:
                    for statement in _statements(self._create()):
                        await cur.execute(statement, ())
                finally:
                    await cur.execute("SET SESSION sql_notes = 1", ())
                if steps is None or as_wanted:
                    return
                for step in steps:
                    if step not in SQL:
                        raise StoreUnavailable(
                            f"the nilo_jobs table in {where} lacks columns of version 5, which "
                            "every table this store makes has: it was not made by nilo-job"
                        )
                conn = cur.connection
                await conn.begin()
                try:
                    for step in steps:
                        for statement in _statements(SQL[step]):
                            await cur.execute(statement, ())
                    await cur.execute(SQL["forget_version"], ())
                    version = (_schema.VERSION, _schema.COMPATIBLE_FROM)
                    await cur.execute(SQL["set_version"], version)
                    await conn.commit()
                except BaseException:
                    if conn.connected:
                        await conn.rollback()
                    raise
            finally:
                await cur.execute(SQL["unlock_migration"], ())

        what = "the creation of the table"
        try:
            await self._db.run(create, what, bounded=False)
        except MySQLError as error:
            # Refused (CREATE denied, read_only): said in a sentence, as `nilo-job migrate`
            # says the store's errors.
            raise self._db.unavailable(error, what) from error

    def _create(self) -> str:
        if self._db.mariadb:
            return SQL["create"]
        return SQL["create"].replace("utf8mb4_nopad_bin", MYSQL_COLLATION)

    async def check(self) -> None:
        async def read(cur: Cursor) -> tuple[set[str], _schema.Recorded, set[str]]:
            return await _read_schema(cur, probe=True)

        try:
            columns, recorded, tables = await self._db.run(read, "the check of the table")
        except MySQLError as error:
            if code_of(error) not in DENIED:
                raise
            raise _schema.not_readable(self._where(), str(error.args[-1])) from error
        _schema.check(self._where(), self._target(), columns, recorded, tables)

    # ---------------------------------------------------------------------------------- rows

    async def push(self, rows: Sequence[NewRow]) -> list[int | None]:
        if not rows:
            return []

        bulk = len(rows) > 1 and self._db.mariadb and all(r.unique_key is None for r in rows)

        async def push(cur: Cursor) -> list[int | None]:
            if bulk:  # (nothing can conflict)
                ids: list[int | None] = []
                for chunk in _chunks(rows):
                    await cur.execute(*insert_many(chunk))
                    ids += [int(r[0]) for r in await cur.fetchall()]
                return ids
            return [await _insert(cur, row) for row in rows]

        what = "a push" if len(rows) == 1 else f"a push of {count_of(len(rows), 'row')}"
        ids = await self._db.run(push, what, transaction=len(rows) > 1)
        due = [row.run_at for row, row_id in zip(rows, ids, strict=True) if row_id is not None
               and row.lease_until is None]  # fmt: skip
        if due:  # committed: tell the other processes on this host
            self._signals.send(min(due))
        return ids

    async def push_in(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        tx = unwrap_django(tx)
        via_sqlalchemy = is_async_sqlalchemy(tx)
        tx = await unwrap_sqlalchemy_async(tx)  # the asyncmy connection under it
        if isinstance(tx, Connection):
            status = getattr(tx, "server_status", 0)
            if tx.get_autocommit() and not status & SERVER_STATUS_IN_TRANS:
                raise Refusal(
                    SQLALCHEMY_AUTOCOMMIT
                    if via_sqlalchemy
                    else "push_in got an asyncmy connection in autocommit with no open "
                    "transaction, so the row would commit on its own: `await conn.begin()` first"
                )
            async with tx.cursor() as cur:
                return [await _insert(cur, row) for row in rows]
        if via_sqlalchemy:
            raise Refusal(
                f"push_in got a SQLAlchemy session or connection on {type(tx).__module__}; "
                f"this store accepts {ACCEPTED_TX}"
            )
        return self.push_in_now(tx, rows)

    def push_in_now(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        """`push_in` through a synchronous connection (PyMySQL's or mysqlclient's, as Django's
        MySQL backend has, or SQLAlchemy's `Session` or `Connection` on one), in the caller's
        thread.

        Raises:
            Refusal: `tx` must be awaited, is in autocommit with no open transaction, or is
                none this store can write through.
        """
        tx = unwrap_django(tx)
        if isinstance(tx, Connection) or is_async_sqlalchemy(tx):
            raise Refusal(
                f"jobs.sync.push_in got {_awaited(tx)}, which must be awaited: use "
                "await jobs.push_in(...)"
            )
        given = tx
        tx = unwrap_sqlalchemy(tx)  # the PyMySQL or mysqlclient connection under it
        via_sqlalchemy = tx is not given
        module = type(tx).__module__
        if not module.startswith(("pymysql", "MySQLdb")):
            said = (
                f"a SQLAlchemy session or connection on {module}"
                if via_sqlalchemy
                else f"a {type(tx).__qualname__}"
            )
            raise Refusal(f"push_in got {said}; this store accepts {ACCEPTED_TX}")
        conn: Any = tx
        status = getattr(conn, "server_status", None)
        open_tx = isinstance(status, int) and status & SERVER_STATUS_IN_TRANS
        if conn.get_autocommit() and not open_tx:
            raise Refusal(
                SQLALCHEMY_AUTOCOMMIT
                if via_sqlalchemy
                else "push_in got a connection in autocommit with no open transaction, so the "
                "row would commit on its own: conn.begin() first (or autocommit=False)"
            )
        answers: list[int | None] = []
        cur = conn.cursor()
        try:
            for row in rows:
                try:
                    cur.execute(SQL["push"], row_params(row))
                except Exception as error:
                    if code_of(error) == 1062 and type(error).__name__ == "IntegrityError":
                        answers.append(None)
                        continue
                    raise
                answers.append(int(cur.lastrowid))
        finally:
            cur.close()
        return answers

    async def claim(
        self,
        kinds: Sequence[str],
        now_us: int,
        lease_until_us: int,
        limit: int,
        worker: str | None = None,
        limits: Mapping[str, int] | None = None,
        due_from_us: int | None = None,
    ) -> list[Claimed]:
        if limits:
            return await self._claim_limited(kinds, now_us, lease_until_us, limit, worker, limits)
        if not kinds or limit <= 0:
            return []

        async def claim(cur: Cursor) -> list[Claimed]:
            return await _claim_in(cur, kinds, now_us, lease_until_us, limit, worker, due_from_us)

        claimed = await self._db.run(claim, "a claim", transaction=True)
        claimed.sort(key=lambda row: (row.run_at, row.id))
        return claimed

    async def _claim_limited(
        self,
        kinds: Sequence[str],
        now_us: int,
        lease_until_us: int,
        limit: int,
        worker: str | None,
        limits: Mapping[str, int],
    ) -> list[Claimed]:
        """`claim` with `limits`, in one transaction: for each limited kind, its named lock
        (`lock_kind`, given back once the transaction has ended), its live leases counted,
        then at most its room claimed; then the other kinds with what is left. All of it, or
        nothing, is claimed."""
        free, capped = limited(kinds, limits)
        wait = max(1, int(self._db.bound_s))
        where = self._where()

        async def claim(cur: Cursor) -> list[Claimed]:
            conn = cur.connection
            taken: list[Claimed] = []
            locked = False
            await conn.begin()
            try:
                for kind, most in capped:
                    room = limit - len(taken)
                    if room <= 0:
                        break
                    await cur.execute(SQL["lock_kind"], {"kind": kind, "wait": wait})
                    (got,) = await cur.fetchone()
                    locked = True
                    if got != 1:
                        raise StoreUnavailable(
                            f"{where}: a claim of {kind!r} waited {wait} s for another claim "
                            "of that kind to end"
                        )
                    await cur.execute(SQL["running"], {"now": now_us, "kind": kind})
                    (running,) = await cur.fetchone()
                    room = min(room, most - int(running))
                    if room > 0:
                        taken += await _claim_in(cur, [kind], now_us, lease_until_us, room, worker)
                if free and len(taken) < limit:
                    rest = limit - len(taken)
                    taken += await _claim_in(cur, free, now_us, lease_until_us, rest, worker)
                await conn.commit()
            except BaseException:
                if conn.connected:
                    await conn.rollback()
                raise
            finally:
                if locked and conn.connected:
                    await cur.execute(SQL["unlock_kinds"], ())
            return taken

        claimed = await self._db.run(claim, "a claim")
        claimed.sort(key=lambda row: (row.run_at, row.id))
        return claimed

    async def finish(self, ends: Sequence[End]) -> list[bool]:
        if not ends:
            return []

        async def apply(cur: Cursor) -> list[bool]:
            query, params = spelled(SQL["fence"], {}, ids=sorted({end.id for end in ends}))
            await cur.execute(query, params)
            held = {int(r[0]): int(r[1]) for r in await cur.fetchall()}
            applied: list[bool] = []
            plain: list[Done] = []
            rest: list[End] = []
            for end in ends:
                ok = held.get(end.id) == end.attempts  # else the lease was lost, or the row is
                applied.append(ok)  # not running
                if not ok:
                    continue
                del held[end.id]  # (an end applied: the row runs no more)
                if isinstance(end, Done) and end.then is None and end.lost_from is None:
                    plain.append(end)
                else:
                    rest.append(end)
            await _done_many(cur, plain)  # the common end, a run that finished: in bulk
            for end in rest:
                lost = lost_values(end)
                if lost is not None:
                    await cur.execute(SQL["lost"], lost)
                tried = attempt_values(end)
                if tried is not None:
                    await cur.execute(SQL["attempt"], tried)
                if lost is not None or tried is not None:
                    await cur.execute(SQL["attempts_trim"], {"id": end.id})
                if isinstance(end, Done) and end.finished_at is not None:
                    await cur.execute(SQL["keep"], keep_values(end)[:4])
                name, values = end_statement(end)
                await cur.execute(SQL[name], values)
                if isinstance(end, Done) and end.finished_at is None:
                    await cur.execute(SQL["attempts_forget_one"], (end.id,))  # the row is gone
                if isinstance(end, Died):
                    deaths = death_values(end)
                    await cur.execute(SQL["death"], deaths)
                    await cur.execute(SQL["deaths_trim"], deaths)
                if end.then is not None:
                    await _insert(cur, end.then)
            return applied

        applied = await self._db.run(apply, _ends(len(ends)), transaction=True)
        back = [e.run_at for e, ok in zip(ends, applied, strict=True) if ok
                and isinstance(e, Released)]  # fmt: skip
        if back:  # rows a stopping worker gave back: another process may take them now
            self._signals.send(min(back))
        return applied

    async def hand_on(self, row_id: int, attempts: int, then: NewRow) -> bool:
        async def hand_on(cur: Cursor) -> bool:
            await cur.execute(SQL["release_key"], (row_id, attempts))
            if _changed(cur) != 1:
                return False
            await _insert(cur, then)
            return True

        return await self._db.run(hand_on, "the hand-on of a unique key", transaction=True)

    async def cancel(self, row_id: int) -> bool:
        async def cancel(cur: Cursor) -> bool:
            await cur.execute(SQL["cancel"], (row_id,))
            return _changed(cur) > 0  # the row, and its attempts with it

        return await self._db.run(cancel, "a cancel")

    async def retry_dead(self, row_id: int, now_us: int) -> bool:
        async def retry(cur: Cursor) -> bool:
            await cur.execute(SQL["retry_dead"], (now_us, row_id))
            return _changed(cur) == 1

        again = await self._db.run(retry, "a retry of a dead row")
        if again:
            self._signals.send(now_us)
        return again

    # ------------------------------------------------------------------------------ reading

    async def _one(self, query: str, params: Any = (), *, what: str = "a read") -> Any:
        async def one(cur: Cursor) -> Any:
            await cur.execute(query, params)
            return await cur.fetchone()

        return await self._db.run(one, what)

    async def _all(self, query: str, params: Any = (), *, what: str = "a read") -> Any:
        async def every(cur: Cursor) -> Any:
            await cur.execute(query, params)
            return await cur.fetchall()

        return await self._db.run(every, what)

    async def stats(self) -> Stats:
        row = await self._one(SQL["stats"], what="a count of the rows")
        return Stats(int(row[0]), int(row[1]), int(row[2]), int(row[3]))

    async def dead_ones(self, limit: int) -> list[DeadRow]:
        params = (LISTED_CHARS + 1, limit)  # each payload's start (`listed`)
        found = await self._all(SQL["dead_ones"], params, what="a read of dead rows")
        return [dead_row(r) for r in found]

    async def rows(self, state: str, limit: int) -> list[RowView]:
        return await self.find(Where(state=check_state(state)), None, limit)

    async def row(self, row_id: int) -> RowView | None:
        async def read(cur: Cursor) -> RowView | None:
            await cur.execute(SQL["row"], {"id": row_id})
            found = await cur.fetchall()
            if not found:
                return None
            await cur.execute(SQL["attempts_of"], (row_id,))
            tried = await cur.fetchall()
            return row_view(found[0]).with_attempts([attempt_of(r) for r in tried])

        return await self._db.run(read, "a read of a row")

    async def find(self, where: Where, after: tuple[int, int] | None, limit: int) -> list[RowView]:
        query, params = find_statement(where, after, limit)
        return [row_view(r) for r in await self._all(query, params, what="a page of rows")]

    async def count(self, where: Where) -> int:
        query, params = count_statement(where)
        found = await self._one(query, params, what="a count of rows")
        return int(found[0])

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]:
        if not kinds:
            return []
        query, params = spelled(SQL["holding"], {"key": key}, kinds=list(kinds))
        return [row_view(r) for r in await self._all(query, params, what="a read of a key")]

    async def counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for kind, state, n in await self._all(SQL["counts"], what="a count of the rows"):
            counts[(kind, state)] = counts.get((kind, state), 0) + int(n)
        return counts

    async def paused(self) -> dict[str, int]:
        return {kind: int(at) for kind, at in await self._all(SQL["paused"])}

    async def ended(self, since_us: int) -> list[tuple[str, str, int, int]]:
        found = await self._all(SQL["ended"], {"since": since_us})
        return [(kind, state, int(minute), int(n)) for kind, state, minute, n in found]

    async def durations(self, kind: str, since_us: int, limit: int) -> list[int]:
        return [int(r[0]) for r in await self._all(SQL["durations"], (kind, since_us, limit))]

    async def oldest_due(self, now_us: int) -> dict[str, int]:
        return {kind: int(at) for kind, at in await self._all(SQL["oldest_due"], (now_us,))}

    # ------------------------------------------------------------------ the operator's calls

    async def _among(
        self, ids: Sequence[int], what: str, act: Callable[[Cursor, list[int]], Any]
    ) -> list[int]:
        """`act(cursor, ids)` in one transaction; the ids it answers."""
        if not ids:
            return []
        wanted = sorted({int(n) for n in ids})

        async def run(cur: Cursor) -> list[int]:
            found: list[int] = await act(cur, wanted)
            return found

        return await self._db.run(run, what, transaction=True)

    async def retry_many(self, ids: Sequence[int], now_us: int) -> list[int]:
        async def retry(cur: Cursor, wanted: list[int]) -> list[int]:
            dead = await _locked(cur, "dead_among", wanted)
            if dead:
                await cur.execute(*spelled(SQL["retry_many"], {"now": now_us}, ids=dead))
            return dead

        again = await self._among(ids, f"a retry of {count_of(len(ids), 'row')}", retry)
        if again:
            self._signals.send(now_us)
        return again

    async def cancel_many(self, ids: Sequence[int]) -> list[int]:
        async def cancel(cur: Cursor, wanted: list[int]) -> list[int]:
            queued = await _locked(cur, "queued_among", wanted)
            await _delete(cur, "delete_rows", queued)
            await _delete(cur, "attempts_forget", queued)
            return queued

        return await self._among(ids, f"a cancel of {count_of(len(ids), 'row')}", cancel)

    async def delete_many(self, ids: Sequence[int]) -> list[int]:
        async def delete(cur: Cursor, wanted: list[int]) -> list[int]:
            dead = await _locked(cur, "dead_among", wanted)
            done = await _locked(cur, "done_among", wanted)
            await _delete(cur, "delete_rows", dead)
            await _delete(cur, "delete_done", done)
            await _delete(cur, "attempts_forget", dead + done)
            return dead + done

        return await self._among(ids, f"a delete of {count_of(len(ids), 'row')}", delete)

    async def prune(self, before_us: int, limit: int) -> int:
        async def prune(cur: Cursor) -> int:
            await cur.execute(SQL["prunable"], (before_us, limit))
            gone = [int(r[0]) for r in await cur.fetchall()]
            await _delete(cur, "delete_done", gone)
            await _delete(cur, "attempts_forget", gone)  # with their rows
            return len(gone)

        return await self._db.run(prune, "a prune of done rows", transaction=True)

    async def pause(self, kind: str, at_us: int) -> bool:
        async def pause(cur: Cursor) -> bool:
            try:
                await cur.execute(SQL["pause"], (kind, at_us))
            except Exception as error:
                if is_dup(error):
                    return False  # paused already
                raise
            return True

        return await self._db.run(pause, "a pause")

    async def resume(self, kind: str) -> bool:
        async def resume(cur: Cursor) -> bool:
            await cur.execute(SQL["resume"], (kind,))
            return _changed(cur) == 1

        return await self._db.run(resume, "a resume")

    # ---------------------------------------------------------------- the worker registry

    async def register(self, entry: WorkerEntry) -> None:
        params = entry_params(entry)

        async def register(cur: Cursor) -> None:
            await cur.execute(SQL["worker_register"], params)

        await self._db.run(register, "a worker's entry in the registry")

    async def beat(
        self,
        entry_id: str,
        now_us: int,
        running: Sequence[int],
        renew_until_us: int | None,
        worker: str,
        forget_before_us: int,
    ) -> bool:
        ids = [int(n) for n in running]

        async def beat(cur: Cursor) -> bool:
            # One transaction: the renewal is one statement whatever the number of rows.
            if renew_until_us is not None and ids:
                renew = {"until": renew_until_us, "worker": worker}
                await cur.execute(*spelled(SQL["worker_renew"], renew, ids=ids))
            forget = {"forget_before": forget_before_us, "id": entry_id}
            await cur.execute(SQL["worker_forget"], forget)
            beat = {"now": now_us, "running": _json_ids(ids), "id": entry_id}
            await cur.execute(SQL["worker_beat"], beat)
            return _changed(cur) == 1

        return await self._db.run(beat, "a worker's beat", transaction=True)

    async def unregister(self, entry_id: str) -> None:
        async def unregister(cur: Cursor) -> None:
            await cur.execute(SQL["worker_unregister"], (entry_id,))

        await self._db.run(unregister, "a worker's leaving the registry")

    async def workers(self) -> list[WorkerEntry]:
        return [worker_entry(row) for row in await self._all(SQL["workers"])]

    async def index_sizes(self) -> dict[str, int]:
        return {}

    async def rebuild_swollen(self, before: Mapping[str, int] | None = None) -> list[Rebuilt]:
        return []  # (InnoDB reuses its pages; OPTIMIZE TABLE would block the queue)

    async def held_back(self) -> HeldBack | None:
        """The oldest transaction of another session whose read view holds back InnoDB's purge
        (of every database of the server); None when none does, or when the store's user may
        not see the server's transactions (it lacks the PROCESS privilege)."""

        async def look(cur: Cursor) -> Any:
            await cur.execute("SET SESSION time_zone = 'SYSTEM'", ())
            try:
                await cur.execute(SQL["held_back"], ())
                return await cur.fetchone()
            except MySQLError as error:
                if code_of(error) == NO_PROCESS:
                    return None
                raise
            finally:
                await cur.execute("SET SESSION time_zone = '+00:00'", ())

        found = await self._db.run(look, "a look at the server's transactions")
        if found is None:
            return None
        thread, age_s, state, query, user = found
        return HeldBack(
            age_s=max(0.0, float(age_s)),
            pid=int(thread),
            state=state,
            query=query,
            user=user,
            end_it=f"KILL {int(thread)}",
        )


def wake_folder(host: str, port: int, database: str) -> Path | None:
    """The folder of wake-up sockets of the processes on this host that serve `database` on
    the server at `host:port`: in this user's runtime folder (`XDG_RUNTIME_DIR`), else in a
    folder of this user's in the system's temporary folder; None where there are no Unix
    sockets."""
    if os.name != "posix":
        return None
    name = hashlib.sha256(f"{host}:{port}/{database}".encode()).hexdigest()[:24]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path(tempfile.gettempdir()) / f"nilo-job-{os.getuid()}"
    return base / f"mysql-{name}.wake"


def _own_folder(folder: Path) -> bool:
    """Make `folder` (this user's alone) where missing; whether it is this user's and open to
    nobody else, so that the sockets in it are this user's processes'."""
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        found = folder.lstat()
    except OSError:
        return False
    mine = found.st_uid == os.getuid() and stat.S_ISDIR(found.st_mode)
    return mine and not found.st_mode & 0o077


def _changed(cur: Cursor) -> int:
    """How many rows the statement just run on `cur` matched (the connection has
    CLIENT_FOUND_ROWS: an UPDATE that wrote a row's own values counts it too)."""
    return cast(int, cur.rowcount)


def _json_ids(ids: Sequence[int]) -> str:
    return "[" + ", ".join(str(n) for n in ids) + "]"


def _ends(n: int) -> str:
    """How a call that writes `n` ends is named in sentences."""
    return "the end of a row" if n == 1 else f"a group of {n} ends"


def _statements(script: str) -> list[str]:
    """The statements of `script`, one per `;` (none of the scripts has one in a string)."""
    return [statement for statement in script.split(";") if statement.strip()]


async def _read_schema(
    cur: Cursor, probe: bool = False
) -> tuple[set[str], _schema.Recorded, set[str]]:
    """The columns of `nilo_jobs`, what `nilo_jobs_version` records (None: no record), and the
    tables beside it that the database has.

    With `probe` (a check), each of the queue's tables that information_schema does not show
    (it hides a table the user may not read) is read, so that the server says why.

    Raises:
        MySQLError: the server refused a read (with `probe`: the user may not read one of the
            queue's tables).
    """
    await cur.execute(SQL["columns"], ())
    columns = {str(r[0]) for r in await cur.fetchall()}
    await cur.execute(SQL["tables"], ())
    tables = {str(r[0]) for r in await cur.fetchall()} & _schema.SIDE_TABLES
    if probe:
        for table in ([] if columns else ["nilo_jobs"]) + sorted(_schema.SIDE_TABLES - tables):
            try:
                await cur.execute(SQL["readable"].format(table=table), ())
            except MySQLError as error:
                if code_of(error) != NO_TABLE:
                    raise
    recorded: _schema.Recorded = None
    if "nilo_jobs_version" in tables:
        await cur.execute(SQL["version"], ())
        version, compatible = await cur.fetchone()
        if isinstance(version, int) and isinstance(compatible, int):
            recorded = (version, compatible)
    return columns, recorded, tables


async def _insert(cur: Cursor, row: NewRow) -> int | None:
    """Insert `row` on `cur`; its id, or None when another row of its kind holds its key."""
    if row.unique_key is None and row.lease_until is None:
        await cur.execute(
            SQL["push_queued"],
            (row.kind, row.payload.decode(), row.run_at, row.pushed_at, row.trace),
        )
        return int(cur.lastrowid)
    try:
        await cur.execute(SQL["push"], row_params(row))
    except Exception as error:
        if is_dup(error):
            return None
        raise
    return int(cur.lastrowid)


async def _claim_in(
    cur: Cursor,
    kinds: Sequence[str],
    now_us: int,
    lease_until_us: int,
    limit: int,
    worker: str | None,
    due_from_us: int | None = None,
) -> list[Claimed]:
    """The claim's statements, in the caller's transaction: the rows taken, each retaken one
    with the worker that held it (`Claimed.retaken_from`); with `due_from_us`, the queued rows
    due from then on only.

    The ids of the first `limit` rows it may take, read locking nothing (`claim_statement`),
    then those rows locked by their primary key (`claim_lock`), but those another claim holds or
    took since. While other claims hold some, it reads on past the ids it has seen, at most
    `CLAIM_ROUNDS` times; then one `take` of all it locked."""
    named = list(dict.fromkeys(kinds))  # each kind once
    statement = claim_statement(len(named), due_from_us is not None)
    seen: set[int] = set()
    locked: list[Any] = []
    for _ in range(CLAIM_ROUNDS):
        window = limit - len(locked) + len(seen)  # the first rows, past those seen
        await cur.execute(statement, claim_params(named, now_us, window, due_from_us))
        found = sorted(await cur.fetchall(), key=lambda r: (int(r[1]), int(r[0])))[:window]
        ids = [int(r[0]) for r in found if int(r[0]) not in seen][: limit - len(locked)]
        if not ids:
            break
        seen.update(ids)
        await cur.execute(*spelled(SQL["claim_lock"], {"now": now_us}, ids=ids))
        locked += await cur.fetchall()
        if len(locked) >= limit or len(found) < window:  # all it asked, or all there is
            break
    if not locked:
        return []
    locked.sort(key=lambda r: (int(r[4]), int(r[0])))
    take = {"lease_until": lease_until_us, "now": now_us, "worker": worker}
    await cur.execute(*spelled(SQL["take"], take, ids=[r[0] for r in locked]))
    return [_claimed(r) for r in locked]


def _claimed(r: Any) -> Claimed:
    """A row a claim took, from its columns (`claim_lock`): its attempts counting
    this claim, and the worker it was taken back from, if any."""
    attempts, run_at, snoozes = int(r[3]) + 1, int(r[4]), int(r[6])
    return Claimed(
        int(r[0]), r[1], r[2].encode(), attempts, run_at, r[5], None, snoozes, r[7], r[8]
    )


def _awaited(tx: object) -> str:
    """What `tx`, a connection that must be awaited, is called in a sentence."""
    if isinstance(tx, Connection):
        return "an asyncmy Connection"
    return f"a SQLAlchemy {type(tx).__qualname__}"


def _chunks(rows: Sequence[NewRow]) -> list[Sequence[NewRow]]:
    """`rows` in runs of at most `BULK_ROWS` rows and about `BULK_BYTES` of payload each, so
    that no statement nears the server's `max_allowed_packet`."""
    chunks: list[Sequence[NewRow]] = []
    start, size = 0, 0
    for i, row in enumerate(rows):
        if i > start and (i - start >= BULK_ROWS or size + len(row.payload) > BULK_BYTES):
            chunks.append(rows[start:i])
            start, size = i, 0
        size += len(row.payload)
    chunks.append(rows[start:])
    return chunks


async def _done_many(cur: Cursor, ends: list[Done]) -> None:
    """Apply `ends`, done ends without a next row or a lost attempt whose rows `fence` holds,
    in a statement or three whatever their number: those kept as history copied there, then
    every row deleted, and the attempts of those not kept with them."""
    if not ends:
        return
    kept = [end for end in ends if end.finished_at is not None]
    if kept:
        await cur.execute(*keep_many(kept))
    await _delete(cur, "delete_rows", [end.id for end in ends])
    await _delete(cur, "attempts_forget", [end.id for end in ends if end.finished_at is None])


async def _locked(cur: Cursor, name: str, ids: list[int]) -> list[int]:
    """The ids the locking read `name` finds among `ids`, locked until the transaction ends."""
    await cur.execute(*spelled(SQL[name], {}, ids=ids))
    return [int(r[0]) for r in await cur.fetchall()]


async def _delete(cur: Cursor, name: str, ids: list[int]) -> None:
    if ids:
        await cur.execute(*spelled(SQL[name], {}, ids=ids))
