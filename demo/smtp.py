"""A real SMTP server on loopback (aiosmtpd) that keeps what it accepts in a Maildir.

It is a deliberately unreliable mail provider, deterministic so that runs can be compared:

- an address whose local part starts with `bounce-`, or at the domain `invalid.example`, is
  refused for good at RCPT: `550 5.1.1`;
- a recipient's first five tries are each answered `421 4.3.0` (try later) with a chance of
  about one in five, decided by a hash of the address and the try's number, so every good
  address gets through well inside `SendWelcome`'s nine attempts;
- everything else is accepted and written to the Maildir.
"""

from __future__ import annotations

import hashlib
import mailbox
import socket
import threading
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

HOST = "127.0.0.1"
TEMPORARY_PERCENT = 20
TEMPORARY_TRIES = 5  # after this many tries a good address is never deferred again


def refuses(address: str) -> bool:
    """Whether the server refuses `address` for good."""
    local, _, domain = address.lower().rpartition("@")
    return local.startswith("bounce-") or domain == "invalid.example"


def defers(address: str, try_number: int) -> bool:
    """Whether try number `try_number` (1-based) for `address` is answered 421."""
    if try_number > TEMPORARY_TRIES:
        return False
    digest = hashlib.sha256(f"{address.lower()}#{try_number}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 100 < TEMPORARY_PERCENT


class Inbox:
    """The aiosmtpd handler: decides at RCPT, stores at DATA, counts everything.

    The counters are written by the server's thread and read by the demo's; each is one int.
    """

    def __init__(self, maildir: Path) -> None:
        self.maildir = mailbox.Maildir(maildir, create=True)
        self.tries: dict[str, int] = {}
        self.attempts = 0  # RCPT commands seen: one per delivery attempt
        self.deferred = 0  # answered 421
        self.refused = 0  # answered 550
        self.accepted = 0  # messages stored
        self._lock = threading.Lock()

    async def handle_RCPT(  # aiosmtpd's hook names
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        with self._lock:
            self.attempts += 1
            try_number = self.tries[address] = self.tries.get(address, 0) + 1
            if refuses(address):
                self.refused += 1
                return f"550 5.1.1 <{address}>: no such mailbox here"
            if defers(address, try_number):
                self.deferred += 1
                return "421 4.3.0 too busy right now, try again later"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        content = envelope.original_content or envelope.content
        self.maildir.add(content if isinstance(content, bytes) else content.encode())
        with self._lock:
            self.accepted += 1
        return "250 2.0.0 stored"


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class MailServer:
    """`Inbox` served on 127.0.0.1 at a free port, in a thread of its own."""

    def __init__(self, maildir: Path) -> None:
        self.maildir = maildir
        self.inbox = Inbox(maildir)
        self.port = 0
        self._controller: Any = None

    def start(self) -> None:
        for _ in range(5):  # the port found free may be taken before the server binds it
            port = free_port()
            controller = Controller(self.inbox, hostname=HOST, port=port, ready_timeout=10)
            try:
                controller.start()
            except OSError:
                continue
            self.port, self._controller = port, controller
            return
        raise RuntimeError(f"could not start the SMTP server on {HOST}")

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None


def stored(maildir: Path) -> tuple[int, int]:
    """How many messages the Maildir holds, and to how many distinct recipients."""
    box = mailbox.Maildir(maildir, create=False)
    recipients: set[str] = set()
    count = 0
    for message in box:
        count += 1
        recipients.add(str(message["To"]).lower())
    return count, len(recipients)
