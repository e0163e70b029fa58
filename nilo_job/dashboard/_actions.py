"""The handlers that change rows: retry or cancel one row, a bulk action (confirmation first),
and pausing or resuming a kind. Each runs only after `Base.authorize` passed."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ..store.contract import INT64_MAX
from ._base import Base, first
from ._bulk import carry_out, count_plan, read_plan
from ._confirm import render_confirm
from ._render import href
from ._rows import filter_query

log = logging.getLogger("nilo_job")


class Actions(Base):
    """The POST handlers that act on the queue."""

    async def retry(self, request: Request) -> Response:
        if isinstance(allowed := await self.authorize(request), Response):
            return allowed
        row_id: int = request.path_params["row_id"]
        again = 0 < row_id <= INT64_MAX and await self.jobs.retry_dead(row_id)
        log.info(
            "dashboard: row %d %s", row_id, "queued again" if again else "was not dead",
            extra={"row": row_id, "action": "retry"},
        )  # fmt: skip
        did = "retried" if again else "not_retried"
        return self.to(request, f"/rows/{row_id}", {"did": did, "row": row_id})

    async def cancel(self, request: Request) -> Response:
        if isinstance(allowed := await self.authorize(request), Response):
            return allowed
        row_id: int = request.path_params["row_id"]
        gone = 0 < row_id <= INT64_MAX and await self.jobs.cancel(row_id)
        log.info(
            "dashboard: row %d %s", row_id, "cancelled" if gone else "was not queued",
            extra={"row": row_id, "action": "cancel"},
        )  # fmt: skip
        if gone:
            return self.to(request, "/rows", {"state": "queued", "did": "cancelled", "row": row_id})
        return self.to(request, f"/rows/{row_id}", {"did": "not_cancelled", "row": row_id})

    async def bulk(self, request: Request) -> Response:
        if isinstance(allowed := await self.authorize(request), Response):
            return allowed
        visitor, form = allowed
        plan = read_plan(form)
        if isinstance(plan, str):
            chrome = self.chrome(request, visitor, flash=f"Nothing was done: {plan}.", refused=True)
            back = href(chrome.base, "/rows")
            return self.page(
                chrome, self.title, f'<p><a href="{back}">Back to the rows</a></p>', 400
            )
        if first(form, "confirm") != "yes":
            count = await count_plan(self.jobs, plan)
            chrome = self.chrome(request, visitor)
            heading = f"{self.title}: {plan.label.lower()} rows"
            return self.page(chrome, heading, render_confirm(chrome, plan, count), 200)
        at_most = first(form, "at_most")
        if not (at_most.isascii() and at_most.isdigit()) or int(at_most) > INT64_MAX:
            return PlainTextResponse("refused: the form does not say how many rows", 400)
        done = await carry_out(self.jobs, plan, int(at_most))
        log.info(
            "dashboard: %s of %s: %d of at most %s rows", plan.action, plan.words(), done,
            at_most, extra={"action": plan.action, "rows": done},
        )  # fmt: skip
        query = {**filter_query(plan.where), "did": "bulk", "verb": plan.action}
        return self.to(request, "/rows", {**query, "n": done, "of": int(at_most)})

    async def pause(self, request: Request) -> Response:
        return await self._pausing(request, pause=True)

    async def resume(self, request: Request) -> Response:
        return await self._pausing(request, pause=False)

    async def _pausing(self, request: Request, *, pause: bool) -> Response:
        if isinstance(allowed := await self.authorize(request), Response):
            return allowed
        _visitor, form = allowed
        kind = first(form, "kind")
        if kind not in self.names:
            return PlainTextResponse(
                f"refused: {kind!r} is not a kind of this queue ({', '.join(self.names)})", 400
            )
        changed = await (self.jobs.pause(kind) if pause else self.jobs.resume(kind))
        log.info(
            "dashboard: kind %s %s", kind,
            ("paused" if pause else "resumed") if changed else "unchanged",
            extra={"kind": kind, "action": "pause" if pause else "resume"},
        )  # fmt: skip
        did = ("paused" if changed else "was_paused") if pause else (
            "resumed" if changed else "not_paused"
        )  # fmt: skip
        return self.to(request, "/", {"did": did, "kind": kind})
