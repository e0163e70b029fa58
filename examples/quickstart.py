"""The README's example, whole and runnable: `python examples/quickstart.py`.

A sign-up inserts a user and pushes its welcome in one SQLite transaction; a reminder goes out a
day later, once however often it is asked for; a worker runs what is due.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nilo_job as job


class Rejected(Exception):
    """The mail provider refused the address for good."""


class Mailer:
    """Stands in for your mail client."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.delivered = asyncio.Event()

    async def send(self, to: str, subject: str) -> None:
        if to.endswith(".invalid"):
            raise Rejected(to)
        self.sent.append(f"{subject} -> {to}")
        self.delivered.set()


@dataclass
class SendWelcome:
    nilo_job = "send-welcome"  # the name the row carries
    retry = job.Retry(times=5, backoff=job.Exponential(from_ms=1_000, to_ms=3_600_000))
    final = (Rejected,)  # dead at once, whatever retry says

    user_id: int  # the fields are the payload (JSON)
    email: str

    async def run(self, tick: job.Tick, mail: Mailer) -> None:  # parameters answered by type
        subject = "Welcome" if tick.attempts == 1 else "Welcome (again)"
        await mail.send(self.email, subject)


@dataclass
class Deps:
    mail: Mailer


async def main(directory: Path) -> list[str]:
    database = directory / "app.db"
    mail = Mailer()
    jobs = job.Jobs(
        kinds=[SendWelcome],
        store=job.Table(f"sqlite:///{database}"),
        deps=Deps(mail=mail),
        workers=4,
        poll_ms=1_000,
        timeout_ms=60_000,
    )
    await jobs.store.create_missing()  # the table, beside your own

    db = sqlite3.connect(database)
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT UNIQUE)")
    with db:  # your own transaction: the user and the job commit together, or neither does
        user = db.execute("INSERT INTO users (email) VALUES ('a@b.c')").lastrowid
        assert user is not None
        await jobs.push_in(db, SendWelcome(user_id=user, email="a@b.c"))
    db.close()

    # Tomorrow, and only once however often this is asked for today.
    for _ in range(3):
        await jobs.push(
            SendWelcome(user_id=1, email="a@b.c"), after_ms=86_400_000, unique="remind:1"
        )

    async with jobs.serving():  # the workers, beside your app, until the block ends
        jobs.wake()  # a push_in cannot wake them: the row exists once the commit is done
        await asyncio.wait_for(mail.delivered.wait(), timeout=10)
    print(await jobs.stats())  # Stats(queued=1, running=0, dead=0): tomorrow's reminder
    await jobs.store.close()
    return mail.sent


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        print(asyncio.run(main(Path(directory))))
