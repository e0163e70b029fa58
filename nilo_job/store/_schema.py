"""The shape of the `nilo_jobs` table, its version, and the in-place upgrade of an older one.

The table is a promise: a change to it comes with an upgrade that keeps every row. The version a
table has is recorded in a one-row table beside it, `nilo_jobs_version`, with the oldest version
whose nilo-job still works on it (`compatible_from`); a table from before versions were recorded
(version 1) is told by its columns. `create_missing()` (and `nilo-job
migrate`) creates what is missing and runs each upgrade step from the table's version to this
one's, in one transaction, so a table is never half upgraded. Every step adds what is new and
changes nothing that was there, so workers of the previous version keep working on an upgraded
table while a deploy rolls (or after it is rolled back). `check()` (at the start of every
`serve`) refuses a table this version cannot work on, or one that lacks a table beside it (an
Alembic-managed schema not migrated since an upgrade, which records no version, or a table
dropped), with a sentence that says what to run; `create_missing()` creates a missing table
beside it whatever the version record says.

    version 1   the first table (id, kind, payload, state, run_at, lease_until, attempts,
                unique_key, error, detail, died_at)
    version 2   + traceback: the last failure's traceback
    version 3   + pushed_at, started_at, worker: when a row was pushed, when its last attempt
                started and which process ("host:pid") claimed it; + the tables
                nilo_jobs_done (done rows kept as history) and nilo_jobs_paused (paused kinds)
    version 4   + snoozes: how many times a row's runs snoozed (`job.Snooze`), 0 by default
    version 5   + trace: the W3C trace context of the row's push (OpenTelemetry), or NULL
    version 6   + the table nilo_jobs_workers: the registry of serving processes (one entry
                each, written at every beat); no column of nilo_jobs changes
    version 7   + the tables nilo_jobs_attempts (a row's attempts that did not end done, the
                newest 20, written with the end that closes each) and nilo_jobs_deaths
                (deaths by kind and minute, for a day, counted with each death); the upgrade
                records the death each dead row remembers as its last attempt and counts it
                in its minute; no column of nilo_jobs changes
"""

from __future__ import annotations

from collections.abc import Iterable

from .._base.errors import StoreUnavailable

VERSION = 7
"""The version of the table this nilo-job writes."""

COMPATIBLE_FROM = 1
"""The oldest version whose nilo-job still works on a table of this version: every step so far
only adds nullable columns, columns with a default (`snoozes`, which an older nilo-job's inserts
leave to it) and tables of their own (`nilo_jobs_workers`, `nilo_jobs_attempts`,
`nilo_jobs_deaths`), which an older nilo-job neither reads nor needs (the ends an older worker
writes record no attempt and count no death)."""

Recorded = tuple[int, int] | None
"""What `nilo_jobs_version` says: (version, compatible_from), or None when there is no record."""

COLUMNS_1 = frozenset(
    {"id", "kind", "payload", "state", "run_at", "lease_until", "attempts", "unique_key", "error",
     "detail", "died_at"}
)  # fmt: skip
COLUMNS = COLUMNS_1 | {"traceback", "pushed_at", "started_at", "worker", "snoozes", "trace"}
"""The columns this version reads and writes."""

SIDE_TABLES = frozenset(
    {"nilo_jobs_done", "nilo_jobs_paused", "nilo_jobs_workers", "nilo_jobs_attempts",
     "nilo_jobs_deaths", "nilo_jobs_version"}
)  # fmt: skip
"""The tables beside `nilo_jobs` that this version reads and writes (`create` makes each where
missing, whatever the version record says)."""

STEPS = {
    2: "upgrade_to_2", 3: "upgrade_to_3", 4: "upgrade_to_4", 5: "upgrade_to_5", 6: "upgrade_to_6",
    7: "upgrade_to_7",
}  # fmt: skip
"""The statement that brings a table to each version from the one before."""


def version_of(columns: set[str], recorded: Recorded) -> int:
    """The version of a table with `columns`, whose version table says `recorded` (None: it has
    none); 0 when there is no table."""
    if recorded is not None:
        return recorded[0]
    if not columns:
        return 0
    version = 1
    # The first column each version added.
    for added in ("traceback", "pushed_at", "snoozes", "trace"):
        if added not in columns:
            return version
        version += 1
    return version


def steps_from(columns: set[str], recorded: Recorded, where: str) -> list[str] | None:
    """The upgrade statements that bring the table to this version, in order; None when the
    table is newer than this version and still works with it (it is left as it is).

    Raises:
        StoreUnavailable: the table is newer than this nilo-job can work on.
    """
    version = version_of(columns, recorded)
    if version > VERSION:
        if recorded is not None and recorded[1] > VERSION:
            raise _newer(version, where)
        return None
    if not columns:
        return []
    return [STEPS[v] for v in range(version + 1, VERSION + 1)]


def no_table(where: str, target: str) -> StoreUnavailable:
    """The error for a database without the table."""
    return StoreUnavailable(
        f"there is no nilo_jobs table in {where}: create it with `nilo-job migrate {target}` "
        "(or await table.create_missing())"
    )


def not_readable(where: str, said: str) -> StoreUnavailable:
    """The error for a user the database does not let read the queue's tables (`said`: the
    server's words)."""
    return StoreUnavailable(
        f"the queue's tables in {where} may not be read by this user ({said}): grant it SELECT, "
        "INSERT, UPDATE and DELETE on nilo_jobs and the tables beside it"
    )


def no_file(path: str, target: str) -> StoreUnavailable:
    """The error for a SQLite file that does not exist (it is not created but by a migration)."""
    return StoreUnavailable(
        f"there is no SQLite database at {path}: check the path (sqlite:///relative.db, "
        f"sqlite:////absolute.db), or create it and its table with `nilo-job migrate {target}` "
        "(or await table.create_missing())"
    )


def missing_tables(where: str, target: str, names: Iterable[str]) -> StoreUnavailable:
    """The error for a database that has the table but lacks `names`, tables beside it."""
    found = sorted(names)
    listed = found[0] if len(found) == 1 else f"{', '.join(found[:-1])} and {found[-1]}"
    them = "it" if len(found) == 1 else "them"
    return StoreUnavailable(
        f"the nilo_jobs table in {where} lacks {listed}, "
        f"{'a table' if len(found) == 1 else 'tables'} beside it that this nilo-job needs: "
        f"run `nilo-job migrate {target}` to create {them} (every row is kept), or, where "
        "Alembic manages the schema, autogenerate a migration (`alembic revision "
        "--autogenerate`) and run it (`alembic upgrade head`)"
    )


def no_such_table(where: str, target: str, name: str | None) -> StoreUnavailable:
    """The error for a statement that met no table `name` (None: the database did not say
    which table)."""
    if name is None or name == "nilo_jobs":
        return no_table(where, target)
    if name in SIDE_TABLES:
        return missing_tables(where, target, [name])
    return StoreUnavailable(f"there is no table {name} in {where}")


def older(where: str, target: str, found: int | str) -> StoreUnavailable:
    """The error for a table from an older nilo-job (`found` is its version, or a word)."""
    return StoreUnavailable(
        f"the nilo_jobs table in {where} is at version {found}, from an older nilo-job, and "
        f"this one needs version {VERSION}: run `nilo-job migrate {target}` to upgrade it in "
        "place (every row is kept, and workers of the older version keep working on it)"
    )


def check(where: str, target: str, columns: set[str], recorded: Recorded, tables: set[str]) -> None:
    """Answer when the table in `where` (migrated with `nilo-job migrate target`) is one this
    version reads and writes, with the tables beside it (`tables`: those of `SIDE_TABLES` the
    database has).

    Raises:
        StoreUnavailable: there is no table, it is not nilo-job's, it is older (run `nilo-job
            migrate`), or newer (upgrade nilo-job), or a table beside it is missing; the
            sentence says which.
    """
    if not columns:
        raise no_table(where, target)
    if recorded is not None and recorded[0] > VERSION and recorded[1] > VERSION:
        raise _newer(recorded[0], where)
    if missing := COLUMNS_1 - columns:
        raise StoreUnavailable(
            f"the nilo_jobs table in {where} is not nilo-job's: it lacks "
            f"{', '.join(sorted(missing))}"
        )
    if COLUMNS - columns:
        raise older(where, target, version_of(columns, recorded))
    if recorded is not None and recorded[0] < VERSION:
        # A step that adds a table of its own (versions 6, 7) changes no column: the record says.
        raise older(where, target, recorded[0])
    if missing := SIDE_TABLES - tables:
        # A table the columns or the record call current, whose tables beside it are not all
        # there: an Alembic-managed schema not migrated since an upgrade, or a table dropped.
        raise missing_tables(where, target, missing)


def _newer(version: int, where: str) -> StoreUnavailable:
    return StoreUnavailable(
        f"the nilo_jobs table in {where} is at version {version}, from a newer nilo-job than this "
        f"one can work on (it knows up to version {VERSION}): upgrade nilo-job here"
    )
