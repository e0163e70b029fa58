"""Which process this is: "host:pid" of the worker that claimed a row, as rows record it."""

from __future__ import annotations

import os
import socket

_known: tuple[int, str] | None = None


def worker() -> str:
    """ "host:pid" of this process (read again after a fork, when the pid changes)."""
    global _known
    pid = os.getpid()
    if _known is None or _known[0] != pid:
        _known = (pid, f"{socket.gethostname()}:{pid}")
    return _known[1]
