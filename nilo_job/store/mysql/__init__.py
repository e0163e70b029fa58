"""The MariaDB/MySQL store: `job.Table("mysql://…")` or `job.Table("mariadb://…")`, through
asyncmy.

store.py        the calls: what each sends and what it answers
statements.py   the statements' texts and parameters (lists spelled out, keyset pages)
connections.py  the server a URL names, the store's pool, forks, bounds, errors as sentences
queries.sql     the statements, one `-- name:` each
"""

from .statements import SQL
from .store import MysqlTable

__all__ = ["SQL", "MysqlTable"]
