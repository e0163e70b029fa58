"""The dashboard: a small web page over a queue, to mount in an ASGI app or run on its own.

    from nilo_job.dashboard import dashboard_app
    app.mount("/jobs", dashboard_app(jobs, secret=os.environ["NILO_DASHBOARD_SECRET"]))
    app.mount("/jobs", dashboard_app(jobs, access=staff))   # behind your own login

    nilo-job dashboard myapp.jobs:jobs --port 8900 --secret-env NILO_DASHBOARD_SECRET

It shows each kind's flow over the last hour (done and died per minute, run times, queue
latency), the counts by state and kind, the rows by state, kind and error a page at a time, a
row's whole story, and each schedule's next tick; with a secret configured, an operator who logs
in can retry, cancel and delete rows (those ticked, or every row matching a filter, after a
confirmation that says how many) and pause or resume a kind. Starlette is needed for the page
(`nilo-job[web]`) and uvicorn for the command; they are imported when first used, so importing
this package (the command line does) costs neither. It is closed by default: with a secret,
every page needs a login; with no secret, no `access` and not `public_reads`, it serves this
machine's clients only. See docs/dashboard.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import dashboard_app

__all__ = ["dashboard_app"]


def __getattr__(name: str) -> Any:
    if name == "dashboard_app":
        from ._app import dashboard_app

        return dashboard_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
