"""A kind's flow as a small bar chart: inline SVG, drawn on the server, no script.

One bar per minute, oldest on the left: the rows done that minute at the bottom, the rows that
died stacked on top. Each minute is a `<g class="minute">` carrying its numbers as data
attributes (`data-minute`, `data-done`, `data-died`) and a `<title>` a pointer shows; the colours
come from classes in the stylesheet, with presentation attributes as the fallback, so the page's
Content-Security-Policy needs no inline style.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._base.clock import utc_text
from ._render import esc, iso

WIDTH = 240
"""The chart's width in SVG units; each minute gets `WIDTH / minutes` of it."""
TOP = 12
"""The room above the bars, in SVG units, for the label of the tallest minute."""
BARS = 44
"""The height of the bars' area in SVG units; the tallest minute fills it."""
BOTTOM = TOP + BARS
"""Where the bars stand, in SVG units from the top."""
HEIGHT = BOTTOM + 13
"""The chart's height in SVG units: the label, the bars and, under them, the time axis."""


def _num(value: float) -> str:
    """A coordinate, short: 12, 12.5, 12.33."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def bar_chart(kind: str, minutes: Sequence[int], done: Sequence[int], died: Sequence[int]) -> str:
    """The SVG of one kind's done and died rows per minute.

    Args:
        kind: the kind's name (for the label; escaped here).
        minutes: each minute's start, µs since the epoch, oldest first.
        done: rows done in each minute (same length as `minutes`).
        died: rows that died in each minute (same length as `minutes`).

    Returns:
        An `<svg>` element, as text.
    """
    count = len(minutes)
    peak = max((a + b for a, b in zip(done, died, strict=True)), default=0)
    scale = BARS / peak if peak else 0.0
    slot = WIDTH / count if count else WIDTH
    total_done, total_died = sum(done), sum(died)
    label = (
        f"{kind}: {total_done:,} done and {total_died:,} died in the last {count} minutes, "
        f"at most {peak:,} in one minute"
    )
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{esc(label)}" data-kind="{esc(kind)}" data-peak="{peak}" '
        f'data-done="{total_done}" data-died="{total_died}">',
        f"<title>{esc(label)}</title>",
        f'<line class="base" x1="0" y1="{BOTTOM}" x2="{WIDTH}" y2="{BOTTOM}" stroke="#8888"/>',
    ]
    for i, start in enumerate(minutes):
        ok, bad = done[i], died[i]
        x = _num(i * slot)
        width = _num(max(slot - 1, 0.5))
        tip = f"{utc_text(start)[11:16]} UTC: {ok:,} done, {bad:,} died"
        bars = []
        ok_h = ok * scale
        bad_h = bad * scale
        if ok:
            bars.append(
                f'<rect class="done" x="{x}" y="{_num(BOTTOM - ok_h)}" width="{width}" '
                f'height="{_num(ok_h)}" fill="#1e8449"/>'
            )
        if bad:
            bars.append(
                f'<rect class="died" x="{x}" y="{_num(BOTTOM - ok_h - bad_h)}" width="{width}" '
                f'height="{_num(bad_h)}" fill="#c0392b"/>'
            )
        parts.append(
            f'<g class="minute" data-minute="{iso(start)}" data-done="{ok}" data-died="{bad}">'
            f"<title>{tip}</title>"
            # an invisible full-height target, so the title shows over an empty minute too
            f'<rect class="slot" x="{x}" y="{TOP}" width="{_num(slot)}" height="{BARS}" '
            f'fill="transparent"/>{"".join(bars)}</g>'
        )
    if count:
        first, last = utc_text(minutes[0])[11:16], utc_text(minutes[-1])[11:16]
        parts.append(
            f'<text class="axis" x="0" y="{HEIGHT - 2}" font-size="10">{first}</text>'
            f'<text class="axis" x="{WIDTH}" y="{HEIGHT - 2}" font-size="10" '
            f'text-anchor="end">{last} UTC</text>'
        )
    top = f"at most {peak:,} a minute" if peak else "nothing ended in this hour"
    parts.append(f'<text class="axis peak" x="0" y="9" font-size="10">{top}</text></svg>')
    return "".join(parts)
