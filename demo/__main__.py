"""Run the demo: `python -m demo [--dir PATH] [--fresh] [--json] [--timeout S]`.

1. `demo.db` gets the users of `demo/signups.csv`: each user is inserted and its `SendWelcome`
   pushed with `jobs.push_in` in one transaction, so a user exists with their job or not at all.
   A user already in the table is skipped, and so is their job: a second run pushes nothing.
2. A real SMTP server (aiosmtpd) listens on 127.0.0.1 and stores what it accepts in `demo-mail/`.
3. A worker process, `nilo-job worker demo.app:jobs --workers 4`, runs until nothing is queued
   or running; a progress line shows the counts meanwhile.
4. The worker gets SIGTERM, and the summary is printed, with the commands that show the dead
   rows, the dashboard, and how to start over (`--fresh` removes what an earlier run left).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import shutil
import signal
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import nilo_job as job

from .app import SendWelcome, build
from .smtp import MailServer, stored

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CSV = HERE / "signups.csv"
USERS_DDL = """
CREATE TABLE IF NOT EXISTS users (
    id               INTEGER PRIMARY KEY,
    email            TEXT NOT NULL UNIQUE,
    name             TEXT NOT NULL,
    signed_up_at     TEXT NOT NULL,
    welcomed_at      TEXT,
    welcome_attempts INTEGER
)
"""
WORKERS = 4
LEFT = ("demo.db", "demo.db-wal", "demo.db-shm", "demo-worker.log", "demo-mail")
"""What a run leaves in its folder, removed by `--fresh`."""


@dataclass
class Counts:
    queued: int
    running: int
    dead: int
    welcomed: int


async def counts(jobs: job.Jobs, db: sqlite3.Connection) -> Counts:
    stats = await jobs.stats()
    (welcomed,) = db.execute("SELECT count(*) FROM users WHERE welcomed_at IS NOT NULL").fetchone()
    return Counts(stats.queued, stats.running, stats.dead, welcomed)


async def import_signups(jobs: job.Jobs, db: sqlite3.Connection) -> tuple[int, int, int]:
    """Insert the CSV's users, each new one with its job in one transaction.

    Returns:
        (rows read, users inserted, jobs pushed)
    """
    rows = inserted = pushed = 0
    with CSV.open(newline="") as file:
        for row in csv.DictReader(file):
            rows += 1
            try:
                cursor = db.execute(  # opens the transaction
                    "INSERT OR IGNORE INTO users (email, name, signed_up_at) VALUES (?, ?, ?)",
                    (row["email"], row["name"], row["signed_up_at"]),
                )
                if cursor.rowcount == 1 and cursor.lastrowid is not None:
                    inserted += 1
                    value = SendWelcome(user_id=cursor.lastrowid, email=row["email"])
                    if await jobs.push_in(db, value) is not None:
                        pushed += 1
                db.commit()
            except BaseException:
                db.rollback()
                raise
    return rows, inserted, pushed


class Progress:
    """One status line: rewritten in place on a terminal, a plain line a second otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.last = 0.0
        self.shown = False

    def show(self, text: str, *, final: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            # Cut to the terminal's width: a line that wraps cannot be rewritten with \r.
            text = text[: shutil.get_terminal_size().columns - 1]
            self.out.write(f"\r{text}\x1b[K" + ("\n" if final else ""))
            self.out.flush()
            self.shown = not final
        elif final or now - self.last >= 1.0:
            print(text, file=self.out, flush=True)
            self.last = now

    def interrupt(self) -> None:
        """End a line being rewritten, before something else is printed."""
        if self.tty and self.shown:
            self.out.write("\n")
            self.shown = False


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


async def wait_for_line(
    worker: asyncio.subprocess.Process, log: Path, text: str, timeout_s: float
) -> bool:
    """Whether `text` shows up in the worker's log before it exits or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and worker.returncode is None:
        with contextlib.suppress(OSError):
            if text in log.read_text(errors="replace"):
                return True
        await asyncio.sleep(0.05)
    return False


async def stop_worker(worker: asyncio.subprocess.Process, timeout_s: float = 40.0) -> int:
    """SIGTERM (the worker lets running rows finish), then SIGKILL if it does not exit in time."""
    if worker.returncode is None:
        worker.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(worker.wait(), timeout_s)
        except TimeoutError:
            worker.kill()
            await worker.wait()
    assert worker.returncode is not None
    return worker.returncode


def human(summary: dict[str, Any]) -> str:
    dead = summary["dead_this_run"]
    dead_text = ", ".join(f"{n} {name}" for name, n in sorted(dead.items())) or "none"
    dead_where = "; ".join(summary["dead_addresses"][:4])
    if len(summary["dead_addresses"]) > 4:
        dead_where += f"; … {len(summary['dead_addresses']) - 4} more"
    lines = [
        "",
        "summary",
        f"  sign-ups        {summary['signups']} in the CSV, {summary['inserted']} new users, "
        f"{summary['pushed']} welcome jobs pushed in their transactions",
        f"  delivered       {summary['delivered']} this run "
        f"({summary['delivered_total']} of {summary['users']} users welcomed in all)",
        f"  dead            {dead_text} this run"
        + (f" ({dead_where})" if dead_where else "")
        + f"; {summary['dead_total']} dead rows kept in nilo_jobs",
        f"  attempts        {summary['attempts']} SMTP attempts this run: "
        f"{summary['accepted']} accepted, {summary['deferred']} answered 421 (retried), "
        f"{summary['refused']} answered 550",
        f"  wall time       {summary['wall_s']:.1f} s "
        f"(import {summary['import_s']:.1f} s, delivery {summary['deliver_s']:.1f} s)",
        f"  mail stored in  {summary['maildir']}/ "
        f"({summary['stored']} messages to {summary['stored_recipients']} distinct addresses)",
        f"  database        {summary['db']} (worker log: {summary['worker_log']})",
    ]
    if not summary["settled"]:
        lines.append(f"  NOT SETTLED     {summary['problem']}")
    return "\n".join(lines)


async def demo(directory: Path, timeout_s: float, out: TextIO) -> dict[str, Any]:
    started, started_us = time.monotonic(), job.now_us()
    directory.mkdir(parents=True, exist_ok=True)
    db_path, maildir = directory / "demo.db", directory / "demo-mail"
    log_path = directory / "demo-worker.log"

    server = MailServer(maildir)
    server.start()
    jobs = build(str(db_path), server.port)
    db = sqlite3.connect(db_path, timeout=30)
    worker: asyncio.subprocess.Process | None = None
    progress = Progress(out)
    problem = ""
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute(USERS_DDL)
        db.commit()
        await jobs.store.create_missing()
        before = await counts(jobs, db)
        print(f"nilo-job demo in {directory}", file=out)
        print(f"  SMTP server (aiosmtpd) on 127.0.0.1:{server.port}", file=out)

        t0 = time.monotonic()
        signups, inserted, pushed = await import_signups(jobs, db)
        import_s = time.monotonic() - t0
        (users,) = db.execute("SELECT count(*) FROM users").fetchone()
        print(
            f"  read {signups} sign-ups in {import_s:.2f} s: {inserted} new users, "
            f"{pushed} SendWelcome jobs pushed, each in its user's transaction",
            file=out,
        )

        env = {
            **os.environ,
            "NILO_DEMO_DB": str(db_path),
            "NILO_DEMO_SMTP_PORT": str(server.port),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        command = [sys.executable, "-m", "nilo_job", "worker", "demo.app:jobs"]
        command += ["--workers", str(WORKERS)]
        t1 = time.monotonic()
        with log_path.open("w") as log:
            worker = await asyncio.create_subprocess_exec(
                *command, cwd=directory, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log,
            )  # fmt: skip
        print(
            f"  worker process {worker.pid}: nilo-job worker demo.app:jobs --workers {WORKERS} "
            f"(log: {log_path.name})",
            file=out,
        )
        print(
            "  claimed: rows the worker holds under a lease, running or claimed ahead to run "
            "next;\n  dead: rows that failed for good this run (a refused address)",
            file=out,
            flush=True,
        )
        deadline = started + timeout_s
        # A SIGTERM that comes before the worker has set up its signal handlers (a run with
        # nothing to do settles at once) would kill it outright: wait for it to say it serves.
        await wait_for_line(worker, log_path, "serving", min(20.0, deadline - time.monotonic()))
        while not problem:
            now = await counts(jobs, db)
            inbox = server.inbox
            progress.show(
                f"  {time.monotonic() - t1:5.1f} s  delivered {now.welcomed - before.welcomed:4d}"
                f"  queued {now.queued:4d}  claimed {now.running:2d}"
                f"  dead {now.dead - before.dead:2d}"
                f"  smtp tries {inbox.attempts:4d} ({inbox.deferred} × 421)"
            )
            if now.queued == 0 and now.running == 0:
                break
            if worker.returncode is not None:
                problem = f"the worker exited with {worker.returncode}:\n{tail(log_path)}"
            elif time.monotonic() > deadline:
                problem = f"gave up after {timeout_s:g} s with rows still queued or running"
            else:
                await asyncio.sleep(0.1)
        deliver_s = time.monotonic() - t1
        progress.show(progress_final(await counts(jobs, db), before, problem), final=True)
        exit_code = await stop_worker(worker)
        if exit_code != 0 and not problem:
            problem = f"the worker exited with {exit_code} on SIGTERM:\n{tail(log_path)}"
        server.stop()

        after = await counts(jobs, db)
        died = [d for d in await jobs.dead_ones() if d.died_at >= started_us]
        n_stored, n_recipients = stored(maildir)
        return {
            "settled": not problem,
            "problem": problem,
            "signups": signups,
            "inserted": inserted,
            "pushed": pushed,
            "users": users,
            "delivered": after.welcomed - before.welcomed,
            "delivered_total": after.welcomed,
            "accepted": server.inbox.accepted,
            "dead_this_run": dict(Counter(d.error for d in died)),
            "dead_addresses": sorted(str(d.payload.get("email", "?")) for d in died),
            "dead_total": after.dead,
            "queued": after.queued,
            "running": after.running,
            "attempts": server.inbox.attempts,
            "deferred": server.inbox.deferred,
            "refused": server.inbox.refused,
            "wall_s": round(time.monotonic() - started, 3),
            "import_s": round(import_s, 3),
            "deliver_s": round(deliver_s, 3),
            "worker_exit": exit_code,
            "stored": n_stored,
            "stored_recipients": n_recipients,
            "maildir": str(maildir),
            "db": str(db_path),
            "worker_log": str(log_path),
        }
    finally:
        progress.interrupt()
        if worker is not None and worker.returncode is None:
            await stop_worker(worker)
        server.stop()
        db.close()
        await jobs.store.close()


def progress_final(now: Counts, before: Counts, problem: str) -> str:
    state = "stopped" if problem else "settled"
    died = now.dead - before.dead
    return (
        f"  {state}: delivered {now.welcomed - before.welcomed}, queued {now.queued}, "
        f"claimed {now.running}, {plural(died, 'row')} died this run"
    )


def plural(n: int, noun: str) -> str:
    """`n` and `noun`, in the plural unless `n` is 1: "1 row", "12 rows"."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def next_steps(directory: Path, cwd: Path) -> str:
    """The commands that look at what the run left and start it over, runnable from `cwd`."""
    here = directory == cwd
    db = "demo.db" if here else str(directory / "demo.db")
    url = f"sqlite:///{db}"
    cli = Path(sys.executable).parent / "nilo-job"
    with contextlib.suppress(ValueError):
        cli = cli.relative_to(cwd)
    env = "" if here else f"NILO_DEMO_DB={db} "
    fresh = "python3 dev.py demo --fresh" + ("" if here else f" --dir {directory}")
    return "\n".join(
        [
            "",
            "next",
            f"  the dead rows   {cli} dead {url}",
            f"  one row         {cli} show {url} ID",
            f"  the dashboard   {env}{cli} dashboard demo.app:jobs",
            f"  start over      {fresh}   (removes {', '.join(LEFT)})",
        ]
    )


def remove_left(directory: Path) -> None:
    """Remove what an earlier run left in `directory` (`LEFT`)."""
    for name in LEFT:
        path = directory / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dir", type=Path, default=Path.cwd(), help="where demo.db and demo-mail/ go"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="start over: remove what an earlier run left first"
    )
    parser.add_argument("--json", action="store_true", help="end with the summary as one JSON line")
    parser.add_argument("--timeout", type=float, default=120.0, help="give up after this many s")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    if args.fresh:
        remove_left(directory)
    try:
        summary = asyncio.run(demo(directory, args.timeout, sys.stdout))
    except KeyboardInterrupt:
        print("\ninterrupted: the worker was stopped; run the demo again to finish", flush=True)
        return 130
    print(human(summary), flush=True)
    print(next_steps(directory, Path.cwd().resolve()), flush=True)
    if args.json:
        print(json.dumps(summary), flush=True)
    return 0 if summary["settled"] and summary["queued"] == 0 and summary["running"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
