"""The SQLite store: `job.Table("sqlite:///path")`, the queue in a file beside your own tables.

Its calls run in one thread of the store's own, so the event loop never waits on another
process's lock (`connections`: the thread, its connections, WAL, the busy timeout,
forks), except a single push, which is written on the caller's thread when the write lock is
free at once (one INSERT costs less than the hop to the thread); this module holds the
statements and what they answer. A claim is one `UPDATE … RETURNING` that can take
several rows, after a read of the expired leases it may take back and who held them (`expired`:
SQLite's RETURNING answers only what the update wrote), in one write transaction (with kinds
that have a concurrency limit, one count and one such claim per limited kind come first, in the
same transaction). Several processes may share one file:
the write lock serialises their claims, and a lost race is a wait, never a "database is locked"
for you.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from ..._base.bounds import INT32_MAX, PAYLOAD_BYTES, Span, whole
from ..._base.errors import Refusal
from ..._base.values import Stats
from .. import _schema, _sql
from .._sql import (
    attempt_of,
    attempt_values,
    claimed_row,
    count_statement,
    dead_row,
    death_values,
    end_statement,
    entry_params,
    find_statement,
    keep_values,
    lost_values,
    row_view,
    unwrap_django,
    worker_entry,
)
from .._target import shown
from .._wake import Signals, folder_of, listen
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
from .connections import Connections, missing_table

T = TypeVar("T")

SQL = _sql.load("nilo_job.store.sqlite")
_MIN_VERSION = (3, 35, 0)  # UPDATE … RETURNING and ON CONFLICT DO NOTHING RETURNING

BUSY_MS = Span(1, INT32_MAX, "whole milliseconds", "SQLite keeps its busy timeout in 32 bits")
"""`busy_timeout_ms`: SQLite takes a larger one silently as 0, no wait at all."""

ACCEPTED_TX = (
    "a sqlite3.Connection to the same database file, inside a transaction, or Django's "
    "connection inside transaction.atomic() "
    "(a PostgreSQL table also accepts psycopg and SQLAlchemy connections and sessions)"
)


def path_from_url(url: str) -> str:
    """The file of a `sqlite:///relative.db`, `sqlite:////absolute.db` or `sqlite:///:memory:`.

    Raises:
        Refusal: the URL has no path.
    """
    rest = url.removeprefix("sqlite://")
    if not rest.startswith("/") or rest == "/":
        raise Refusal(
            f"job.Table({shown(url)!r}): write sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    return rest[1:].split("?", 1)[0]


class SqliteTable:
    """The `nilo_jobs` table in a SQLite file.

    Args:
        path: the database file (created if missing), or ":memory:" for one connection's
            private database.
        busy_timeout_ms: how long a statement waits for another process's write lock, from 1 to
            2,147,483,647 ms (about 24 days).
        synchronous: SQLite's `synchronous` pragma: "FULL" (the default) makes a committed push
            survive a power cut; "NORMAL" is faster in WAL mode and survives a crash of the
            process but may lose the last commits on a power cut.
        max_payload: the largest payload one row may carry, in bytes of JSON (1 MiB by
            default; from 1 to 1,000,000,000): the queue refuses a larger push with
            `PayloadTooLarge`, before this store is called.

    Raises:
        Refusal: the SQLite library is older than 3.35, or a setting is out of range.
    """

    def __init__(
        self,
        path: str,
        *,
        busy_timeout_ms: int = 10_000,
        synchronous: str = "FULL",
        max_payload: int = MAX_PAYLOAD,
    ) -> None:
        if sqlite3.sqlite_version_info < _MIN_VERSION:
            raise Refusal(
                f"SQLite {sqlite3.sqlite_version} is too old for job.Table: it needs 3.35 or "
                "newer (UPDATE … RETURNING)"
            )
        if synchronous.upper() not in {"FULL", "NORMAL", "EXTRA"}:
            raise Refusal(f"synchronous={synchronous!r}: FULL, NORMAL or EXTRA")
        whole(busy_timeout_ms, BUSY_MS, "job.Table(..., busy_timeout_ms={})", "busy_timeout_ms")
        whole(max_payload, PAYLOAD_BYTES, "job.Table(..., max_payload={})", "max_payload")
        self.max_payload = max_payload
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.synchronous = synchronous.upper()
        self._db = Connections(path, busy_timeout_ms, self.synchronous, self._target())
        self._signals = Signals(folder_of(path))
        self._stuck_since: float | None = None  # the first look at a checkpoint held back

    def __repr__(self) -> str:
        return f"job.Table('{self._target()}')"

    def _target(self) -> str:
        """The URL of this file, as `nilo-job migrate` takes it."""
        return f"sqlite:///{self.path}"

    @property
    def ddl(self) -> str:
        """The statements that create the table and its indexes, as text."""
        return SQL["create"]

    async def open(self) -> None:
        """Open the file's connection; a file that does not exist is left to the first call to
        say (or to `create_missing` to create)."""
        if self.path == ":memory:" or await asyncio.to_thread(os.path.isfile, self.path):
            await self._db.call(lambda conn: None)

    async def close(self) -> None:
        await self._db.close()
        self._signals.close()  # after the store's thread, which sends on it, has stopped

    async def ping(self) -> None:
        await self._db.call(lambda conn: conn.execute("SELECT 1").fetchone())

    async def now_us(self) -> int | None:
        return None  # one host: its clock is the queue's

    async def watch(self, wake: Callable[[int | None], None]) -> None:
        """Call `wake(run_at)` whenever another process commits a push to this file, until
        cancelled: a datagram to a socket of this process beside the file (`wake`)."""
        folder = folder_of(self.path)
        if folder is not None:
            await listen(folder, wake)

    def wake_others(self) -> None:
        """Wake the other processes serving this file now (a datagram to each): for a row your
        own transaction committed (`push_in`), which the store did not see. Safe from any
        thread; never raises. `Jobs.wake()` calls it."""
        self._signals.send(None)

    async def create_missing(self) -> None:
        """Create `nilo_jobs` and its indexes where missing, or bring an older table up to this
        version in place, keeping every row (idempotent, safe to race).

        Raises:
            StoreUnavailable: the table is from a newer nilo-job, or the file cannot be written.
        """

        def create(conn: sqlite3.Connection) -> None:
            columns = {r[0] for r in conn.execute(SQL["columns"])}
            steps = _schema.steps_from(columns, _recorded(conn, _tables(conn)), self.path)
            _script(conn, SQL["create"])  # (what is missing, whatever the record says)
            if steps is None:
                return  # newer than this version, and fine as it is
            for step in steps:
                _script(conn, SQL[step])
            conn.execute(SQL["forget_version"])
            conn.execute(SQL["set_version"], (_schema.VERSION, _schema.COMPATIBLE_FROM))

        self._db.may_create = True
        await self._db.call(lambda conn: self._db.write(conn, create))

    async def check(self) -> None:
        def read(conn: sqlite3.Connection) -> tuple[set[str], _schema.Recorded, set[str]]:
            tables = _tables(conn)
            return {r[0] for r in conn.execute(SQL["columns"])}, _recorded(conn, tables), tables

        columns, recorded, tables = await self._db.call(read)
        _schema.check(self.path, self._target(), columns, recorded, tables)

    # ---------------------------------------------------------------------------------- rows

    async def push(self, rows: Sequence[NewRow]) -> list[int | None]:
        if len(rows) == 1:  # written on this thread when that costs no wait (Connections.here)
            ids = self._db.here(lambda conn: _insert(conn, rows))
            if ids is not None:
                self._tell(rows, ids)  # committed: tell the other processes serving this file
                return ids

        def push(conn: sqlite3.Connection) -> list[int | None]:
            if len(rows) == 1:
                # One INSERT is its own transaction: no BEGIN and COMMIT to send around it.
                ids = self._db.retry_busy(lambda: _insert(conn, rows))
            else:
                ids = self._db.write(conn, lambda c: _insert(c, rows))
            self._tell(rows, ids)  # committed: tell the other processes serving this file
            return ids

        return await self._db.call(push)

    def _tell(self, rows: Sequence[NewRow], ids: Sequence[int | None]) -> None:
        """Signal the other serving processes of the queued rows just committed (a row claimed
        by its pusher's own worker, or one whose key was taken, needs nobody)."""
        due = [row.run_at for row, row_id in zip(rows, ids, strict=True) if row_id is not None
               and row.lease_until is None]  # fmt: skip
        if due:
            self._signals.send(min(due))

    async def push_in(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        return self.push_in_now(tx, rows)

    def push_in_now(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        """`push_in`, in the caller's thread: a `sqlite3.Connection` is synchronous.

        Raises:
            Refusal: `tx` is no connection with an open transaction on this store's file.
        """
        tx = unwrap_django(tx)
        if not isinstance(tx, sqlite3.Connection):
            raise Refusal(
                f"push_in got a {type(tx).__qualname__}; this store accepts {ACCEPTED_TX}"
            )
        if not tx.in_transaction and (
            tx.isolation_level is None or getattr(tx, "autocommit", False) is True
        ):
            raise Refusal(
                "push_in got a sqlite3.Connection with no open transaction, so the row would "
                "commit on its own: run BEGIN first (or keep the default isolation_level)"
            )
        files = {row[1]: row[2] for row in tx.execute("PRAGMA database_list")}
        theirs = files.get("main") or ":memory:"
        if not _same_file(theirs, self.path):
            raise Refusal(
                f"push_in got a connection to {theirs!r}, and this queue's table is in "
                f"{self.path!r}: a transaction commits in one database only"
            )
        try:
            return _insert(tx, rows)
        except sqlite3.OperationalError as error:
            if (missing := missing_table(error, tx)) is not None:
                raise _schema.no_such_table(self.path, self._target(), missing) from error
            raise

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
        params = {
            "now": now_us,
            "lease_until": lease_until_us,
            "limit": limit,
            "kinds": json.dumps(list(kinds)),
            "worker": worker,
        }

        def claim(conn: sqlite3.Connection) -> list[Claimed]:
            if due_from_us is not None:
                queued = conn.execute(SQL["claim_from"], {**params, "from": due_from_us})
                return [claimed_row(r) for r in queued.fetchall()]
            return _claim_in(conn, params)

        claimed = await self._db.call(lambda conn: self._db.write(conn, claim), work=True)
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
        """`claim` with `limits`, in one write transaction, which no other claim shares: each
        limited kind's live leases counted, then at most its room claimed (the `claim`
        statement, for that kind alone), then the other kinds with what is left."""
        free, capped = limited(kinds, limits)
        params = {"now": now_us, "lease_until": lease_until_us, "worker": worker}

        def claim(conn: sqlite3.Connection) -> list[Claimed]:
            taken: list[Claimed] = []
            for kind, most in capped:
                (running,) = conn.execute(SQL["running"], {"now": now_us, "kind": kind}).fetchone()
                room = min(limit - len(taken), most - running)
                if room > 0:
                    some = {**params, "kinds": json.dumps([kind]), "limit": room}
                    taken += _claim_in(conn, some)
            if free and len(taken) < limit:
                rest = {**params, "kinds": json.dumps(free), "limit": limit - len(taken)}
                taken += _claim_in(conn, rest)
            return taken

        claimed = await self._db.call(lambda conn: self._db.write(conn, claim), work=True)
        claimed.sort(key=lambda row: (row.run_at, row.id))
        return claimed

    async def finish(self, ends: Sequence[End]) -> list[bool]:
        def apply(conn: sqlite3.Connection) -> list[bool]:
            applied = []
            for end in ends:
                lost = lost_values(end)
                if lost is not None:
                    conn.execute(SQL["lost"], lost)
                tried = attempt_values(end)
                if tried is not None:
                    conn.execute(SQL["attempt"], tried)
                if lost is not None or tried is not None:
                    conn.execute(SQL["attempts_trim"], {"id": end.id})
                if isinstance(end, Done) and end.finished_at is not None:
                    conn.execute(SQL["keep"], keep_values(end))
                ok = conn.execute(*_statement(end)).rowcount == 1
                if ok and isinstance(end, Done) and end.finished_at is None:
                    conn.execute(SQL["attempts_forget_one"], (end.id,))  # the row is gone
                if ok and isinstance(end, Died):
                    deaths = death_values(end)
                    conn.execute(SQL["death"], deaths)
                    conn.execute(SQL["deaths_trim"], deaths)
                if ok and end.then is not None:
                    _insert(conn, [end.then])
                applied.append(ok)
            return applied

        def finish(conn: sqlite3.Connection) -> list[bool]:
            applied = self._db.write(conn, apply)
            back = [e.run_at for e, ok in zip(ends, applied, strict=True) if ok
                    and isinstance(e, Released)]  # fmt: skip
            if back:  # rows a stopping worker gave back: another process may take them now
                self._signals.send(min(back))
            return applied

        return await self._db.call(finish, work=True)

    async def hand_on(self, row_id: int, attempts: int, then: NewRow) -> bool:
        def hand_on(conn: sqlite3.Connection) -> bool:
            if conn.execute(SQL["release_key"], (row_id, attempts)).rowcount != 1:
                return False
            _insert(conn, [then])
            return True

        return await self._db.call(lambda conn: self._db.write(conn, hand_on), work=True)

    async def cancel(self, row_id: int) -> bool:
        def cancel(conn: sqlite3.Connection) -> bool:
            if conn.execute(SQL["cancel"], (row_id,)).rowcount != 1:
                return False
            conn.execute(SQL["attempts_forget_one"], (row_id,))
            return True

        return await self._db.call(lambda conn: self._db.write(conn, cancel))

    async def _ids(self, name: str, ids: Sequence[int], *first: object) -> list[int]:
        """Run the statement `name` over `ids` in one write transaction; the ids it returned."""
        params = (*first, json.dumps(list(ids)))
        return await self._db.call(
            lambda conn: self._db.write(
                conn, lambda c: [r[0] for r in c.execute(SQL[name], params).fetchall()]
            )
        )

    async def retry_many(self, ids: Sequence[int], now_us: int) -> list[int]:
        again = await self._ids("retry_many", ids, now_us)
        if again:
            self._signals.send(now_us)  # thread-safe and non-blocking: no hop to the thread
        return again

    async def cancel_many(self, ids: Sequence[int]) -> list[int]:
        data = json.dumps(list(ids))

        def cancel(conn: sqlite3.Connection) -> list[int]:
            gone = [r[0] for r in conn.execute(SQL["cancel_many"], (data,)).fetchall()]
            conn.execute(SQL["attempts_forget"], (json.dumps(gone),))
            return gone

        return await self._db.call(lambda conn: self._db.write(conn, cancel))

    async def delete_many(self, ids: Sequence[int]) -> list[int]:
        data = json.dumps(list(ids))

        def delete(conn: sqlite3.Connection) -> list[int]:
            gone = [r[0] for r in conn.execute(SQL["delete_dead"], (data,)).fetchall()]
            gone += [r[0] for r in conn.execute(SQL["delete_done"], (data,)).fetchall()]
            conn.execute(SQL["attempts_forget"], (json.dumps(gone),))
            return gone

        return await self._db.call(lambda conn: self._db.write(conn, delete))

    async def prune(self, before_us: int, limit: int) -> int:
        def prune(conn: sqlite3.Connection) -> int:
            gone = [r[0] for r in conn.execute(SQL["prune"], (before_us, limit)).fetchall()]
            conn.execute(SQL["attempts_forget"], (json.dumps(gone),))  # with their rows
            return len(gone)

        # On the workers' connection: a pruned row lost to a power cut is pruned again.
        return await self._db.call(lambda conn: self._db.write(conn, prune), work=True)

    async def pause(self, kind: str, at_us: int) -> bool:
        return await self._db.call(
            lambda conn: self._db.write(
                conn, lambda c: c.execute(SQL["pause"], (kind, at_us)).rowcount == 1
            )
        )

    async def resume(self, kind: str) -> bool:
        return await self._db.call(
            lambda conn: self._db.write(
                conn, lambda c: c.execute(SQL["resume"], (kind,)).rowcount == 1
            )
        )

    async def retry_dead(self, row_id: int, now_us: int) -> bool:
        def retry(conn: sqlite3.Connection) -> bool:
            again = self._db.write(
                conn, lambda c: c.execute(SQL["retry_dead"], (now_us, row_id)).rowcount == 1
            )
            if again:
                self._signals.send(now_us)
            return again

        return await self._db.call(retry)

    _db: Connections

    async def stats(self) -> Stats:
        row = await self._db.call(lambda conn: conn.execute(SQL["stats"]).fetchone())
        return Stats(row[0], row[1], row[2], row[3])

    async def dead_ones(self, limit: int) -> list[DeadRow]:
        params = (LISTED_CHARS + 1, limit)  # each payload's start (`listed`)
        rows = await self._db.call(lambda conn: conn.execute(SQL["dead_ones"], params).fetchall())
        return [dead_row(r) for r in rows]

    async def rows(self, state: str, limit: int) -> list[RowView]:
        return await self.find(Where(state=check_state(state)), None, limit)

    async def row(self, row_id: int) -> RowView | None:
        def read(conn: sqlite3.Connection) -> RowView | None:
            found = conn.execute(SQL["row"], {"id": row_id}).fetchone()
            if found is None:
                return None
            tried = conn.execute(SQL["attempts_of"], (row_id,)).fetchall()
            return row_view(found).with_attempts([attempt_of(r) for r in tried])

        return await self._db.call(read)

    async def find(self, where: Where, after: tuple[int, int] | None, limit: int) -> list[RowView]:
        query, params = find_statement(where, after, limit, postgres=False)
        found = await self._db.call(lambda conn: conn.execute(query, params).fetchall())
        return [row_view(r) for r in found]

    async def count(self, where: Where) -> int:
        query, params = count_statement(where, postgres=False)
        found = await self._db.call(lambda conn: conn.execute(query, params).fetchone())
        return int(found[0])

    async def paused(self) -> dict[str, int]:
        found = await self._db.call(lambda conn: conn.execute(SQL["paused"]).fetchall())
        return {_kind(kind): at for kind, at in found if isinstance(at, int)}

    async def ended(self, since_us: int) -> list[tuple[str, str, int, int]]:
        found = await self._db.call(
            lambda conn: conn.execute(SQL["ended"], {"since": since_us}).fetchall()
        )
        return [
            (_kind(kind), str(state), minute, n)
            for kind, state, minute, n in found
            if isinstance(minute, int) and isinstance(n, int)
        ]

    async def durations(self, kind: str, since_us: int, limit: int) -> list[int]:
        found = await self._db.call(
            lambda conn: conn.execute(SQL["durations"], (kind, since_us, limit)).fetchall()
        )
        return [r[0] for r in found]

    async def oldest_due(self, now_us: int) -> dict[str, int]:
        found = await self._db.call(
            lambda conn: conn.execute(SQL["oldest_due"], (now_us,)).fetchall()
        )
        oldest: dict[str, int] = {}
        for kind, at in found:
            if isinstance(at, int):
                name = _kind(kind)
                oldest[name] = min(at, oldest.get(name, at))
        return oldest

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]:
        params = {"key": key, "kinds": json.dumps(list(kinds))}
        found = await self._db.call(lambda conn: conn.execute(SQL["holding"], params).fetchall())
        return [row_view(r) for r in found]

    async def counts(self) -> dict[tuple[str, str], int]:
        found = await self._db.call(lambda conn: conn.execute(SQL["counts"]).fetchall())
        counts: dict[tuple[str, str], int] = {}
        for kind, state, n in found:
            key = (_kind(kind), str(state))
            counts[key] = counts.get(key, 0) + n
        return counts

    # ---------------------------------------------------------------- the worker registry

    async def register(self, entry: WorkerEntry) -> None:
        params = entry_params(entry)
        await self._db.call(
            lambda conn: self._db.write(conn, lambda c: c.execute(SQL["worker_register"], params)),
            work=True,
        )

    async def beat(
        self,
        entry_id: str,
        now_us: int,
        running: Sequence[int],
        renew_until_us: int | None,
        worker: str,
        forget_before_us: int,
    ) -> bool:
        ids = json.dumps(list(running))

        def beat(conn: sqlite3.Connection) -> bool:
            # One write transaction: the renewal is one statement whatever the number of rows.
            if renew_until_us is not None and running:
                renew = {"until": renew_until_us, "ids": ids, "worker": worker}
                conn.execute(SQL["worker_renew"], renew)
            conn.execute(SQL["worker_forget"], {"forget_before": forget_before_us, "id": entry_id})
            beat = {"now": now_us, "running": ids, "id": entry_id}
            return conn.execute(SQL["worker_beat"], beat).rowcount == 1

        return await self._db.call(lambda conn: self._db.write(conn, beat), work=True)

    async def unregister(self, entry_id: str) -> None:
        await self._db.call(
            lambda conn: self._db.write(
                conn, lambda c: c.execute(SQL["worker_unregister"], (entry_id,))
            ),
            work=True,
        )

    async def workers(self) -> list[WorkerEntry]:
        found = await self._db.call(lambda conn: conn.execute(SQL["workers"]).fetchall())
        return [worker_entry(row) for row in found]

    async def index_sizes(self) -> dict[str, int]:
        return {}

    async def rebuild_swollen(self, before: Mapping[str, int] | None = None) -> list[Rebuilt]:
        return []  # (SQLite reuses the free pages of its file)

    async def held_back(self) -> HeldBack | None:
        if self.path == ":memory:":
            return None

        def look(conn: sqlite3.Connection) -> tuple[bool, int | None]:
            _busy, frames, copied = self._db.retry_busy(
                lambda: conn.execute(SQL["held_back"]).fetchone()
            )
            try:
                wal = os.path.getsize(self.path + "-wal")
            except OSError:
                wal = None
            return frames < 0 or copied >= frames, wal  # (-1: not in WAL mode)

        done, wal = await self._db.call(look)
        now = time.monotonic()
        if done:
            self._stuck_since = None
            return None
        self._stuck_since = now if self._stuck_since is None else self._stuck_since
        return HeldBack(age_s=now - self._stuck_since, wal_bytes=wal)


def _kind(value: object) -> str:
    """A kind as another program may have written it, as text every reader can show: text that
    is not UTF-8 (read with surrogates) or a BLOB with its bad bytes escaped (`m\\xff`), any
    other value as its `str`. Rows of one such kind are counted together under that name."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, str):
        if value.isascii():
            return value
        raw = value.encode("utf-8", "surrogateescape")
        return raw.decode("utf-8", "backslashreplace")
    return str(value)


def _tables(conn: sqlite3.Connection) -> set[str]:
    """The tables beside `nilo_jobs` (`_schema.SIDE_TABLES`) that the file has."""
    return {r[0] for r in conn.execute(SQL["tables"])} & _schema.SIDE_TABLES


def _recorded(conn: sqlite3.Connection, tables: set[str]) -> _schema.Recorded:
    """What `nilo_jobs_version` records, or None when there is no record (`tables`: those the
    file has)."""
    if "nilo_jobs_version" not in tables:
        return None
    version, compatible = conn.execute(SQL["version"]).fetchone()
    if not isinstance(version, int) or not isinstance(compatible, int):
        return None
    return version, compatible


def _script(conn: sqlite3.Connection, script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _insert(conn: sqlite3.Connection, rows: Sequence[NewRow]) -> list[int | None]:
    answers: list[int | None] = []
    for row in rows:
        claimed = row.lease_until is not None
        if row.unique_key is None and not claimed:
            cur = conn.execute(
                SQL["push_plain"],
                (row.kind, row.payload.decode(), row.run_at, row.pushed_at, row.trace),
            )
            answers.append(cur.lastrowid)
            continue
        found = conn.execute(
            SQL["push"],
            (
                row.kind,
                row.payload.decode(),
                "running" if claimed else "queued",
                row.run_at,
                1 if claimed else 0,
                row.unique_key,
                row.lease_until,
                row.pushed_at,
                row.pushed_at if claimed else None,
                row.worker if claimed else None,
                row.trace,
            ),
        ).fetchall()  # to the statement's end: its commit, when it is its own transaction
        answers.append(found[0][0] if found else None)
    return answers


def _claim_in(conn: sqlite3.Connection, params: Mapping[str, object]) -> list[Claimed]:
    """The `claim` statement with `params`, in the caller's write transaction: the rows taken,
    each retaken one with the worker that held it (`Claimed.retaken_from`), which the `expired`
    statement read just before."""
    held = dict(conn.execute(SQL["expired"], params).fetchall())
    taken = [claimed_row(r) for r in conn.execute(SQL["claim"], params).fetchall()]
    if not held:
        return taken
    return [
        row if row.id not in held else dataclasses.replace(row, retaken_from=held[row.id])
        for row in taken
    ]


def _same_file(a: str, b: str) -> bool:
    if a in ("", ":memory:") or b in ("", ":memory:"):
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _statement(end: End) -> tuple[str, tuple[object, ...]]:
    name, params = end_statement(end)
    return SQL[name], params
