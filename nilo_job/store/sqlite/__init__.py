"""The SQLite store: `job.Table("sqlite:///app.db")`, on the standard library's `sqlite3`.

store.py        the calls: what each sends and what it answers
connections.py  one connection per thread, and the writes on the event loop's thread
wake.py         how processes on one database file wake each other
queries.sql     the statements, one `-- name:` each
"""

from .store import SQL, SqliteTable

__all__ = ["SQL", "SqliteTable"]
