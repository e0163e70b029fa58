"""The PostgreSQL store: `job.Table("postgresql://…")` or `job.Table(pool)`, through psycopg 3.

store.py        the calls: what each sends and what it answers
statements.py   the statements' texts and parameters
connections.py  where each call finds its connection (pools, kept connections, forks)
listen.py       LISTEN nilo_jobs: other processes' pushes wake this one's workers
pooler.py       behind PgBouncer in transaction mode
schema.py       the table's version, checked and upgraded in place
queries.sql     the statements, one `-- name:` each
"""

from .statements import SQL
from .store import PostgresTable

__all__ = ["SQL", "PostgresTable"]
