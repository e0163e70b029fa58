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

from dataclasses import dataclass, field
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
from sqlalchemy.types import TypeEngine

from . import Refusal

COLLATIONS = {"mariadb": "utf8mb4_nopad_bin", "mysql": "utf8mb4_0900_bin"}
"""The binary collation that does not pad, which the MariaDB/MySQL store gives its tables."""


@dataclass(frozen=True)
class _Types:
    """What differs between the databases' tables: the types of a kind, a key or an id (`key`),
    of a payload, of long texts (tracebacks, results, lists), of a row's state and of an
    attempt's outcome; whether ids are identities; the tables' options."""

    key: TypeEngine[Any]
    payload: TypeEngine[Any]
    long: TypeEngine[Any]
    state: TypeEngine[Any]
    outcome: TypeEngine[Any]
    identity: bool
    options: dict[str, Any] = field(default_factory=dict)
    plain: dict[str, Any] = field(default_factory=dict)  # nilo_jobs_version's, no text in it


def _types(database: str) -> _Types:
    if database == "postgresql":
        return _Types(Text(), JSON(), Text(), Text(), Text(), identity=True)
    collation = COLLATIONS[database]
    innodb: dict[str, Any] = {"mysql_engine": "InnoDB", "mariadb_engine": "InnoDB"}
    options: dict[str, Any] = {
        **innodb,
        **{f"{name}_charset": "utf8mb4" for name in ("mysql", "mariadb")},
        **{f"{name}_collate": collation for name in ("mysql", "mariadb")},
    }
    return _Types(
        String(255),
        mysql.LONGTEXT(),
        mysql.MEDIUMTEXT(),
        String(7),
        String(8),
        identity=False,
        options=options,
        plain=innodb,
    )


def _id(types: _Types) -> Column[Any]:
    """A row's id, made by the database."""
    if types.identity:
        return Column("id", BigInteger, Identity(always=True), primary_key=True)
    return Column("id", BigInteger, primary_key=True, autoincrement=True)


def _queue_indexes(database: str) -> list[Index]:
    """`nilo_jobs`' indexes: PostgreSQL's are partial (one state each); MariaDB and MySQL have
    none, so theirs lead with the state, and a claim's arm reads its kinds' range of it."""
    if database == "postgresql":
        queued, running, dead = (text(f"state = '{s}'") for s in ("queued", "running", "dead"))
        return [
            Index(
                "nilo_jobs_unique",
                "kind",
                "unique_key",
                unique=True,
                postgresql_where=text("unique_key IS NOT NULL"),
            ),
            Index("nilo_jobs_due", "run_at", "id", postgresql_where=queued),
            Index("nilo_jobs_lease", "lease_until", "id", postgresql_where=running),
            Index("nilo_jobs_dead", "died_at", "id", postgresql_where=dead),
            Index("nilo_jobs_dead_kind", "kind", "died_at", "id", postgresql_where=dead),
        ]
    return [
        Index("nilo_jobs_unique", "kind", "unique_key", unique=True),
        Index("nilo_jobs_due", "state", "kind", "run_at", "id"),
        Index("nilo_jobs_lease", "state", "kind", "lease_until", "id"),
        Index("nilo_jobs_order", "state", "run_at", "id"),
        Index("nilo_jobs_dead", "state", "died_at", "id"),
        Index("nilo_jobs_dead_kind", "state", "kind", "died_at", "id"),
    ]


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
    t = _types(database)
    Table(
        "nilo_jobs_version",
        metadata,
        Column("version", Integer, nullable=False),
        Column("compatible_from", Integer, nullable=False),
        **t.plain,
    )
    Table(
        "nilo_jobs_done",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=False),
        Column("kind", t.key, nullable=False),
        Column("payload", t.payload, nullable=False),
        Column("unique_key", t.key),
        Column("run_at", BigInteger, nullable=False),
        Column("pushed_at", BigInteger),
        Column("started_at", BigInteger),
        Column("finished_at", BigInteger, nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("worker", Text),
        Column("error", Text),
        Column("detail", Text),
        Column("result", t.long),
        Index("nilo_jobs_done_finished", "finished_at", "id"),
        Index("nilo_jobs_done_kind", "kind", "finished_at", "id"),
        **t.options,
    )
    Table(
        "nilo_jobs_workers",
        metadata,
        Column("id", t.key, primary_key=True),
        Column("host", Text, nullable=False),
        Column("pid", Integer, nullable=False),
        Column("version", Text, nullable=False),
        Column("kinds", t.long, nullable=False),
        Column("workers", Integer, nullable=False),
        Column("beat_ms", Integer, nullable=False),
        Column("started_at", BigInteger, nullable=False),
        Column("beat_at", BigInteger, nullable=False),
        Column("running", t.long, nullable=False),
        Index("nilo_jobs_workers_beat", "beat_at"),
        **t.options,
    )
    Table(
        "nilo_jobs_attempts",
        metadata,
        _id(t),
        Column("row_id", BigInteger, nullable=False),
        Column("attempt", Integer, nullable=False),
        Column("started_at", BigInteger),
        Column("ended_at", BigInteger, nullable=False),
        Column("worker", Text),
        Column("outcome", t.outcome, nullable=False),
        Column("error", Text),
        Column("detail", Text),
        Column("traceback", t.long),
        Index("nilo_jobs_attempts_row", "row_id", "id"),
        **t.options,
    )
    Table(
        "nilo_jobs_deaths",
        metadata,
        Column("kind", t.key, primary_key=True),
        Column("minute", BigInteger, primary_key=True, autoincrement=False),
        Column("deaths", Integer, nullable=False),
        **t.options,
    )
    Table(
        "nilo_jobs_paused",
        metadata,
        Column("kind", t.key, primary_key=True),
        Column("paused_at", BigInteger, nullable=False),
        **t.options,
    )
    check = "nilo_jobs_state_check" if database == "postgresql" else "nilo_jobs_state"
    return Table(
        "nilo_jobs",
        metadata,
        _id(t),
        Column("kind", t.key, nullable=False),
        Column("payload", t.payload, nullable=False),
        Column("state", t.state, nullable=False),
        Column("run_at", BigInteger, nullable=False),
        Column("lease_until", BigInteger),
        Column("attempts", Integer, nullable=False, server_default=text("0")),
        Column("unique_key", t.key),
        Column("error", Text),
        Column("detail", Text),
        Column("died_at", BigInteger),
        Column("traceback", t.long),
        Column("pushed_at", BigInteger),
        Column("started_at", BigInteger),
        Column("worker", Text),
        Column("snoozes", Integer, nullable=False, server_default=text("0")),
        Column("trace", Text),
        CheckConstraint("state IN ('queued', 'running', 'dead')", name=check),
        *_queue_indexes(database),
        **t.options,
    )
