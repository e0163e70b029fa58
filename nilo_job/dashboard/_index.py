"""The overview page: each kind's flow over the last hour, the counts, the worker processes
(alive or lost, and the rows each runs), the first rows of each state, and each schedule's next
tick."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .._base.text import duration
from .._base.values import Flow, Row
from .._worker.beat import is_alive
from .._worker.holdback import AFTER_S, statement
from ..store.contract import HeldBack, WorkerEntry
from ._chart import bar_chart
from ._render import Chrome, button, esc, href, scroll_box, when
from ._table import row_table

STATES = ("queued", "running", "dead", "done")
"""The states the counts show, in order."""

LISTED = ("queued", "running", "dead")
"""The states whose first rows the overview lists."""

REFRESH_CHOICES = (10, 30, 60)
"""The auto-refresh periods the overview offers, in seconds."""


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """A scheduled kind as shown: its name, when it ticks, and the row holding its next tick
    (`known` is False when the store cannot say which row that is).

    `planned` is the next run the schedule itself gives after the page's moment, when no row
    holds the tick (µs; a cron schedule's runs are fixed in time, an `every` schedule's follow
    its tick row, so it has none before it is seeded). `then` is the run after the next one
    (µs). `last` is the newest run the store keeps: (row id, "done" or "dead", when it ended in
    µs), None when no run of the kind is kept. `zone` is a cron schedule's time zone (None:
    UTC).
    """

    kind: str
    when: str
    overlap: str
    missed: str
    tick_id: int | None
    tick_state: str | None
    tick_run_at: int | None
    known: bool = True
    planned: int | None = None
    then: int | None = None
    zone: str | None = None
    last: tuple[int, str, int] | None = None


@dataclass(frozen=True, slots=True)
class Overview:
    """What the overview shows: `kinds` (this queue's own), `counts` by (kind, state), `flows`
    (one per kind, from `jobs.flow()`), `rows` (the first `shown` of each listed state) and
    `totals` (how many there are of each), and the schedules. `flow_problem` says why the
    flow could not be read (the rest of the page stands)."""

    kinds: Sequence[str]
    counts: Mapping[tuple[str, str], int]
    flows: Sequence[Flow]
    rows: Mapping[str, Sequence[Row]]
    schedules: Sequence[ScheduleView]
    shown: int
    flow_problem: str | None = None
    workers: Sequence[WorkerEntry] | None = ()
    """The worker registry's entries; None when it could not be read."""
    held: HeldBack | None = None
    """What holds back the cleanup of the queue's tables, when anything does."""


def render_index(chrome: Chrome, view: Overview) -> str:
    """The overview's main part, as HTML."""
    return (
        _held(chrome, view.held)
        + f'<section id="flow"><div class="section-head"><h2>Last hour</h2>{_refresh(chrome)}'
        f"</div>{_flows(chrome, view)}</section>"
        f'<section id="counts"><h2>Counts</h2>{_counts(chrome, view)}</section>'
        f'<section id="workers"><h2>Workers</h2>{_workers(chrome, view)}</section>'
        + "".join(
            f'<section id="{state}"><h2>{state.capitalize()}</h2>{_listed(chrome, view, state)}'
            "</section>"
            for state in LISTED
        )
        + f'<section id="schedules"><h2>Schedules</h2>{_schedules(chrome, view)}</section>'
    )


def _held(chrome: Chrome, held: HeldBack | None) -> str:
    """A line at the top while a hold on the cleanup has lasted `AFTER_S` (the worker's log
    says it then too); with `payloads`, the start of the holding transaction's statement."""
    if held is None or held.age_s < AFTER_S:
        return ""
    took = duration(held.age_s * 1_000)
    if held.pid is None:
        size = "" if held.wal_bytes is None else f" (the WAL is {held.wal_bytes / 1e6:.1f} MB)"
        said = (
            f"A read transaction has kept checkpoints from completing for {took}{size}: the WAL "
            "grows with every write until it ends."
        )
    else:
        state = f", {held.state}" if held.state else ""
        query = ""
        if chrome.payloads and held.query:
            query = f" Its last statement: {statement(held.query)}."
        said = (
            f"A transaction (session {held.pid}{state}) has held back the cleanup of the queue's "
            f"tables for {took}: rows deleted since it began cannot be removed, so the tables "
            f"grow and claims slow down until it ends.{query}"
        )
    return f'<p class="problem" id="held-back">{esc(said)}</p>'


def _refresh(chrome: Chrome) -> str:
    links = [
        f'<a href="{href(chrome.base, "/")}" id="refresh-off"'
        f"{' aria-current=true' if chrome.refresh is None else ''}>off</a>"
    ]
    for seconds in REFRESH_CHOICES:
        current = " aria-current=true" if chrome.refresh == seconds else ""
        links.append(
            f'<a href="{href(chrome.base, "/", {"refresh": seconds})}" '
            f'id="refresh-{seconds}"{current}>{seconds} s</a>'
        )
    return f'<p class="refresh">Auto-refresh: {" · ".join(links)}</p>'


def _own(view: Overview) -> list[str]:
    """This queue's kinds, then the other kinds the table holds (another program's)."""
    known = list(view.kinds)
    others = sorted({kind for kind, _state in view.counts} - set(known))
    flows = [flow.kind for flow in view.flows if flow.kind not in known and flow.kind not in others]
    return [*known, *others, *flows]


def _flows(chrome: Chrome, view: Overview) -> str:
    if view.flow_problem is not None:
        return f'<p class="problem" id="flow-problem">{esc(view.flow_problem)}</p>'
    if not view.flows:
        return '<p class="empty" id="none-flow">No flow to show.</p>'
    cards = []
    for flow in view.flows:
        ours = flow.kind in view.kinds
        badge = (
            ' <span class="badge paused" id="paused-' + esc(flow.kind) + '">paused</span>'
            if flow.paused
            else ""
        )
        if not ours:
            badge += ' <span class="rel">(not a kind of this queue)</span>'
        action = ""
        if ours and chrome.operator:
            if flow.paused:
                action = button(chrome, "/resume", "Resume", f"resume-{flow.kind}", kind=flow.kind)
            else:
                action = button(chrome, "/pause", "Pause", f"pause-{flow.kind}", kind=flow.kind)
        stats = [
            ("done", "done", f"{sum(flow.done):,}"),
            ("died", "died", f"{sum(flow.died):,}"),
            ("p50", "p50 run", duration(flow.p50_ms)),
            ("p95", "p95 run", duration(flow.p95_ms)),
            ("latency", "waiting", duration(flow.oldest_due_ms)),
            ("queued", "queued", f"{flow.queued:,}"),
            ("running", "running", f"{flow.running:,}"),
            ("dead", "dead", f"{flow.dead:,}"),
        ]
        listed = "".join(
            f'<div><dt>{label}</dt><dd data-stat="{key}">{value}</dd></div>'
            for key, label, value in stats
        )
        rows_link = href(chrome.base, "/rows", {"kind": flow.kind})
        cards.append(
            f'<article class="flow" data-kind="{esc(flow.kind)}">'
            f'<h3><a href="{rows_link}">{esc(flow.kind)}</a>{badge}</h3>'
            f"{bar_chart(flow.kind, flow.minutes, flow.done, flow.died)}"
            f'<dl class="stats">{listed}</dl>'
            f'<div class="card-actions">{action}</div></article>'
        )
    legend = (
        '<p class="legend"><span class="key done"></span> done '
        '<span class="key died"></span> died, per minute (UTC). p50 and p95: run times of the '
        "last 1,000 done rows in the hour; waiting: how long the oldest due row has waited.</p>"
    )
    return f'<div class="flows">{"".join(cards)}</div>{legend}'


def _counts(chrome: Chrome, view: Overview) -> str:
    known = set(view.kinds)
    head = "".join(f'<th class="n">{state}</th>' for state in STATES)
    body = []
    for kind in _own(view):
        note = "" if kind in known else ' <span class="rel">(not a kind of this queue)</span>'
        cells = "".join(
            f'<td class="n" data-kind="{esc(kind)}" data-state="{state}">'
            f'<a href="{href(chrome.base, "/rows", {"state": state, "kind": kind})}">'
            f"{view.counts.get((kind, state), 0)}</a></td>"
            for state in STATES
        )
        body.append(f"<tr><th>{esc(kind)}{note}</th>{cells}</tr>")
    totals = "".join(
        f'<td class="n" id="count-{state}">'
        f'<a href="{href(chrome.base, "/rows", {"state": state})}">'
        f"{sum(n for (_kind, s), n in view.counts.items() if s == state)}</a></td>"
        for state in STATES
    )
    table = (
        f'<table class="counts"><thead><tr><th>kind</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody>"
        f"<tfoot><tr><th>all</th>{totals}</tr></tfoot></table>"
    )
    return (
        scroll_box(table, "counts by kind and state")
        + '<p class="note">Done rows are the history kept for the queue\'s '
        "<code>retention_ms</code> (an hour by default).</p>"
    )


def _workers(chrome: Chrome, view: Overview) -> str:
    """The serving processes of the worker registry: alive or lost, and their rows linked."""
    if view.workers is None:
        return '<p class="problem" id="workers-problem">The worker registry cannot be read.</p>'
    if not view.workers:
        return '<p class="empty" id="none-workers">No worker process is registered.</p>'
    now = chrome.now_us
    lines = []
    for entry in view.workers:
        alive = is_alive(entry, now)
        state = "alive" if alive else "lost"
        running = ", ".join(
            f'<a href="{href(chrome.base, f"/rows/{row_id}")}">{row_id}</a>'
            for row_id in entry.running
        )
        lines.append(
            f'<tr data-worker="{esc(entry.id)}" data-state="{state}">'
            f'<td>{esc(entry.host)}</td><td class="n">{entry.pid}</td>'
            f"<td>{esc(entry.version)}</td><td>{esc(', '.join(entry.kinds))}</td>"
            f'<td class="n">{entry.workers}</td><td>{when(entry.started_at, now)}</td>'
            f"<td>{when(entry.beat_at, now)}</td>"
            f'<td><span class="badge {state}">{state}</span></td>'
            f'<td class="running">{running or "–"}</td></tr>'
        )
    table = (
        "<table><thead><tr><th>host</th><th>pid</th><th>version</th><th>kinds</th>"
        "<th>workers</th><th>started</th><th>last beat</th><th>state</th><th>running</th>"
        f"</tr></thead><tbody>{''.join(lines)}</tbody></table>"
    )
    return scroll_box(table, "worker processes") + (
        '<p class="note">A process beats every <code>heartbeat_ms</code> (5 s without it) and is '
        "lost once it has missed three beats; a clean stop removes it, and a lost one is "
        "forgotten an hour after its last beat.</p>"
    )


def _listed(chrome: Chrome, view: Overview, state: str) -> str:
    rows = view.rows.get(state, ())
    if not rows:
        return f'<p class="empty" id="none-{state}">No {state} rows.</p>'
    total = sum(n for (_kind, s), n in view.counts.items() if s == state)
    more = ""
    if total > len(rows):
        link = href(chrome.base, "/rows", {"state": state})
        more = (
            f'<p class="more">The first {len(rows)} of {total:,}: '
            f'<a href="{link}" id="all-{state}">all {state} rows</a>.</p>'
        )
    return more + row_table(chrome, rows, state)


def _schedules(chrome: Chrome, view: Overview) -> str:
    if not view.schedules:
        return '<p class="empty" id="none-schedules">No kind of this queue has a schedule.</p>'
    lines = []
    for item in view.schedules:
        zone = f' <span class="zone">({esc(item.zone)})</span>' if item.zone else ""
        lines.append(
            f'<tr data-kind="{esc(item.kind)}"><td class="kind">{esc(item.kind)}</td>'
            f'<td><code class="cron">{esc(item.when)}</code>{zone}</td>'
            f'<td class="next-tick">{_next(chrome, item)}</td>'
            f'<td class="last-run">{_last(chrome, item)}</td>'
            f"<td>{esc(item.overlap)}</td><td>{esc(item.missed)}</td></tr>"
        )
    table = (
        "<table><thead><tr><th>kind</th><th>schedule</th><th>next run</th><th>last run</th>"
        f"<th>overlap</th><th>missed</th></tr></thead><tbody>{''.join(lines)}</tbody></table>"
    )
    return scroll_box(table, "schedules")


def _next(chrome: Chrome, item: ScheduleView) -> str:
    """When the kind runs next: its tick row when the store holds one, else what the schedule
    gives; then the run after it, so that the expression reads as times."""
    now = chrome.now_us
    if item.tick_id is not None and item.tick_state == "running":
        text = f"running now (the tick due {when(item.tick_run_at, now)})"
    elif item.tick_id is not None:
        link = href(chrome.base, f"/rows/{item.tick_id}")
        text = f'{when(item.tick_run_at, now)}, <a href="{link}">row {item.tick_id}</a>'
    elif item.planned is not None:
        seeded = "not seeded yet" if item.known else "its row unknown to this store"
        text = f'{when(item.planned, now)} <span class="seed">({seeded})</span>'
    elif not item.known:
        text = "unknown: this store cannot list the row holding the key"
    else:
        text = "not seeded yet: <code>serve()</code> or <code>seed()</code> queues it"
    if item.then is not None:
        text += f' <span class="then">then {when(item.then, now, hint=False)}</span>'
    return text


def _last(chrome: Chrome, item: ScheduleView) -> str:
    """The newest run the store keeps of the kind: when it ended, how, and its row."""
    if item.last is None:
        return '<span class="rel">none kept</span>'
    row_id, state, at = item.last
    link = href(chrome.base, f"/rows/{row_id}")
    verb = "done" if state == "done" else "died"
    return f'{when(at, chrome.now_us)}, {verb}, <a href="{link}">row {row_id}</a>'
