"""A bulk action as the forms ask for it: which action, on which rows (the ticked ids, or every
row that matches the page's filter), how many that is, and the words that say so.

Pure reading of a form; the count and the action itself are the queue's calls (`jobs.count`,
`jobs.retry_many`, `jobs.cancel_many`, `jobs.delete_many`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import Jobs, Refusal
from .._base.values import Where
from ..store.contract import INT64_MAX
from ._rows import ACTIONS

MOST_IDS = 1_000
"""The most ticked rows one form may carry (a page holds at most 1,000 rows)."""

DONE_WORDS = {"retry": "queued again", "cancel": "cancelled", "delete": "deleted"}
"""What each action did, for the sentence after it."""


@dataclass(frozen=True, slots=True)
class Plan:
    """One bulk action: `action` ("retry", "cancel" or "delete") on the rows `ids` (ticked) or,
    when `ids` is None, on every row that matches `where` (the page's filter)."""

    action: str
    where: Where
    ids: tuple[int, ...] | None = None

    @property
    def label(self) -> str:
        """The action's button label: "Retry"."""
        return ACTIONS[self.action][0]

    @property
    def states(self) -> tuple[str, ...]:
        """The states of the rows the action acts on."""
        if self.ids is None and self.where.state is not None:
            return (self.where.state,)
        return ACTIONS[self.action][1]

    def scopes(self) -> list[Where]:
        """One filter per state acted on: counted one by one, they add up to the rows touched."""
        base = Where(ids=self.ids) if self.ids is not None else self.where
        return [dataclasses.replace(base, state=state) for state in self.states]

    def target(self) -> list[int] | Where:
        """What to hand `jobs.retry_many` and the like."""
        return list(self.ids) if self.ids is not None else self.where

    def words(self) -> str:
        """The rows in words: "dead rows of mail that failed with Timeout"; "dead and done rows
        among 3 ids"."""
        base = Where(ids=self.ids) if self.ids is not None else self.where
        if len(self.states) == 1:
            return dataclasses.replace(base, state=self.states[0]).words()
        text = dataclasses.replace(base, state=None).words()
        return " and ".join(self.states) + text.removeprefix("all")


def read_plan(form: Mapping[str, Sequence[str]]) -> Plan | str:
    """The plan a bulk form asks for, or the sentence that says why it cannot be done."""

    def first(name: str) -> str | None:
        values = form.get(name) or [""]
        return values[0] or None

    act = first("act") or ""
    action, _, scope = act.partition(":")
    if action not in ACTIONS or scope not in ("selected", "all"):
        return "the form does not say which action to take"
    state = first("state")
    if state is not None and state not in ("queued", "running", "dead", "done"):
        return f"{state!r} is not a state"
    try:
        where = Where(state=state, kind=first("kind"), error=first("error"), key=first("key"))
    except Refusal as refusal:  # a NUL or a lone surrogate, which no row holds
        return str(refusal)
    if scope == "all":
        states = ACTIONS[action][1]
        if where.state is not None and where.state not in states:
            return (
                f"{ACTIONS[action][0]} acts on {' and '.join(states)} rows, not {where.state} ones"
            )
        return Plan(action, where)
    raw = [value for value in form.get("id", ()) if value]
    if not raw:
        return "no row is ticked: tick the rows to act on, or use the button for all of them"
    if len(raw) > MOST_IDS:
        return f"at most {MOST_IDS:,} rows at once"
    ids: list[int] = []
    for value in raw:
        if not (value.isascii() and value.isdigit()) or not 0 < int(value) <= INT64_MAX:
            return f"{value!r} is not a row id"
        ids.append(int(value))
    return Plan(action, where, tuple(dict.fromkeys(ids)))


async def count_plan(jobs: Jobs, plan: Plan) -> int:
    """How many rows the plan would touch now."""
    return sum([await jobs.count(scope) for scope in plan.scopes()])


async def carry_out(jobs: Jobs, plan: Plan, at_most: int) -> int:
    """Do it, to at most `at_most` rows; how many it changed."""
    act = {"retry": jobs.retry_many, "cancel": jobs.cancel_many, "delete": jobs.delete_many}
    return await act[plan.action](plan.target(), at_most=at_most)
