"""A/B of one workload of `bench/run.py`: nilo-job at a git revision against the working tree.

    .venv/bin/python bench/ab_run.py --only w2_1x4 [--ref HEAD] [--stores sqlite] [--times 4]

For what `bench/ab.py` (one push's latency) and `bench/ab_w3.py` (push → start across processes)
do not cover: throughput (W1 on a pool, W1 bulk, W2) and push → start in one process. It checks
the revision out in a temporary worktree, then runs `bench/run.py --only W --subjects nilo
--repeat 1` for the revision and for the working tree in turn, `--times` times each, so that both
meet the same stretches of a shared machine. It prints every run's figure, each side's median,
and the ratio of the medians, oriented so that above 1 means the working tree does better (a
higher rate, or a lower latency).

To try a speed mechanism, switch it off in the working tree and compare against HEAD: below
1 is what the mechanism wins.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_FIGURE = re.compile(r"rep 1 (\S+)/(\S+)/nilo: (\w+)=([\d,.]+)")


def run_once(tree: Path, only: str, stores: str, out: Path) -> dict[str, float]:
    """One repetition of `only` on `stores` with the nilo-job of `tree`: its first figure per
    store and workload (`rate` in jobs/s, or `p50_ms`)."""
    done = subprocess.run(
        [sys.executable, str(tree / "bench" / "run.py"), "--only", only, "--stores", stores,
         "--subjects", "nilo", "--repeat", "1", "--out", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    figures = {}
    for store, workload, name, value in _FIGURE.findall(done.stdout + done.stderr):
        figures[f"{store}/{workload} {name}"] = float(value.replace(",", ""))
    if not figures:
        raise SystemExit(f"bench/run.py printed no figure:\n{done.stdout}\n{done.stderr}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", required=True, help="workload ids, as bench/run.py takes them")
    parser.add_argument("--ref", default="HEAD", help="the revision to compare against")
    parser.add_argument("--stores", default="pg,sqlite")
    parser.add_argument("--times", type=int, default=4, help="runs of each side")
    args = parser.parse_args()
    runs: dict[str, dict[str, list[float]]] = {args.ref: {}, "working tree": {}}
    with tempfile.TemporaryDirectory() as scratch:
        other = Path(scratch) / "ref"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(other), args.ref],
            check=True, capture_output=True,
        )  # fmt: skip
        try:
            peers = ROOT / "bench" / ".peers"
            if peers.exists():
                (other / "bench" / ".peers").symlink_to(peers)
            for i in range(args.times):
                sides = [(args.ref, other), ("working tree", ROOT)]
                for name, tree in sides if i % 2 == 0 else reversed(sides):
                    for key, value in run_once(tree, args.only, args.stores, Path(scratch)).items():
                        runs[name].setdefault(key, []).append(value)
                        print(f"{name:>14}  {key}: {value:,.3f}", flush=True)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)],
                check=False, capture_output=True,
            )  # fmt: skip
    for key in runs["working tree"]:
        base = statistics.median(runs[args.ref][key])
        this = statistics.median(runs["working tree"][key])
        better = this / base if key.endswith("rate") else base / this
        print(f"{key}: {args.ref} {base:,.3f}, working tree {this:,.3f}; ratio {better:.3f} ×")


if __name__ == "__main__":
    main()
