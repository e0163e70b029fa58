"""The demo's queue: one kind of job, `SendWelcome`, and the services its run asks for.

The worker process imports this module by name:

    nilo-job worker demo.app:jobs --workers 4

`jobs` reads two settings from the environment when the module is imported: `NILO_DEMO_DB`, the
SQLite file that holds both the users and the queue (default `demo.db` in the current directory),
and `NILO_DEMO_SMTP_PORT`, the port of the mail server on 127.0.0.1 (default 8025).
"""

from __future__ import annotations

import os
import smtplib
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import formataddr

import nilo_job as job

SMTP_HOST = "127.0.0.1"
SENDER = formataddr(("nilo-job demo", "welcome@example.com"))


class TemporaryFailure(Exception):
    """The mail server said "not now" (a 4xx reply) or dropped the line: try again later."""


class NoSuchAddress(Exception):
    """The mail server refused the address for good (a 5xx reply): no retry can help."""


@dataclass(frozen=True, slots=True)
class User:
    id: int
    email: str
    name: str
    welcomed_at: str | None


@dataclass(frozen=True, slots=True)
class Users:
    """The application's own table, `users`, in the same SQLite file as the queue."""

    path: str

    def _connect(self) -> sqlite3.Connection:
        # Autocommit: each statement is its own transaction, so the write below takes the lock
        # (waiting up to `timeout` for the worker's own claims) without holding a read snapshot.
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def find(self, user_id: int) -> User | None:
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT id, email, name, welcomed_at FROM users WHERE id = ?", (user_id,)
            ).fetchone()
        finally:
            conn.close()
        return None if row is None else User(*row)

    def mark_welcomed(self, user_id: int, attempts: int) -> None:
        conn = self._connect()
        try:
            conn.execute(
                "UPDATE users SET welcomed_at = ?, welcome_attempts = ? "
                "WHERE id = ? AND welcomed_at IS NULL",
                (datetime.now(UTC).isoformat(timespec="milliseconds"), attempts, user_id),
            )
        finally:
            conn.close()


@dataclass(frozen=True, slots=True)
class Mailer:
    """Plain SMTP to one server, translating its replies into the two errors the job knows."""

    host: str
    port: int
    timeout_s: float = 10.0

    def send(self, to: str, subject: str, body: str) -> None:
        """Hand one message to the server.

        Raises:
            TemporaryFailure: a 4xx reply (421 included), a dropped connection, or no server.
            NoSuchAddress: a 5xx reply.
        """
        message = EmailMessage()
        message["From"] = SENDER
        message["To"] = to
        message["Subject"] = subject
        message.set_content(body)
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout_s) as smtp:
                smtp.send_message(message)
        except smtplib.SMTPRecipientsRefused as refused:
            # The one recipient's reply; smtplib closes the connection itself on a 421.
            code, reply = next(iter(refused.recipients.values()))
            raise _by_code(code, reply) from None
        except smtplib.SMTPResponseException as error:  # sender refused, data refused, …
            raise _by_code(error.smtp_code, error.smtp_error) from None
        except (smtplib.SMTPServerDisconnected, OSError) as error:
            raise TemporaryFailure(f"{type(error).__name__}: {error}") from None


def _by_code(code: int, reply: bytes | str) -> Exception:
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else reply
    if 500 <= code < 600:
        return NoSuchAddress(f"{code} {text}")
    return TemporaryFailure(f"{code} {text}")


@dataclass(frozen=True, slots=True)
class Deps:
    """What a run may ask for, by type."""

    users: Users
    mail: Mailer


@dataclass
class SendWelcome:
    """Send one user the welcome mail; at least once by the queue, effectively once by `run`."""

    nilo_job = "send-welcome"
    # 9 attempts in all, 0.2 s, 0.4 s, 0.8 s, 1.6 s, then 3 s apart: a demo settles in seconds.
    retry = job.Retry(times=8, backoff=job.Exponential(from_ms=200, to_ms=3_000))
    final = (NoSuchAddress,)

    user_id: int
    email: str

    def run(self, tick: job.Tick, users: Users, mail: Mailer) -> None:
        user = users.find(self.user_id)
        if user is None or user.welcomed_at is not None:
            # Gone, or welcomed by an earlier run whose end never reached the queue (a worker
            # that died after sending, a lease that ran out): the queue may call us twice.
            return
        first = user.name.split()[0]
        mail.send(
            formataddr((user.name, user.email)),
            f"Welcome, {first}!",
            f"Hello {first},\n\nthanks for signing up. This mail was sent by a nilo-job worker "
            f"on attempt {tick.attempts} (row {tick.id}).\n\n-- the nilo-job demo\n",
        )
        users.mark_welcomed(self.user_id, tick.attempts)


def build(db_path: str | None = None, smtp_port: int | None = None) -> job.Jobs:
    """The demo's queue over `db_path`, mailing through 127.0.0.1:`smtp_port`.

    Either argument left out is read from the environment (see the module's docstring).
    """
    path = db_path if db_path is not None else os.environ.get("NILO_DEMO_DB", "demo.db")
    port = (
        smtp_port if smtp_port is not None else int(os.environ.get("NILO_DEMO_SMTP_PORT", "8025"))
    )
    return job.Jobs(
        kinds=[SendWelcome],
        store=job.Table(f"sqlite:///{path}"),
        deps=Deps(users=Users(path), mail=Mailer(SMTP_HOST, port)),
        workers=4,
        poll_ms=100,  # retries are due 0.2 s after a failure: look for them often
        timeout_ms=15_000,  # so a row of a killed worker is taken again after 16 s, not 61 s
    )


jobs = build()
