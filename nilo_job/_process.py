"""Which process this is: its pid, read without a system call, and "host:pid" of the worker
that claimed a row, as rows record it."""

from __future__ import annotations

import os
import socket

_pid = os.getpid()
_known: tuple[int, str] | None = None


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def pid() -> int:
    """This process's id, as `os.getpid()` answers it, without its system call: kept up to date
    in a forked child by `os.register_at_fork`. Parts that must notice a fork (a pool or a
    thread of the parent's is not the child's) compare it on every call."""
    return _pid


def worker() -> str:
    """ "host:pid" of this process (read again after a fork, when the pid changes)."""
    global _known
    if _known is None or _known[0] != _pid:
        _known = (_pid, f"{socket.gethostname()}:{_pid}")
    return _known[1]
