"""The `nilo_jobs` table as a SQLAlchemy `Table`, for applications that migrate with Alembic.

    from nilo_job.sqlalchemy_table import nilo_jobs_table
    nilo_jobs_table(Base.metadata)      # then `alembic revision --autogenerate`

It matches the PostgreSQL DDL that `table.ddl` gives; a test
compares the two through the database's own catalog, and another runs Alembic's autogenerate
over it (docs/alembic.md).

`nilo_jobs_version` is in the metadata too, so that autogenerate neither misses it nor proposes
to drop it once `nilo-job migrate` has made it; a migration leaves it empty, and with no record
nilo-job tells the table's version by its columns.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    Identity,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    text,
)


def nilo_jobs_table(metadata: MetaData) -> Table:
    """Add `nilo_jobs`, its check and its five indexes to `metadata`, with the six tables
    beside it (`nilo_jobs_done`, the history of done rows, `nilo_jobs_paused`, the paused kinds,
    `nilo_jobs_workers`, the registry of serving processes, `nilo_jobs_attempts`, each row's
    attempts, `nilo_jobs_deaths`, deaths counted by the minute, and `nilo_jobs_version`, the
    version `nilo-job migrate` records), and return `nilo_jobs`.

    Args:
        metadata: your application's `sqlalchemy.MetaData` (Alembic's `target_metadata`).

    Returns:
        The `nilo_jobs` `sqlalchemy.Table`.

    Raises:
        sqlalchemy.exc.InvalidRequestError: `metadata` already holds a table of one of these
            names (call this once per `MetaData`).
    """
    Table(
        "nilo_jobs_version",
        metadata,
        Column("version", Integer, nullable=False),
        Column("compatible_from", Integer, nullable=False),
    )
    Table(
        "nilo_jobs_done",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=False),
        Column("kind", Text, nullable=False),
        Column("payload", JSON, nullable=False),
        Column("unique_key", Text),
        Column("run_at", BigInteger, nullable=False),
        Column("pushed_at", BigInteger),
        Column("started_at", BigInteger),
        Column("finished_at", BigInteger, nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("worker", Text),
        Column("error", Text),
        Column("detail", Text),
        Column("result", Text),
        Index("nilo_jobs_done_finished", "finished_at", "id"),
        Index("nilo_jobs_done_kind", "kind", "finished_at", "id"),
    )
    Table(
        "nilo_jobs_workers",
        metadata,
        Column("id", Text, primary_key=True),
        Column("host", Text, nullable=False),
        Column("pid", Integer, nullable=False),
        Column("version", Text, nullable=False),
        Column("kinds", Text, nullable=False),
        Column("workers", Integer, nullable=False),
        Column("beat_ms", Integer, nullable=False),
        Column("started_at", BigInteger, nullable=False),
        Column("beat_at", BigInteger, nullable=False),
        Column("running", Text, nullable=False),
        Index("nilo_jobs_workers_beat", "beat_at"),
    )
    Table(
        "nilo_jobs_attempts",
        metadata,
        Column("id", BigInteger, Identity(always=True), primary_key=True),
        Column("row_id", BigInteger, nullable=False),
        Column("attempt", Integer, nullable=False),
        Column("started_at", BigInteger),
        Column("ended_at", BigInteger, nullable=False),
        Column("worker", Text),
        Column("outcome", Text, nullable=False),
        Column("error", Text),
        Column("detail", Text),
        Column("traceback", Text),
        Index("nilo_jobs_attempts_row", "row_id", "id"),
    )
    Table(
        "nilo_jobs_deaths",
        metadata,
        Column("kind", Text, primary_key=True),
        Column("minute", BigInteger, primary_key=True),
        Column("deaths", Integer, nullable=False),
    )
    Table(
        "nilo_jobs_paused",
        metadata,
        Column("kind", Text, primary_key=True),
        Column("paused_at", BigInteger, nullable=False),
    )
    return Table(
        "nilo_jobs",
        metadata,
        Column("id", BigInteger, Identity(always=True), primary_key=True),
        Column("kind", Text, nullable=False),
        Column("payload", JSON, nullable=False),
        Column("state", Text, nullable=False),
        Column("run_at", BigInteger, nullable=False),
        Column("lease_until", BigInteger),
        Column("attempts", Integer, nullable=False, server_default=text("0")),
        Column("unique_key", Text),
        Column("error", Text),
        Column("detail", Text),
        Column("died_at", BigInteger),
        Column("traceback", Text),
        Column("pushed_at", BigInteger),
        Column("started_at", BigInteger),
        Column("worker", Text),
        Column("snoozes", Integer, nullable=False, server_default=text("0")),
        Column("trace", Text),
        CheckConstraint("state IN ('queued', 'running', 'dead')", name="nilo_jobs_state_check"),
        Index(
            "nilo_jobs_unique",
            "kind",
            "unique_key",
            unique=True,
            postgresql_where=text("unique_key IS NOT NULL"),
        ),
        Index("nilo_jobs_due", "run_at", "id", postgresql_where=text("state = 'queued'")),
        Index("nilo_jobs_lease", "lease_until", "id", postgresql_where=text("state = 'running'")),
        Index("nilo_jobs_dead", "died_at", "id", postgresql_where=text("state = 'dead'")),
        Index(
            "nilo_jobs_dead_kind",
            "kind",
            "died_at",
            "id",
            postgresql_where=text("state = 'dead'"),
        ),
    )
