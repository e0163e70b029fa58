"""Draw bench/results.png from the run's results (run with bench/.peers/venv/bin/python, which
has matplotlib): `python bench/chart.py DATA.json OUT.png`.

Left: each target as a score where 1 is the bound (measured ÷ bound for a floor, bound ÷ measured
for a ceiling), so a bar past the line meets its target. Right: throughput of every subject per
workload (log scale).
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, NullFormatter

SUBJECTS = ("nilo", "raw", "raw_tx", "raw_claim1", "raw_claim100", "pgqueuer", "procrastinate",
            "oban", "huey")  # fmt: skip
COLOURS = {
    "nilo": "#d62728",
    "raw": "#7f7f7f",
    "raw_tx": "#bcbcbc",
    "raw_claim1": "#9a9a9a",
    "raw_claim100": "#5a5a5a",
    "pgqueuer": "#1f77b4",
    "procrastinate": "#2ca02c",
    "oban": "#9467bd",
    "huey": "#ff7f0e",
}
THROUGHPUT = (
    ("pg", "w1_one", "PG W1 one by one"),
    ("pg", "w1_pool16", "PG W1 16 producers"),
    ("pg", "w1_bulk", "PG W1 bulk"),
    ("pg", "w2_1x4", "PG W2 1×4"),
    ("pg", "w2_4proc", "PG W2 4 procs"),
    ("sqlite", "w1_one", "SQLite W1 one by one"),
    ("sqlite", "w1_bulk", "SQLite W1 bulk"),
    ("sqlite", "w2_1x4", "SQLite W2 1×4"),
)


def main(data_path: str, out: str) -> None:
    with open(data_path) as file:
        data = json.load(file)
    summary, targets = data["summary"], data["targets"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(17, 7), gridspec_kw={"width_ratios": [1, 1.3]})

    shown = [t for t in targets if t["score"] is not None]
    labels = [t["label"] for t in shown]
    scores = [t["score"] for t in shown]
    colours = ["#2ca02c" if t["ok"] else "#d62728" for t in shown]
    ys = range(len(shown))
    left.barh(list(ys), scores, color=colours)
    left.axvline(1.0, color="black", linewidth=1)
    left.set_yticks(list(ys), labels, fontsize=8)
    left.invert_yaxis()
    left.set_xscale("log")
    left.set_xlim(min(0.1, min(scores) / 1.5), max(10.0, max(scores) * 3))
    left.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    left.xaxis.set_minor_formatter(NullFormatter())
    left.set_xlabel("score: ≥ 1 meets the target (log scale)")
    left.set_title("nilo-job against its targets")
    for y, t in zip(ys, shown, strict=True):
        left.annotate(
            f"{t['value']:.2f} {t['unit']} ({t['need']} {t['bound']:g})",
            (t["score"], y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=7,
        )  # fmt: skip

    groups = [(s, w, label) for s, w, label in THROUGHPUT if f"{s}/{w}/nilo" in summary]
    present = [s for s in SUBJECTS if any(f"{st}/{w}/{s}" in summary for st, w, _ in groups)]
    width = 0.8 / max(1, len(present))
    for k, subject in enumerate(present):
        xs, heights = [], []
        for g, (store, workload, _label) in enumerate(groups):
            rate = summary.get(f"{store}/{workload}/{subject}", {}).get("rate")
            if rate:
                xs.append(g + (k - (len(present) - 1) / 2) * width)
                heights.append(rate)
        right.bar(xs, heights, width=width, label=subject, color=COLOURS.get(subject))
    right.set_xticks(range(len(groups)), [label for _s, _w, label in groups], rotation=30,
                     ha="right", fontsize=8)  # fmt: skip
    right.set_yscale("log")
    right.set_ylabel("jobs/s (median, log scale)")
    right.set_title(f"throughput, {data['meta']['jobs']:,} jobs a run")
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    right.grid(axis="y", alpha=0.3)
    fig.suptitle(f"nilo-job benchmark, {data['meta']['date']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
