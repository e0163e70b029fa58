"""The example app's routes: FastAPI over one SQLite file that holds the users and the queue.

    uvicorn --factory examples.webapp.app:create_app        # serves the queue too
    WEBAPP_SERVE=0 uvicorn --factory examples.webapp.app:create_app   # pushes only, and
    nilo-job worker examples.webapp.jobs:from_env                     # a worker runs the rows

    POST  /users                      sign up: the user and its welcome commit together
    PATCH /users/{id}                 change the address (how a dead welcome is fixed)
    POST  /users/{id}/remind          a reminder in `in_hours` (24), once per user (`unique`)
    POST  /users/{id}/postpone        move the queued reminder: cancel, then push later
    POST  /exports                    start a CSV export of the users; answers its id
    GET   /exports/{id}               its state, attempts and progress (from `jobs.status`)
    GET   /exports/{id}/csv           the file, once done
    GET   /mailbox, /reports          what the jobs delivered: mails, nightly reports
    GET   /ops/stats, /ops/dead       operator views: counts, and the dead rows newest first
    POST  /ops/dead/{id}/retry        queue a dead row again from its first attempt
    GET   /healthz                    503 when the store is unreachable or the workers stopped

The routes that write the app's own tables are plain `def`: FastAPI runs them in a thread pool,
where a sqlite3 transaction may block, and they use `jobs.sync`. The others `await` the queue.
Put the `/ops` routes behind your operators' authentication in a real app.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field

import nilo_job as job
from nilo_job.web import lifespan

from .jobs import Db, Export, Mailer, Pace, Remind, SendWelcome, make_jobs, status_from_env

HOUR_MS = 60 * 60 * 1_000


class SignUp(BaseModel):
    email: str = Field(min_length=3, max_length=254)


class Later(BaseModel):
    in_hours: int = Field(default=24, ge=1, le=24 * 365)


class ExportRequest(BaseModel):
    batch: int = Field(default=500, ge=1, le=10_000)


def get_db(request: Request) -> Db:
    db: Db = request.app.state.db
    return db


def get_jobs(request: Request) -> job.Jobs:
    jobs: job.Jobs = request.app.state.jobs
    return jobs


DbDep = Annotated[Db, Depends(get_db)]
JobsDep = Annotated[job.Jobs, Depends(get_jobs)]

router = APIRouter()


# ------------------------------------------------------------------------------------- users


@router.post("/users", status_code=201)
def sign_up(body: SignUp, db: DbDep, jobs: JobsDep) -> dict[str, int | None]:
    """The user and its welcome in one transaction: no user without a welcome, and no welcome
    for a user whose insert rolled back (the row commits with the user, or neither does)."""
    try:
        with db.transaction() as conn:
            (user_id,) = conn.execute(
                "INSERT INTO users (email, created_at_us) VALUES (?, ?) RETURNING id",
                (body.email, job.now_us()),
            ).fetchone()
            welcome = jobs.sync.push_in(conn, SendWelcome(user_id=user_id))
    except sqlite3.IntegrityError:
        raise HTTPException(409, f"{body.email} has signed up already") from None
    jobs.wake()  # the row exists from the commit on: start it now rather than at the next poll
    return {"id": user_id, "welcome": welcome}


@router.patch("/users/{user_id}")
def change_email(user_id: int, body: SignUp, db: DbDep) -> dict[str, int | str]:
    with db.transaction() as conn:
        changed = conn.execute(
            "UPDATE users SET email = ? WHERE id = ?", (body.email, user_id)
        ).rowcount
    if not changed:
        raise HTTPException(404, f"no user {user_id}")
    return {"id": user_id, "email": body.email}


@router.post("/users/{user_id}/remind")
def remind(user_id: int, body: Later, db: DbDep, jobs: JobsDep) -> JSONResponse:
    """A reminder in `in_hours`, and only once however many times this route is hit: the row and
    the user's note of it commit together, and `unique` makes a second one None."""
    with db.transaction() as conn:
        found = conn.execute("SELECT reminder_job FROM users WHERE id = ?", (user_id,)).fetchone()
        if found is None:
            raise HTTPException(404, f"no user {user_id}")
        row = jobs.sync.push_in(
            conn,
            Remind(user_id=user_id),
            after_ms=body.in_hours * HOUR_MS,
            unique=f"remind:{user_id}",
        )
        if row is None:  # already queued: nothing to do
            return JSONResponse({"reminder": found[0], "already": True}, status_code=200)
        conn.execute("UPDATE users SET reminder_job = ? WHERE id = ?", (row, user_id))
    return JSONResponse({"reminder": row, "already": False}, status_code=201)


@router.post("/users/{user_id}/postpone")
def postpone(user_id: int, body: Later, db: DbDep, jobs: JobsDep) -> dict[str, int]:
    """Move the queued reminder to `in_hours` from now: a cancel and a push.

    A reminder a worker has already claimed cannot be taken back: 409.
    """
    user = db.find_user(user_id)
    if user is None:
        raise HTTPException(404, f"no user {user_id}")
    if user.reminder_job is None:
        raise HTTPException(404, f"user {user_id} has no reminder queued")
    if not jobs.sync.cancel(user.reminder_job):
        raise HTTPException(409, "that reminder is already going out")
    with db.transaction() as conn:
        row = jobs.sync.push_in(
            conn,
            Remind(user_id=user_id),
            after_ms=body.in_hours * HOUR_MS,
            unique=f"remind:{user_id}",
        )
        if row is None:
            raise HTTPException(409, "another reminder was queued meanwhile")
        conn.execute("UPDATE users SET reminder_job = ? WHERE id = ?", (row, user_id))
    return {"reminder": row}


# ----------------------------------------------------------------------------------- exports


@router.post("/exports", status_code=202)
async def start_export(body: ExportRequest, jobs: JobsDep) -> dict[str, int]:
    row = await jobs.push(Export(batch=body.batch))
    return {"id": row}


@router.get("/exports/{row_id}")
async def export_status(row_id: int, jobs: JobsDep) -> dict[str, Any]:
    """What the status Space remembers: queued, running (with how many users so far), done or
    dead; 404 once it has forgotten (an hour after the last change)."""
    status = await jobs.status(row_id)
    if status is None:
        raise HTTPException(404, f"no export {row_id} is known")
    return {
        "id": row_id,
        "state": str(status.state),
        "attempts": status.attempts,
        "progress": status.progress,
    }


@router.get("/exports/{row_id}/csv", response_class=PlainTextResponse)
def export_file(row_id: int, db: DbDep) -> PlainTextResponse:
    csv = db.export_csv(row_id)
    if csv is None:
        raise HTTPException(404, f"export {row_id} has no file (yet)")
    return PlainTextResponse(csv, media_type="text/csv")


# --------------------------------------------------------------------- what the jobs delivered


@router.get("/mailbox")
def mailbox(db: DbDep) -> list[dict[str, str]]:
    return [{"to": to, "subject": subject} for to, subject in db.mailbox()]


@router.get("/reports")
def reports(db: DbDep) -> list[dict[str, str | int]]:
    """Each nightly report: the 24 hours it counts end at `until` (UTC)."""
    return [{"until": _utc(until), "signups": n} for until, n in db.reports()]


# -------------------------------------------------------------------------------- operators


@router.get("/ops/stats")
async def stats(jobs: JobsDep) -> dict[str, int]:
    found = await jobs.stats()
    return {"queued": found.queued, "running": found.running, "dead": found.dead}


@router.get("/ops/dead")
async def dead(jobs: JobsDep) -> list[dict[str, Any]]:
    """The rows that failed for the last time, newest first, each with its error's name,
    message and traceback."""
    return [dataclasses.asdict(row) for row in await jobs.dead_ones()]


@router.post("/ops/dead/{row_id}/retry")
async def retry(row_id: int, jobs: JobsDep) -> dict[str, int]:
    if not await jobs.retry_dead(row_id):
        raise HTTPException(404, f"no dead job {row_id}")
    return {"id": row_id}


@router.get("/healthz")
async def healthz(jobs: JobsDep) -> JSONResponse:
    ready = await jobs.ready()
    return JSONResponse({"ready": ready}, status_code=200 if ready else 503)


# -------------------------------------------------------------------------------------- app


def create_app(
    db_path: str | None = None,
    *,
    serve: bool | None = None,
    mail: Mailer | None = None,
    pace: Pace | None = None,
    status: job.Space | None = None,
) -> FastAPI:
    """The app over the SQLite file `db_path` (default: `WEBAPP_DB`, else `webapp.db`).

    Args:
        serve: run the queue's workers in this process, beside the app (default: unless
            `WEBAPP_SERVE=0`). Off, the app only pushes and `nilo-job worker` runs the rows.
        mail, pace: the services the runs use; see `make_jobs`.
        status: the status Space; default `status_from_env()`.
    """
    db = Db(db_path or os.environ.get("WEBAPP_DB", "webapp.db"))
    jobs = make_jobs(db, mail=mail, pace=pace, status=status or status_from_env())
    if serve is None:
        serve = os.environ.get("WEBAPP_SERVE", "1") != "0"
    queue_lifespan = lifespan(jobs, create_missing=True, serve=serve)

    @contextlib.asynccontextmanager
    async def app_lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The app's own tables first, then the queue's: both in the one file.
        await asyncio.to_thread(db.create_missing)
        async with queue_lifespan(app):
            yield

    app = FastAPI(title="nilo-job example", lifespan=app_lifespan)
    app.state.db = db
    app.state.jobs = jobs
    app.include_router(router)
    return app


def _utc(us: int) -> str:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
