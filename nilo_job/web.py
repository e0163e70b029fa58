"""The queue inside a web app: a Starlette/FastAPI `lifespan` that serves it beside the app.

    from fastapi import FastAPI
    from nilo_job.web import lifespan

    app = FastAPI(lifespan=lifespan(jobs, create_missing=True))

For the life of the app the store is open, every schedule is seeded and `jobs.serve()` runs as a
task on the app's own event loop. When the server shuts down
(uvicorn on SIGTERM or SIGINT) the workers stop claiming, running rows get `grace_ms` to finish,
what does not finish is queued again, and the store is closed.

An edge: it uses the public API only, and imports nothing from Starlette, so it works with any
ASGI framework whose `lifespan=` takes a function of the app returning an async context manager,
as Starlette's and FastAPI's do. Install `nilo-job[web]` for Starlette itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from ._base.bounds import MS, whole
from ._base.errors import Refusal
from ._queue.jobs import Jobs

__all__ = ["lifespan"]


def lifespan(
    jobs: Jobs,
    *,
    create_missing: bool = False,
    serve: bool = True,
    grace_ms: int = 30_000,
) -> Callable[[object], AbstractAsyncContextManager[None]]:
    """A `lifespan=` for Starlette or FastAPI that runs `jobs` for the life of the app.

    At startup it opens the store, creates the `nilo_jobs` table when `create_missing` is set,
    checks the table, and (with `serve`) enters `jobs.serving()`, which seeds the schedules and
    runs the workers on the app's event loop. At shutdown it stops the workers (running rows get
    `grace_ms` to finish; the rest are queued again, unrun, a sync run's row after its lease)
    and closes the store. A startup that fails closes the store again and raises, so the server
    refuses to start with the reason.

    Args:
        jobs: the queue. Routes reach it however the app likes (a module global, `app.state`,
            a FastAPI dependency); the lifespan only runs it.
        create_missing: create the table and its indexes where missing at startup (idempotent,
            safe when several processes start at once). Leave it False where migrations are
            run separately (`nilo-job migrate`); the table is then checked, not created.
        serve: run the workers in this process. False for a web process that only pushes while
            `nilo-job worker` processes run the rows: the store is still opened, checked and
            closed with the app.
        grace_ms: at shutdown, how long running rows may finish before they are cancelled and
            queued again, in milliseconds.

    Returns:
        A function of the app returning an async context manager that yields None, which is
        what `Starlette(lifespan=...)` and `FastAPI(lifespan=...)` take. Each call makes a new
        context manager, so one `lifespan(...)` may serve an app that starts more than once
        (as a test client does), one start at a time.

    Raises:
        Refusal: `jobs` is not a `job.Jobs`, or `grace_ms` is negative (raised here, at
            definition).
        StoreUnavailable: at startup, the store cannot be reached or the table is missing (with
            `create_missing=False`) or is not nilo-job's.
    """
    if not isinstance(jobs, Jobs):
        raise Refusal(f"lifespan({jobs!r}): pass the job.Jobs the app pushes to")
    whole(grace_ms, MS, "lifespan(grace_ms={})", "grace_ms")

    @contextlib.asynccontextmanager
    async def run_beside(app: object) -> AsyncIterator[None]:
        try:
            await jobs.store.open()
            if create_missing:
                await jobs.store.create_missing()
            if not serve:
                await jobs.store.check()
                yield
                return
            async with jobs.serving(grace_ms=grace_ms):
                yield
        finally:
            await jobs.store.close()

    return run_beside
