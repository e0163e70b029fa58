"""A Flask app that pushes, cancels and reads the queue's counts with no asyncio in a view.

    flask --app examples.flask_app run                    # the web process (create_app)
    nilo-job worker examples.flask_app:make_jobs          # the workers, in a process of their own

`FLASK_APP_DB` names the SQLite file (default `flask_app.db`) that holds the users and the queue.

    POST   /users              sign up: the user and its welcome commit together (`push_in`)
    GET    /users/<id>         the user, and what the jobs have sent them
    POST   /users/<id>/nudge   a nudge in three days, at most one queued per user (`unique`)
    DELETE /jobs/<id>          take back a queued job (`cancel`); 409 once a worker holds it
    GET    /ops/stats          how many rows are queued, running and dead

Every call on the queue is `jobs.sync`: it blocks the view's thread for the answer, the way a
database call does, and needs no event loop (docs/web.md). The web process does not run the
jobs; `nilo-job worker` does. A `push` from here wakes it at once: on SQLite a datagram to the
socket each serving process keeps beside the file (`flask_app.db.wake/`). A `push_in` commits in
the view's own transaction, which the store does not see, so the view calls `jobs.sync.wake()`
after the commit to send that datagram. (On PostgreSQL the NOTIFY sent with the commit would
wake the workers by itself.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

from flask import Blueprint, Flask, Response, current_app, jsonify, request

import nilo_job as job

DB_ENV = "FLASK_APP_DB"
DAY_MS = 24 * 60 * 60 * 1_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS users (
    id    INTEGER PRIMARY KEY,
    email TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS sent (
    user_id INTEGER NOT NULL,
    what    TEXT NOT NULL,
    key     TEXT PRIMARY KEY          -- one delivery per key, however often a run is called
);
"""


@dataclass(frozen=True, slots=True)
class Db:
    """The app's SQLite file; each call opens a connection of its own (any thread may call)."""

    path: str

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed when the block ends, rolled back when it raises."""
        conn = sqlite3.connect(self.path, timeout=30)
        try:
            with conn:
                yield conn
        finally:
            conn.close()

    def deliver(self, user_id: int, what: str, key: str) -> None:
        """Record a delivery (the example's stand-in for sending mail), once per `key`."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO sent (user_id, what, key) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (user_id, what, key),
            )


@dataclass(frozen=True, slots=True)
class Deps:
    db: Db


@dataclass
class Welcome:
    nilo_job = "flask-welcome"
    retry = job.Retry(times=5, backoff=job.Exponential(from_ms=1_000, to_ms=3_600_000))

    user_id: int

    def run(self, db: Db) -> None:
        db.deliver(self.user_id, "welcome", key=f"welcome:{self.user_id}")


@dataclass
class Nudge:
    nilo_job = "flask-nudge"
    retry = job.Retry(times=3, backoff=job.Fixed(ms=60_000))

    user_id: int

    def run(self, tick: job.Tick, db: Db) -> None:
        db.deliver(self.user_id, "nudge", key=f"nudge:{tick.id}")


def make_jobs(db_path: str | None = None) -> job.Jobs:
    """The app's queue, over `db_path` (default: `FLASK_APP_DB`, else `flask_app.db`)."""
    path = db_path or os.environ.get(DB_ENV, "flask_app.db")
    return job.Jobs(
        kinds=[Welcome, Nudge], store=job.Table(f"sqlite:///{path}"), deps=Deps(db=Db(path))
    )


def create_tables(jobs: job.Jobs, db: Db) -> None:
    """The app's tables and the queue's, in the one file (`nilo-job migrate` does the second)."""
    with db.transaction() as conn:
        conn.executescript(SCHEMA)

    async def queue_table() -> None:
        try:
            await jobs.store.create_missing()
        finally:
            await jobs.store.close()

    asyncio.run(queue_table())


views = Blueprint("jobs_example", __name__)


def queue() -> job.Jobs:
    jobs: job.Jobs = current_app.extensions["nilo_job"]
    return jobs


def database() -> Db:
    db: Db = current_app.extensions["nilo_job_db"]
    return db


@views.post("/users")
def sign_up() -> tuple[Response, int]:
    email = str((request.get_json(silent=True) or {}).get("email", ""))
    if "@" not in email:
        return jsonify(error="an email address is required"), 400
    jobs = queue()
    try:
        with database().transaction() as conn:
            (user_id,) = conn.execute(
                "INSERT INTO users (email) VALUES (?) RETURNING id", (email,)
            ).fetchone()
            welcome = jobs.sync.push_in(conn, Welcome(user_id=user_id))
    except sqlite3.IntegrityError:
        return jsonify(error=f"{email} has signed up already"), 409
    jobs.sync.wake()  # committed: `nilo-job worker` starts it now, not at its next poll
    return jsonify(id=user_id, welcome=welcome), 201


@views.get("/users/<int:user_id>")
def user(user_id: int) -> tuple[Response, int]:
    with database().transaction() as conn:
        found = conn.execute("SELECT email FROM users WHERE id = ?", (user_id,)).fetchone()
        sent = conn.execute(
            "SELECT what FROM sent WHERE user_id = ? ORDER BY rowid", (user_id,)
        ).fetchall()
    if found is None:
        return jsonify(error=f"no user {user_id}"), 404
    return jsonify(id=user_id, email=found[0], sent=[what for (what,) in sent]), 200


@views.post("/users/<int:user_id>/nudge")
def nudge(user_id: int) -> tuple[Response, int]:
    row = queue().sync.push(Nudge(user_id=user_id), after_ms=3 * DAY_MS, unique=f"nudge:{user_id}")
    if row is None:
        return jsonify(nudge=None, already=True), 200
    return jsonify(nudge=row, already=False), 201


@views.delete("/jobs/<int:row_id>")
def cancel(row_id: int) -> tuple[Response | str, int]:
    if not queue().sync.cancel(row_id):
        return jsonify(error=f"job {row_id} is not queued: a worker holds it, or it is gone"), 409
    return "", 204


@views.get("/ops/stats")
def stats() -> tuple[Response, int]:
    found = queue().sync.stats()
    return jsonify(queued=found.queued, running=found.running, dead=found.dead), 200


def create_app(db_path: str | None = None) -> Flask:
    """The app over `db_path` (default: `FLASK_APP_DB`, else `flask_app.db`), tables created."""
    path = db_path or os.environ.get(DB_ENV, "flask_app.db")
    jobs, db = make_jobs(path), Db(path)
    create_tables(jobs, db)
    app = Flask(__name__)
    app.extensions["nilo_job"] = jobs
    app.extensions["nilo_job_db"] = db
    app.register_blueprint(views)
    return app
