"""The SQLite store's connections: one thread of its own, two connections in it, one for a
push written where it was made, and forks.

Every call of the SQLite store runs here, in one thread of the store's own, so the event loop
never waits on another process's lock or on a long write, with one exception: a single push,
which `here` writes on the caller's own thread when that costs no wait (see `here`). The main
connection (pushes, operator calls) commits with the store's `synchronous` (FULL by default: a
committed push survives a power cut); the workers' connection (claims, ends, hand-ons) commits
with `synchronous = NORMAL`, since losing one of those can only make a row run again. The
database is in WAL mode with a busy timeout; every write in the thread is a `BEGIN IMMEDIATE`
transaction (a single INSERT commits on its own), so a writer waits for the lock up front
instead of failing half-way, and a `database is locked` that still gets through is tried again
for up to the busy timeout. Text is read with `surrogateescape`, so a row another program
wrote with bytes that are not UTF-8 is read (and said to be unreadable by the store's readers)
rather than failing the whole statement. After a fork, the parent's thread and connections are
left alone. The file is opened, never created, except by `create_missing` (`may_create`): a
mistyped path is said, not made into an empty database. A file it creates is readable and
writable by its user alone (0600), and SQLite gives its WAL the same permissions; a file made
beforehand (shared with a group, say) keeps its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ..._base.errors import StoreUnavailable
from .. import _schema

T = TypeVar("T")

HERE_MOST_S = 0.002  # writes `here` slower than this on average send pushes to the thread
HERE_REST = 100  # how many: then `here` is tried again, its average forgotten
_clock = time.perf_counter  # how long a write `here` took (seconds)


_NO_SUCH_TABLE = re.compile(r"no such table: (?:\w+\.)?(\w+)")
_QUEUE_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'nilo_jobs'"


def missing_table(error: sqlite3.Error, conn: sqlite3.Connection) -> str | None:
    """The table SQLite said is missing on `conn` (lower case), or None when `error` is about
    something else: "nilo_jobs" when that is missing too, whichever table the statement met
    first."""
    found = _NO_SUCH_TABLE.search(str(error))
    if found is None:
        return None
    with contextlib.suppress(sqlite3.Error):
        if not conn.execute(_QUEUE_TABLE).fetchone():
            return "nilo_jobs"
    return found[1].lower()


def _text(data: bytes) -> str:
    """How the store reads text: UTF-8, with bytes that are not kept as surrogates."""
    return data.decode("utf-8", "surrogateescape")


WAL_KEPT_BYTES = 8 * 1024 * 1024
"""The size the WAL file is cut back to when SQLite restarts it after a checkpoint that
completed (`journal_size_limit`): a reader that held a transaction while the WAL grew does not
leave a file that large behind. Between checkpoints (every 1,000 pages, about 4 MB) the WAL
stays under it, so it is not cut in steady use."""


class Connections:
    """The thread and the connections of one SQLite store.

    Args:
        path: the database file, or ":memory:".
        busy_timeout_ms: how long a statement waits for another connection's write lock.
        synchronous: the main connection's `synchronous` pragma.
        target: the URL `nilo-job migrate` is given for this file, for sentences.
    """

    def __init__(self, path: str, busy_timeout_ms: int, synchronous: str, target: str) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.synchronous = synchronous
        self.target = target
        self.may_create = False  # whether opening may create the file (create_missing)
        self._conn: sqlite3.Connection | None = None
        self._work_conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        # The connection of `here`: whichever thread takes the lock first uses it.
        self._here_conn: sqlite3.Connection | None = None
        self._here_lock = threading.Lock()
        self._here_rest = 0  # pushes left to send to the thread after slow writes here
        self._here_mean_s = 0.0  # the writes' moving average (the last ~16 count)

    async def call(self, fn: Callable[[sqlite3.Connection], T], *, work: bool = False) -> T:
        """`fn(connection)` in the store's thread; `work` picks the workers' connection.

        The workers' connection (claims, ends, hand-ons) commits with `synchronous = NORMAL`:
        in WAL mode that survives a crash of the process, and a power cut can lose only its
        last commits, which can only make a row run again (at least once allows it). Pushes
        and operator calls use the main connection and its `synchronous` (FULL by default).
        """
        if self._pid != os.getpid():
            # A forked child: the parent's thread is not here, and its connections are not
            # ours to use or close. Start afresh.
            self._pid, self._executor = os.getpid(), None
            self._conn = self._work_conn = self._here_conn = None
            self._here_lock = threading.Lock()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="nilo-job-sqlite")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._with_conn, fn, work)

    def here(self, fn: Callable[[sqlite3.Connection], T]) -> T | None:
        """`fn(connection)` on the caller's own thread, or None (not run) when that would mean a
        wait; the caller then goes to the store's thread with `call`.

        For a single push: one `INSERT`, a statement that commits on its own, costs less than the
        hop to the store's thread and back (two thread wake-ups), so it is written where it was
        made, with the main connection's `synchronous` (FULL by default: as durable as a push
        in the thread). It is never a wait on someone else: the connection has no busy timeout,
        so a write lock held by another connection or process makes it give up at once, as does
        this connection being in use by another thread; and when its writes take longer than
        `HERE_MOST_S` on average (a slow or busy disk), the next `HERE_REST` pushes go to the
        store's thread. (The checkpoint SQLite runs every 1,000 pages of log is done by
        whichever connection commits then; for a queue's few pages it takes a millisecond or
        two.) Any error gives up too (nothing was written: the statement is all or nothing),
        and the store's thread runs `fn` again and says what went wrong. `fn` must not return
        None.
        """
        if self.path == ":memory:" or self._pid != os.getpid() or self._conn is None:
            return None  # a private database lives in the thread's connection; a fork; not open
        if not self._here_lock.acquire(blocking=False):
            return None
        try:
            if self._here_rest > 0:
                self._here_rest -= 1
                return None
            began = _clock()
            try:
                if self._here_conn is None:
                    self._here_conn = self._connect(self.synchronous, here=True)
                answer = fn(self._here_conn)
            except (sqlite3.Error, StoreUnavailable):
                return None
            self._here_mean_s += (_clock() - began - self._here_mean_s) / 16
            if self._here_mean_s > HERE_MOST_S:
                self._here_rest, self._here_mean_s = HERE_REST, 0.0
            return answer
        finally:
            self._here_lock.release()

    def _with_conn(self, fn: Callable[[sqlite3.Connection], T], work: bool) -> T:
        if self._conn is None:
            self._conn = self._connect(self.synchronous)
        conn = self._conn
        if work and self.path != ":memory:":  # one private database has one connection
            if self._work_conn is None:
                self._work_conn = self._connect("NORMAL")
            conn = self._work_conn
        try:
            return fn(conn)
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.IntegrityError | sqlite3.ProgrammingError):
                raise
            text = str(error)
            if (missing := missing_table(error, conn)) is not None:  # the one SQLite named
                raise _schema.no_such_table(self.path, self.target, missing) from error
            if "no such column" in text or "has no column named" in text:
                raise _schema.older(self.path, self.target, f"below {_schema.VERSION}") from error
            if "locked" in text or "busy" in text:
                raise StoreUnavailable(
                    f"SQLite at {self.path} stayed locked for {self.busy_timeout_ms / 1_000:g} s: "
                    "another connection holds a write transaction on it. If that is your own "
                    "open transaction, push through it: jobs.push_in(conn, value)"
                ) from error
            raise StoreUnavailable(f"SQLite at {self.path}: {error}") from error

    def _connect(self, synchronous: str, *, here: bool = False) -> sqlite3.Connection:
        """A connection with the store's settings; `here`: for `here`, with no busy timeout and
        no `journal_mode` to set (the thread's connection set WAL, which the file keeps)."""
        if self.path != ":memory:" and not os.path.isfile(self.path):
            if not self.may_create:
                raise _schema.no_file(self.path, self.target)
            _create_private(self.path)
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self.busy_timeout_ms / 1_000,
            )
            # Text that is not UTF-8 (a row some other program wrote) is read, not a failure of
            # the whole statement: each reader says what was wrong with the row.
            conn.text_factory = _text
            if here:
                conn.execute("PRAGMA busy_timeout = 0")
            else:
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
                if self.path != ":memory:":
                    self.retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL"))
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            conn.execute(f"PRAGMA journal_size_limit = {WAL_KEPT_BYTES}")
        except sqlite3.Error as error:
            raise StoreUnavailable(f"cannot open SQLite database {self.path}: {error}") from error
        return conn

    def retry_busy(self, fn: Callable[[], T]) -> T:
        """`fn`, again after a short pause while SQLite says the file is busy or locked, for up
        to the busy timeout in all (SQLite's own busy handler does most of the waiting)."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1_000
        pause = 0.001
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as error:
                text = str(error)
                if ("locked" not in text and "busy" not in text) or time.monotonic() > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.05)

    def write(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` inside `BEGIN IMMEDIATE … COMMIT`, rolled back on any error."""

        def attempt() -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        return self.retry_busy(attempt)

    async def close(self) -> None:
        """Close the connections and the thread; the next call opens them again."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        with self._here_lock:
            here, self._here_conn = self._here_conn, None
            if here is not None and self._pid == os.getpid():
                here.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(executor, self._close_conn)
        executor.shutdown(wait=True)

    def _close_conn(self) -> None:
        for conn in (self._conn, self._work_conn):
            if conn is not None:
                conn.close()
        self._conn = self._work_conn = None


def _create_private(path: str) -> None:
    """Create the empty database file `path` for its user alone (0600), unless it exists."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    except OSError as error:
        raise StoreUnavailable(f"cannot create SQLite database {path}: {error}") from error
    os.close(fd)
