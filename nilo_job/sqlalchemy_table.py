"""The `nilo_jobs` table as a SQLAlchemy `Table`, for applications that migrate with Alembic.

    from nilo_job.sqlalchemy_table import nilo_jobs_table
    nilo_jobs_table(Base.metadata)      # then `alembic revision --autogenerate`

It matches the PostgreSQL DDL in `nilo_job/store/postgres.sql` (also `table.ddl`); a test
compares the two through the database's own catalog.
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
    """Add `nilo_jobs`, its check and its four indexes to `metadata`, and return the table."""
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
    )
