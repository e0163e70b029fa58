"""Wake-ups between processes of one host for a store without NOTIFY (SQLite, and MySQL or
MariaDB between processes of one host): a datagram to each serving process.

SQLite has no NOTIFY, so a row pushed by a web process would wait for a worker process's next
poll. Instead, every serving process keeps a Unix datagram socket in a folder beside the
database file (`app.db` → `app.db.wake/`), named after its pid; a process that committed a push
sends each of them one datagram holding the row's due time (µs), and the worker's event loop,
which waits on that socket with no timer and no thread, wakes its claim loop.

A signal is only a hint, never the row: a datagram lost (a full socket buffer, a folder the
pusher cannot read, a file system without Unix sockets) costs at most the worker's poll, which
still runs. A socket left by a worker that died (SIGKILL) refuses the datagram; the pusher then
removes it. The folder is listed again only when its modification time changes (or changed so
recently that a second change could share its timestamp), so a push pays a `stat` and one
`sendto` per serving process. A push that finds no folder (nobody serves this file) does not
look again for `MISSING_S`; a worker, once its socket is bound, claims at once and again
`MISSING_S` later, so a row pushed meanwhile waits at most that long, never for the poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("nilo_job")

_NONE = "no wake-ups between processes (%s); rows pushed by other processes start at the poll"
_PATH_MOST = 100  # bytes of a Unix socket's path that every platform takes (108 on Linux)
MISSING_S = 0.05  # a missing folder is looked for again after this long (seconds)
_RACY_NS = 20_000_000  # a folder changed this recently is listed again (coarse timestamps)


def folder_of(db_path: str) -> Path | None:
    """The folder of wake-up sockets beside the database file `db_path`; None for ":memory:"."""
    if db_path in ("", ":memory:") or db_path.startswith("file:"):
        return None
    return Path(os.path.abspath(db_path) + ".wake")


async def listen(folder: Path, wake: Callable[[int | None], None]) -> None:
    """Keep a socket in `folder` and call `wake(run_at)` for every datagram, until cancelled.

    Returns at once (with a log line) when no socket can be made there: the queue then finds
    other processes' rows at its poll.
    """
    name = folder / f"{os.getpid()}-{secrets.token_hex(4)}.sock"
    sock = _bound(folder, name)
    if sock is None:
        return
    loop = asyncio.get_running_loop()

    def readable() -> None:
        while True:
            try:
                data = sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            wake(_due(data))

    loop.add_reader(sock.fileno(), readable)
    # Rows pushed before the socket was there: now, and after MISSING_S for those whose pusher
    # had just found no folder (see Signals).
    wake(None)
    again = loop.call_later(MISSING_S, wake, None)
    try:
        await asyncio.Future()  # until cancelled
    finally:
        again.cancel()
        loop.remove_reader(sock.fileno())
        sock.close()
        with contextlib.suppress(OSError):
            name.unlink()


def _bound(folder: Path, name: Path) -> socket.socket | None:
    if len(os.fsencode(name)) > _PATH_MOST:
        log.info(
            "no wake-ups between processes for %s: its path is too long for a Unix socket; "
            "rows pushed by other processes start at the poll",
            folder.with_suffix(""),
        )
        return None
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        open_to = _open_to_others(folder)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    except (OSError, AttributeError) as error:
        log.info(
            "no wake-ups between processes (%s); rows pushed elsewhere start at the poll", error
        )
        return None
    if open_to is not None:
        sock.close()
        log.warning(
            "no wake-ups between processes: the folder %s is %s, so another local user could "
            "remove or replace its sockets; it is left unused, and rows pushed elsewhere start "
            "at the poll. Remove it (nilo-job makes it again, for this user alone) or "
            "`chmod o-rwx` it",
            folder, open_to,
        )  # fmt: skip
        return None
    try:
        sock.bind(os.fsencode(name))
        sock.setblocking(False)
    except OSError as error:
        sock.close()
        log.info(
            "no wake-ups between processes (%s); rows pushed elsewhere start at the poll", error
        )
        return None
    return sock


def _open_to_others(folder: Path) -> str | None:
    """How `folder` is open to users other than this one and its group, in words, or None when
    it is not: its mode gives others any access, or it belongs to another user outside this
    process's groups."""
    found = folder.stat()
    if found.st_mode & 0o007:
        return f"open to every local user (mode {found.st_mode & 0o7777:04o})"
    if found.st_uid != os.getuid() and found.st_gid not in {os.getgid(), *os.getgroups()}:
        return f"owned by user {found.st_uid}, in a group this process is not in"
    return None


def _due(data: bytes) -> int | None:
    try:
        return int(data)
    except ValueError:
        return None


class Signals:
    """The pushing side: one datagram to every other serving process's socket in `folder`.

    Safe from any thread (the store's, after a commit; `Jobs.wake` from the caller's).
    """

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._where = None if folder is None else os.fsencode(folder)  # stat'ed at every send
        self._lock = threading.Lock()
        self._seen: int | None = None  # the folder's mtime when it was last listed
        self._peers: list[bytes] = []
        self._sock: socket.socket | None = None
        self._pid = 0
        self._missing_until = 0.0  # (monotonic s) no folder was found: no look before then

    def send(self, run_at: int | None) -> None:
        """Tell every serving process on this file that a row due at `run_at` (µs; None: now)
        was committed. Never raises, never blocks."""
        if self.folder is None:
            return
        if self._missing_until and time.monotonic() < self._missing_until:
            return  # nobody served this file a moment ago (a new worker claims twice)
        with self._lock:
            self._send(run_at)

    def _send(self, run_at: int | None) -> None:
        assert self.folder is not None
        assert self._where is not None
        try:
            mtime = os.stat(self._where).st_mtime_ns
        except OSError:
            self._missing_until = time.monotonic() + MISSING_S
            return  # nobody serves this file with wake-ups (yet)
        self._missing_until = 0.0
        pid = os.getpid()
        if pid != self._pid:  # first use, or a forked child: a socket of its own
            self._sock, self._pid, self._seen = None, pid, None
        if mtime != self._seen or time.time_ns() - mtime < _RACY_NS:
            self._list(pid)
            self._seen = mtime
        if not self._peers:
            return
        if self._sock is None:
            try:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
            except OSError:
                return
        data = b"" if run_at is None else str(run_at).encode()
        gone = []
        for peer in self._peers:
            try:
                self._sock.sendto(data, peer)
            except (BlockingIOError, InterruptedError):
                continue  # its buffer is full: it has wake-ups waiting already
            except (ConnectionRefusedError, FileNotFoundError):
                gone.append(peer)  # a worker that died and left its socket, or has left
            except OSError as error:
                if error.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
                    gone.append(peer)
        for peer in gone:
            self._peers.remove(peer)
            with contextlib.suppress(OSError):
                os.unlink(peer)

    def _list(self, pid: int) -> None:
        assert self.folder is not None
        mine = f"{pid}-"
        try:
            names = os.listdir(self.folder)
        except OSError:
            names = []
        self._peers = [
            os.fsencode(self.folder / name)
            for name in names
            if name.endswith(".sock") and not name.startswith(mine)
        ]

    def close(self) -> None:
        """Close the sending socket (it is made again on the next send)."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
