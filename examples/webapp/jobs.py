"""The example app's background work: four kinds of job and the services their runs ask for.

    SendWelcome   the welcome mail, pushed in the sign-up's own transaction
    Remind        a reminder a day later, at most one queued per user (`unique`), movable
    Export        a CSV of the users, written in batches, reporting `progress` as it goes
    Nightly       a report of the day's sign-ups at three in the morning (UTC), on a schedule

Everything lives in one SQLite file: the app's tables (`SCHEMA`) beside the queue's `nilo_jobs`,
so a push can commit with the user it is about. Mail is not sent anywhere: `MailboxMailer`
delivers into the `mailbox` table, which `GET /mailbox` shows (a development mail sink).

Every run is safe to call twice, because the queue is at least once: a mail is keyed, so a second
delivery of the same key is a no-op; an export overwrites its own file; a report replaces its own
row.

A worker process of its own runs the same queue: `nilo-job worker examples.webapp.jobs:from_env`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import nilo_job as job

DAY_MS = 24 * 60 * 60 * 1_000
DAY_US = DAY_MS * 1_000
STATUS_TTL_S = 3_600  # how long `GET /exports/{id}` can see an export after its last change

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    id            INTEGER PRIMARY KEY,
    email         TEXT NOT NULL UNIQUE,
    created_at_us INTEGER NOT NULL,
    reminder_job  INTEGER             -- the queued Remind row of this user, if any
);
CREATE TABLE IF NOT EXISTS mailbox (
    id      INTEGER PRIMARY KEY,
    key     TEXT NOT NULL UNIQUE,     -- one mail per key, however often a run is called
    to_addr TEXT NOT NULL,
    subject TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS exports (
    job INTEGER PRIMARY KEY,          -- the Export row's id: what the client polls
    csv TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS reports (
    until_us INTEGER PRIMARY KEY,     -- the tick's due time; the report covers the day before it
    signups  INTEGER NOT NULL
);
"""


class NoSuchAddress(Exception):
    """The mail provider refused the address for good: no retry can help (a `final` error)."""


@dataclass(frozen=True, slots=True)
class User:
    id: int
    email: str
    created_at_us: int
    reminder_job: int | None


@dataclass(frozen=True, slots=True)
class Db:
    """The app's SQLite file: its own tables and, beside them, the queue's.

    Each method opens a connection of its own, so it may be called from any thread (a sync
    route runs in a thread pool, a sync `run` in a thread of its own).
    """

    path: str

    def connect(self) -> sqlite3.Connection:
        """A new connection; the default isolation level opens a transaction at the first write."""
        return sqlite3.connect(self.path, timeout=30)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed when the block ends, rolled back when it raises."""
        conn = self.connect()
        try:
            with conn:
                yield conn
        finally:
            conn.close()

    def create_missing(self) -> None:
        """Create the app's tables where missing (the queue's table is the queue's business)."""
        with self.transaction() as conn:
            conn.executescript(SCHEMA)

    def find_user(self, user_id: int) -> User | None:
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT id, email, created_at_us, reminder_job FROM users WHERE id = ?", (user_id,)
            ).fetchone()
        return None if row is None else User(*row)

    def users_after(self, after_id: int, limit: int) -> list[User]:
        """Up to `limit` users with an id above `after_id`, in id order (one export batch)."""
        with self.transaction() as conn:
            rows = conn.execute(
                "SELECT id, email, created_at_us, reminder_job FROM users WHERE id > ? "
                "ORDER BY id LIMIT ?",
                (after_id, limit),
            ).fetchall()
        return [User(*row) for row in rows]

    def forget_reminder(self, user_id: int, row_id: int) -> None:
        """The reminder `row_id` has gone out: the user has no queued reminder any more."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE users SET reminder_job = NULL WHERE id = ? AND reminder_job = ?",
                (user_id, row_id),
            )

    def count_signups(self, from_us: int, until_us: int) -> int:
        """Users created in [`from_us`, `until_us`), microseconds since the epoch."""
        with self.transaction() as conn:
            (n,) = conn.execute(
                "SELECT count(*) FROM users WHERE created_at_us >= ? AND created_at_us < ?",
                (from_us, until_us),
            ).fetchone()
        return int(n)

    def save_report(self, until_us: int, signups: int) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO reports (until_us, signups) VALUES (?, ?) "
                "ON CONFLICT (until_us) DO UPDATE SET signups = excluded.signups",
                (until_us, signups),
            )

    def reports(self) -> list[tuple[int, int]]:
        """(until_us, signups) of every nightly report, oldest first."""
        with self.transaction() as conn:
            rows = conn.execute("SELECT until_us, signups FROM reports ORDER BY until_us")
            return [(int(until), int(n)) for until, n in rows]

    def save_export(self, row_id: int, csv: str) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO exports (job, csv) VALUES (?, ?) "
                "ON CONFLICT (job) DO UPDATE SET csv = excluded.csv",
                (row_id, csv),
            )

    def export_csv(self, row_id: int) -> str | None:
        with self.transaction() as conn:
            row = conn.execute("SELECT csv FROM exports WHERE job = ?", (row_id,)).fetchone()
        return None if row is None else str(row[0])

    def mailbox(self) -> list[tuple[str, str]]:
        """(to, subject) of every mail delivered, in the order they were delivered."""
        with self.transaction() as conn:
            rows = conn.execute("SELECT to_addr, subject FROM mailbox ORDER BY id")
            return [(str(to), str(subject)) for to, subject in rows]


# runtime_checkable: job.Jobs compares the deps' types with issubclass when it reads the runs.
@runtime_checkable
class Mailer(Protocol):
    """What the runs send mail through; tests hand in their own."""

    def send(self, to: str, subject: str, *, key: str) -> None:
        """Deliver one mail at most once per `key`.

        Raises:
            NoSuchAddress: the address can never receive mail.
        """


@dataclass(frozen=True, slots=True)
class MailboxMailer:
    """Delivers into the `mailbox` table. Addresses under `.invalid` (a name reserved by RFC 2606
    for addresses that cannot work) are refused for good, as a provider's 550 would be."""

    db: Db

    def send(self, to: str, subject: str, *, key: str) -> None:
        if to.endswith(".invalid"):
            raise NoSuchAddress(f"550 no such domain: {to.rpartition('@')[2]}")
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO mailbox (key, to_addr, subject) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO NOTHING",
                (key, to, subject),
            )


class Pace:
    """How long an export rests between batches, so a big one leaves the database to others.

    Args:
        rest_s: seconds to rest after each batch.
    """

    def __init__(self, rest_s: float = 0.0) -> None:
        self.rest_s = rest_s

    async def between_batches(self) -> None:
        await asyncio.sleep(self.rest_s)


@dataclass(frozen=True, slots=True)
class Deps:
    """The services a run may ask for, answered by type."""

    db: Db
    mail: Mailer
    pace: Pace


@dataclass
class SendWelcome:
    """The welcome mail. The payload is the user's id: the address is read when the mail goes
    out, so an address corrected after a failure is the one a retried row uses."""

    nilo_job = "send-welcome"
    retry = job.Retry(times=5, backoff=job.Exponential(from_ms=1_000, to_ms=3_600_000))
    final = (NoSuchAddress,)

    user_id: int

    def run(self, db: Db, mail: Mailer) -> None:
        user = db.find_user(self.user_id)
        if user is None:
            return  # the account is gone: nothing to welcome
        mail.send(user.email, "Welcome", key=f"welcome:{user.id}")


@dataclass
class Remind:
    """A reminder, pushed a day ahead with `unique=f"remind:{user_id}"`; `/postpone` moves it."""

    nilo_job = "remind"
    retry = job.Retry(times=3, backoff=job.Fixed(ms=60_000))
    final = (NoSuchAddress,)

    user_id: int

    def run(self, tick: job.Tick, db: Db, mail: Mailer) -> None:
        user = db.find_user(self.user_id)
        if user is None:
            return
        mail.send(user.email, "A reminder", key=f"remind:{tick.id}")
        db.forget_reminder(user.id, tick.id)


@dataclass
class Export:
    """A CSV of every user, `batch` at a time. After each batch the run reports how many users
    it has written (`jobs.progress`), which `GET /exports/{id}` shows beside the state."""

    nilo_job = "export-users"
    retry = job.Retry(times=2, backoff=job.Fixed(ms=10_000))
    timeout_ms = 600_000

    batch: int = 500

    async def run(self, tick: job.Tick, jobs: job.Jobs, db: Db, pace: Pace) -> None:
        lines = ["id,email"]
        after = 0
        while users := await asyncio.to_thread(db.users_after, after, self.batch):
            lines += [f"{user.id},{user.email}" for user in users]
            after = users[-1].id
            await jobs.progress(tick.id, len(lines) - 1)
            await pace.between_batches()
        await asyncio.to_thread(db.save_export, tick.id, "\n".join(lines) + "\n")


@dataclass
class Nightly:
    """At 03:00 UTC, how many users signed up in the 24 hours before. Nobody pushes it."""

    nilo_job = "nightly-report"
    retry = job.Retry.NONE
    schedule = job.cron("0 3 * * *")
    overlap = job.Overlap.SKIP  # a report still running when the next is due: skip that one
    missed = job.Missed.DROP  # the server was down at three: forget it, wait for tomorrow

    def run(self, tick: job.Tick, db: Db) -> None:
        until = tick.run_at  # when the tick was due, not when it ran: the same day either way
        db.save_report(until, db.count_signups(until - DAY_US, until))


KINDS = [SendWelcome, Remind, Export, Nightly]


def make_jobs(
    db: Db,
    *,
    mail: Mailer | None = None,
    pace: Pace | None = None,
    status: job.Space | None = None,
) -> job.Jobs:
    """The app's queue over the same SQLite file as its tables.

    Args:
        db: the app's database; the queue's table goes in the same file.
        mail: defaults to `MailboxMailer(db)`.
        pace: defaults to no rest between export batches.
        status: the Space `GET /exports/{id}` reads; defaults to one in this process, which
            is right when the app serves its own queue. With separate worker processes, pass a
            `job.RedisSpace` both sides name alike (see `from_env`).
    """
    return job.Jobs(
        kinds=KINDS,
        store=job.Table(f"sqlite:///{db.path}"),
        deps=Deps(db=db, mail=mail or MailboxMailer(db), pace=pace or Pace()),
        status=status or job.MemorySpace(ttl_s=STATUS_TTL_S),
    )


def status_from_env() -> job.Space:
    """A `job.RedisSpace` when `WEBAPP_REDIS_URL` is set (named by `WEBAPP_SPACE`, default
    "webapp"), so a web process and worker processes share statuses; else one in this process."""
    url = os.environ.get("WEBAPP_REDIS_URL")
    if not url:
        return job.MemorySpace(ttl_s=STATUS_TTL_S)
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    return job.RedisSpace(client, name=os.environ.get("WEBAPP_SPACE", "webapp"), ttl_s=STATUS_TTL_S)


def from_env() -> job.Jobs:
    """The queue of a worker process: `nilo-job worker examples.webapp.jobs:from_env`.

    The database is `WEBAPP_DB` (default `webapp.db`); see `status_from_env` for the Space.
    """
    return make_jobs(Db(os.environ.get("WEBAPP_DB", "webapp.db")), status=status_from_env())
