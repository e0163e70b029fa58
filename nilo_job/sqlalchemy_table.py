"""The `nilo_jobs` table as a SQLAlchemy `Table`, for applications that migrate with Alembic.

    from nilo_job.sqlalchemy_table import nilo_jobs_table
    nilo_jobs_table(Base.metadata)      # then `alembic revision --autogenerate`
    nilo_jobs_table(Base.metadata, database="mariadb")      # or "mysql"

It matches the PostgreSQL DDL that `table.ddl` gives; a test
compares the two through the database's own catalog, and another runs Alembic's autogenerate
over it (docs/alembic.md). With `database="mariadb"` or `"mysql"` it matches what the MariaDB
and MySQL store creates instead (docs/mysql.md): its types, its collation, and its indexes,
which lead with the state where PostgreSQL's are partial.

`nilo_jobs_version` is in the metadata too, so that autogenerate neither misses it nor proposes
to drop it once `nilo-job migrate` has made it; a migration leaves it empty, and with no record
nilo-job tells the table's version by its columns.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    Identity,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects import mysql

from . import Refusal

COLLATIONS = {"mariadb": "utf8mb4_nopad_bin", "mysql": "utf8mb4_0900_bin"}
"""The binary collation that does not pad, which the MariaDB/MySQL store gives its tables."""


def nilo_jobs_table(metadata: MetaData, database: str = "postgresql") -> Table:
    """Add `nilo_jobs`, its check and its indexes to `metadata`, with the six tables
    beside it (`nilo_jobs_done`, the history of done rows, `nilo_jobs_paused`, the paused kinds,
    `nilo_jobs_workers`, the registry of serving processes, `nilo_jobs_attempts`, each row's
    attempts, `nilo_jobs_deaths`, deaths counted by the minute, and `nilo_jobs_version`, the
    version `nilo-job migrate` records), and return `nilo_jobs`.

    Args:
        metadata: your application's `sqlalchemy.MetaData` (Alembic's `target_metadata`).
        database: the server the tables are for: `"postgresql"` (the default), `"mariadb"` or
            `"mysql"`, each as its store creates them. MariaDB's and MySQL's differ only in
            their collation (`utf8mb4_nopad_bin`, `utf8mb4_0900_bin`); those tables carry it
            for both of SQLAlchemy's dialect names, `mysql` and `mariadb`.

    Returns:
        The `nilo_jobs` `sqlalchemy.Table`.

    Raises:
        sqlalchemy.exc.InvalidRequestError: `metadata` already holds a table of one of these
            names (call this once per `MetaData`).
        nilo_job.Refusal: `database` is none of those three.
    """
    if database not in ("postgresql", "mariadb", "mysql"):
        raise Refusal(
            f"nilo_jobs_table(database={database!r}): the tables are for 'postgresql', "
            "'mariadb' or 'mysql'"
        )
    if database != "postgresql":
        return _mysql_tables(metadata, COLLATIONS[database])
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


def _mysql_tables(metadata: MetaData, collation: str) -> Table:
    """The tables as the MariaDB/MySQL store creates them, in `collation`: `varchar(255)` for a
    kind, a key or the registry's id, `longtext` payloads, `mediumtext` tracebacks, results and
    lists, and the indexes of `nilo_jobs` leading with the state."""
    innodb: dict[str, Any] = {"mysql_engine": "InnoDB", "mariadb_engine": "InnoDB"}
    options: dict[str, Any] = {
        **innodb,
        **{f"{name}_charset": "utf8mb4" for name in ("mysql", "mariadb")},
        **{f"{name}_collate": collation for name in ("mysql", "mariadb")},
    }
    Table(
        "nilo_jobs_version",
        metadata,
        Column("version", Integer, nullable=False),
        Column("compatible_from", Integer, nullable=False),
        **innodb,
    )
    Table(
        "nilo_jobs_done",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=False),
        Column("kind", String(255), nullable=False),
        Column("payload", mysql.LONGTEXT, nullable=False),
        Column("unique_key", String(255)),
        Column("run_at", BigInteger, nullable=False),
        Column("pushed_at", BigInteger),
        Column("started_at", BigInteger),
        Column("finished_at", BigInteger, nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("worker", Text),
        Column("error", Text),
        Column("detail", Text),
        Column("result", mysql.MEDIUMTEXT),
        Index("nilo_jobs_done_finished", "finished_at", "id"),
        Index("nilo_jobs_done_kind", "kind", "finished_at", "id"),
        **options,
    )
    Table(
        "nilo_jobs_workers",
        metadata,
        Column("id", String(255), primary_key=True),
        Column("host", Text, nullable=False),
        Column("pid", Integer, nullable=False),
        Column("version", Text, nullable=False),
        Column("kinds", mysql.MEDIUMTEXT, nullable=False),
        Column("workers", Integer, nullable=False),
        Column("beat_ms", Integer, nullable=False),
        Column("started_at", BigInteger, nullable=False),
        Column("beat_at", BigInteger, nullable=False),
        Column("running", mysql.MEDIUMTEXT, nullable=False),
        Index("nilo_jobs_workers_beat", "beat_at"),
        **options,
    )
    Table(
        "nilo_jobs_attempts",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=True),
        Column("row_id", BigInteger, nullable=False),
        Column("attempt", Integer, nullable=False),
        Column("started_at", BigInteger),
        Column("ended_at", BigInteger, nullable=False),
        Column("worker", Text),
        Column("outcome", String(8), nullable=False),
        Column("error", Text),
        Column("detail", Text),
        Column("traceback", mysql.MEDIUMTEXT),
        Index("nilo_jobs_attempts_row", "row_id", "id"),
        **options,
    )
    Table(
        "nilo_jobs_deaths",
        metadata,
        Column("kind", String(255), primary_key=True),
        Column("minute", BigInteger, primary_key=True, autoincrement=False),
        Column("deaths", Integer, nullable=False),
        **options,
    )
    Table(
        "nilo_jobs_paused",
        metadata,
        Column("kind", String(255), primary_key=True),
        Column("paused_at", BigInteger, nullable=False),
        **options,
    )
    return Table(
        "nilo_jobs",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=True),
        Column("kind", String(255), nullable=False),
        Column("payload", mysql.LONGTEXT, nullable=False),
        Column("state", String(7), nullable=False),
        Column("run_at", BigInteger, nullable=False),
        Column("lease_until", BigInteger),
        Column("attempts", Integer, nullable=False, server_default=text("0")),
        Column("unique_key", String(255)),
        Column("error", Text),
        Column("detail", Text),
        Column("died_at", BigInteger),
        Column("traceback", mysql.MEDIUMTEXT),
        Column("pushed_at", BigInteger),
        Column("started_at", BigInteger),
        Column("worker", Text),
        Column("snoozes", Integer, nullable=False, server_default=text("0")),
        Column("trace", Text),
        CheckConstraint("state IN ('queued', 'running', 'dead')", name="nilo_jobs_state"),
        Index("nilo_jobs_unique", "kind", "unique_key", unique=True),
        Index("nilo_jobs_due", "state", "kind", "run_at", "id"),
        Index("nilo_jobs_lease", "state", "kind", "lease_until", "id"),
        Index("nilo_jobs_order", "state", "run_at", "id"),
        Index("nilo_jobs_dead", "state", "died_at", "id"),
        Index("nilo_jobs_dead_kind", "state", "kind", "died_at", "id"),
        **options,
    )
