"""The PostgreSQL store: `job.Table("postgresql://…")` or `job.Table(pool)`, through psycopg 3.

Any number of worker processes on any number of hosts share one table. The claim is one statement
with `FOR UPDATE SKIP LOCKED` that takes as many rows as it is asked for (kinds with a concurrency
limit are counted and claimed in one transaction, each under an advisory lock of its own); the
unique index gives `unique` its verdict (`ON CONFLICT … DO NOTHING RETURNING`); every push sends
`NOTIFY nilo_jobs` with the row's due time (never the payload), delivered when its transaction
commits, and `watch` listens for it so idle workers in other processes start at once, or when
the row falls due.

This module holds what each call sends and what it answers; the statements' parameters are
built in `statements`, where each finds its connection (pools, the connections kept beside
them, forks) is `connections`, and the listener `listen`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from ..._base.bounds import PAYLOAD_BYTES, whole
from ..._base.errors import Refusal, is_int
from ..._base.text import count_of
from ..._base.values import Stats
from .. import _schema
from .._sql import (
    attempt_of,
    attempt_values,
    count_statement,
    dead_row,
    death_values,
    entry_params,
    find_statement,
    lost_values,
    row_view,
    unwrap_django,
    worker_entry,
)
from .._target import misread, scrubbed, shown, user_at
from ..contract import (
    LISTED_CHARS,
    MAX_PAYLOAD,
    Claimed,
    DeadRow,
    Died,
    Done,
    End,
    HeldBack,
    NewRow,
    Rebuilt,
    RowView,
    Where,
    WorkerEntry,
    check_state,
    limited,
)
from .bounds import ANSWER_MS, MOST_ANSWER_MS
from .connections import Connections, where
from .listen import listen
from .pooler import check_pool, read_pooler
from .rebuild import rebuild_swollen
from .schema import check_schema, upgrade
from .statements import (
    SQL,
    delete_done,
    end_sql,
    insert,
    insert_statement,
    keep_params,
    params,
    texts,
)

ACCEPTED_TX = (
    "a psycopg Connection or AsyncConnection in a transaction, or a SQLAlchemy Session, "
    "AsyncSession, Connection or AsyncConnection, or Django's connection inside "
    "transaction.atomic()"
)


class PostgresTable:
    """The `nilo_jobs` table in a PostgreSQL database.

    Args:
        target: a `postgresql://` connection string, or a `psycopg_pool.AsyncConnectionPool`
            the application already has (it stays the application's: `close` leaves it open).
        max_size: the most connections the store's own pool opens (with a URL only).
        pooler: True: `target` reaches the server through a pooler in transaction mode, such
            as PgBouncer's `pool_mode = transaction` (also `?nilo_pooler=true` in the URL): no
            statement is prepared on the server and no session setting is relied on. None (the
            default): the store looks for one as it opens, and at the first error only such a
            pooler makes, and then does the same, with one WARNING that says what to set.
            False (`?nilo_pooler=false`): no pooler in transaction mode; the store does not
            look as it opens (a pooler in session mode keeps sessions, and LISTEN, working).
        listen_url: the server's direct `postgresql://` URL, for the one connection serve
            keeps in LISTEN (also `?nilo_listen_url=` in the URL, percent-encoded); with
            `pooler` and none given, serve does not listen and finds other processes' rows by
            its poll (`poll_ms`).
        answer_ms: how long the server has to answer one call, in milliseconds (default
            10,000; from 100 to 86,400,000). A call not answered in time (a connection a NAT
            or a firewall forgot, a partition, a server host that stopped) has its connection
            closed and raises `StoreUnavailable` naming the call, so no push, claim or end
            waits longer. A call over many rows (`push_many`) gets it once per 10,000 rows;
            migrations get no bound; `statement_timeout` in the URL's `options` makes it that
            and a second more when longer, or none when 0. The URL's own `connect_timeout`
            (else 10 s), `tcp_user_timeout` (else 30 s, or `answer_ms` when longer) and
            `keepalives*` (else on: 30 s idle, every 10 s, 3 probes) are kept as given.
        max_payload: the largest payload one row may carry, in bytes of JSON (1 MiB by
            default; from 1 to 1,000,000,000): the queue refuses a larger push with
            `PayloadTooLarge`, before this store is called.

    Raises:
        Refusal: `target` is neither, or `pooler` / `listen_url` / `answer_ms` /
            `max_payload` / the URL's `connect_timeout`, `tcp_user_timeout` or `keepalives*`
            cannot be used as given.
    """

    def __init__(
        self,
        target: str | AsyncConnectionPool[Any],
        *,
        max_size: int = 10,
        pooler: bool | None = None,
        listen_url: str | None = None,
        answer_ms: int = ANSWER_MS,
        max_payload: int = MAX_PAYLOAD,
    ) -> None:
        whole(max_payload, PAYLOAD_BYTES, "job.Table(..., max_payload={})", "max_payload")
        self.max_payload = max_payload
        if not is_int(answer_ms, 100, MOST_ANSWER_MS):
            raise Refusal(
                f"job.Table(..., answer_ms={answer_ms!r}): whole milliseconds, from 100 to "
                f"{MOST_ANSWER_MS:,} (a day)"
            )
        if isinstance(target, str):
            said = read_pooler(target, pooler, listen_url)
            if (wrong := misread(said.conninfo)) is not None:
                raise Refusal(f"job.Table({shown(target)!r}) cannot be read as meant: {wrong}")
            try:
                conninfo_to_dict(said.conninfo)
            except psycopg.ProgrammingError as error:
                raise Refusal(
                    f"job.Table({shown(target)!r}) is not a connection string PostgreSQL "
                    f"reads: {scrubbed(str(error).strip(), target)}"
                ) from None
            self.conninfo = said.conninfo
            pool = None
        elif isinstance(target, AsyncConnectionPool):
            said = read_pooler("", pooler, listen_url)
            if said.pooler:
                check_pool(target.kwargs)
            self.conninfo = str(target.conninfo)
            if (wrong := misread(self.conninfo)) is not None:
                raise Refusal(
                    f"job.Table(a pool on {shown(self.conninfo)!r}): its URL cannot be read as "
                    f"meant: {wrong}"
                )
            pool = target
        else:
            raise Refusal(
                f"job.Table({shown(target)}): pass 'postgresql://user@host/db' or a "
                "psycopg_pool.AsyncConnectionPool"
            )
        self.max_size = max_size
        self.answer_ms = answer_ms
        self.pooler, self.listen_url = said.pooler, said.listen_url
        self._connections = Connections(
            self.conninfo, pool, max_size, self._target(), pooler=said.pooler,
            listen_url=said.listen_url, answer_ms=answer_ms,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"job.Table('postgresql://{user_at(self.conninfo)}{where(self.conninfo)}')"

    @property
    def bound_ms(self) -> int:
        """The longest one call waits for its answer, in milliseconds: `answer_ms`, or the URL's
        `statement_timeout` and a second when that is longer."""
        seconds = self._connections.bound_s
        return self.answer_ms if seconds is None else round(seconds * 1_000)

    @property
    def ddl(self) -> str:
        """The statements that create the table and its indexes, as text."""
        return SQL["create"]

    # ------------------------------------------------------------------------------ plumbing

    async def open(self) -> None:
        await self._connections.get_pool()

    async def close(self) -> None:
        await self._connections.close()

    async def ping(self) -> None:
        await self._one("SELECT 1", what="a ping")

    async def now_us(self) -> int | None:
        """The database's clock, in microseconds since the epoch."""
        row = await self._one(SQL["now"], what="a reading of its clock")
        return int(row[0])

    async def create_missing(self) -> None:
        """Create `nilo_jobs` and its indexes where missing, or bring an older table up to this
        version in place, keeping every row (idempotent, safe to race, and safe while workers
        run: each step adds a nullable column, which rewrites no row).

        Raises:
            StoreUnavailable: the table is from a newer nilo-job, or the server cannot be
                reached or would not give the table's lock within 10 s.
        """

        where = repr(self)
        await self._connections.run(
            lambda conn: upgrade(conn, where), "the upgrade of the table", bounded=False
        )

    async def check(self) -> None:
        try:
            columns, recorded, tables = await self._connections.run(
                check_schema, "the check of the table", transaction=False
            )
        except psycopg.errors.InsufficientPrivilege as error:
            said = error.diag.message_primary or str(error)
            raise _schema.not_readable(repr(self), said) from error
        _schema.check(repr(self), self._target(), columns, recorded, tables)

    def _target(self) -> str:
        """The URL an operator passes to `nilo-job migrate`, without its password (`shown`)."""
        if self.conninfo.startswith(("postgresql://", "postgres://")):
            return shown(self.conninfo)
        user = conninfo_to_dict(self.conninfo).get("user")  # (a pool's keyword string)
        return f"postgresql://{f'{user}@' if user else ''}{where(self.conninfo)}"

    # ---------------------------------------------------------------------------------- rows

    async def push(self, rows: Sequence[NewRow]) -> list[int | None]:
        if len(rows) > 1 and all(row.unique_key is None for row in rows):
            return await self._push_bulk(rows)

        if len(rows) == 1:
            # One row is one statement, which commits on its own: one round trip, not three.
            query, params = insert_statement(rows[0])

            async def one(cur: psycopg.AsyncCursor[Any]) -> list[int | None]:
                found = await (await cur.execute(query, params)).fetchone()
                return [None if found is None else int(found[0])]

            return await self._connections.kept_run(one, "push", "a push")

        async def push(conn: psycopg.AsyncConnection[Any]) -> list[int | None]:
            return [await insert(conn, row) for row in rows]

        return await self._connections.run(push, f"a push of {count_of(len(rows), 'row')}")

    async def _push_bulk(self, rows: Sequence[NewRow]) -> list[int | None]:
        """Rows without unique keys in one statement, one NOTIFY for all of them.

        With no key nothing can conflict, and an identity hands out increasing ids in the order
        the rows are inserted, so the sorted ids are the rows' ids in order.
        """
        params = {
            "kinds": [row.kind for row in rows],
            "payloads": [row.payload.decode() for row in rows],
            "run_ats": [row.run_at for row in rows],
            "leases": [row.lease_until for row in rows],
            "pushed_ats": [row.pushed_at for row in rows],
            "workers": [row.worker for row in rows],
            "traces": [row.trace for row in rows],
        }

        async def bulk(conn: psycopg.AsyncConnection[Any]) -> list[int | None]:
            cur = await conn.execute(SQL["push_bulk"], params)
            return [*sorted(int(found[0]) for found in await cur.fetchall())]

        return await self._connections.run(
            bulk, f"a push of {count_of(len(rows), 'row')}", transaction=False, rows=len(rows)
        )

    async def push_in(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        tx = unwrap_django(tx)
        if isinstance(tx, psycopg.AsyncConnection):
            _check_in_transaction(tx.info.transaction_status, tx.autocommit, awaited=True)
            return [await insert(tx, row) for row in rows]
        if _is_async_sqlalchemy(tx):
            from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

            assert isinstance(tx, AsyncSession | AsyncConnection)
            statement = _sqlalchemy_push()
            answers: list[int | None] = []
            for row in rows:
                found = (await tx.execute(statement, params(row))).first()
                answers.append(None if found is None else int(found[0]))
            return answers
        return self.push_in_now(tx, rows)

    def push_in_now(self, tx: object, rows: Sequence[NewRow]) -> list[int | None]:
        """`push_in` through a synchronous transaction (a psycopg `Connection`, a SQLAlchemy
        `Session` or `Connection`, Django's `connection`), in the caller's thread.

        Raises:
            Refusal: `tx` must be awaited, or is none this store can write through.
        """
        tx = unwrap_django(tx)
        answers: list[int | None] = []
        if isinstance(tx, psycopg.Connection):
            _check_in_transaction(tx.info.transaction_status, tx.autocommit, awaited=False)
            for row in rows:
                found = tx.execute(*insert_statement(row)).fetchone()
                answers.append(None if found is None else found[0])
            return answers
        if isinstance(tx, psycopg.AsyncConnection) or _is_async_sqlalchemy(tx):
            raise Refusal(
                f"jobs.sync.push_in got a {type(tx).__qualname__}, which must be awaited: use "
                "await jobs.push_in(...) with an async connection or session"
            )
        if type(tx).__module__.startswith("sqlalchemy"):
            from sqlalchemy import Connection
            from sqlalchemy.orm import Session

            if isinstance(tx, Session | Connection):
                statement = _sqlalchemy_push()
                for row in rows:
                    found = tx.execute(statement, params(row)).first()
                    answers.append(None if found is None else int(found[0]))
                return answers
        raise Refusal(f"push_in got a {type(tx).__qualname__}; this store accepts {ACCEPTED_TX}")

    async def claim(
        self,
        kinds: Sequence[str],
        now_us: int,
        lease_until_us: int,
        limit: int,
        worker: str | None = None,
        limits: Mapping[str, int] | None = None,
        due_from_us: int | None = None,
    ) -> list[Claimed]:
        if limits:
            return await self._claim_limited(kinds, now_us, lease_until_us, limit, worker, limits)
        params = {
            "now": now_us,
            "lease_until": lease_until_us,
            "limit": limit,
            "kinds": texts(tuple(kinds)),
            "worker": worker,
            "from": due_from_us,
        }
        statement = SQL["claim"] if due_from_us is None else SQL["claim_from"]

        async def claim(cur: psycopg.AsyncCursor[Any]) -> list[Claimed]:
            await cur.execute(statement, params)
            return [
                Claimed(r[0], r[1], r[2].encode(), r[3], r[4], r[5], None, r[6], r[7], r[8])
                for r in await cur.fetchall()
            ]

        # serve's claims come one at a time: on the connection kept for them.
        claimed = await self._connections.kept_run(claim, "claim", "a claim")
        claimed.sort(key=lambda row: (row.run_at, row.id))
        return claimed

    async def _claim_limited(
        self,
        kinds: Sequence[str],
        now_us: int,
        lease_until_us: int,
        limit: int,
        worker: str | None,
        limits: Mapping[str, int],
    ) -> list[Claimed]:
        """`claim` with `limits`, in one transaction: for each limited kind, its lock
        (`lock_kind`, held until the transaction ends), its live leases counted, then at most
        its room claimed (the `claim` statement, for that kind alone); then the other kinds
        with what is left. All of it, or nothing, is claimed."""
        free, capped = limited(kinds, limits)
        params = {"now": now_us, "lease_until": lease_until_us, "worker": worker}

        async def claim(conn: psycopg.AsyncConnection[Any]) -> list[Claimed]:
            taken: list[Claimed] = []
            for kind, most in capped:
                room = limit - len(taken)
                if room <= 0:
                    break
                await conn.execute(SQL["lock_kind"], {"kind": kind})
                cur = await conn.execute(SQL["running"], {"now": now_us, "kind": kind})
                found = await cur.fetchone()
                room = min(room, most - (found[0] if found is not None else 0))
                if room > 0:
                    some = {**params, "kinds": texts((kind,)), "limit": room}
                    taken += await _claimed(await conn.execute(SQL["claim"], some))
            if free and len(taken) < limit:
                rest = {**params, "kinds": texts(tuple(free)), "limit": limit - len(taken)}
                taken += await _claimed(await conn.execute(SQL["claim"], rest))
            return taken

        claimed = await self._connections.run(claim, "a claim", work=True)
        claimed.sort(key=lambda row: (row.run_at, row.id))
        return claimed

    async def finish(self, ends: Sequence[End]) -> list[bool]:
        plain = [
            end
            for end in ends
            if isinstance(end, Done) and end.then is None and end.lost_from is None
        ]
        if len(plain) == len(ends):
            # The common case, a batch of runs that simply finished: one statement, on the
            # connection kept for serve's ends (its groups are written one at a time).
            return await self._connections.kept_run(
                lambda cur: delete_done(cur, plain), "end", _ends(len(ends)), rows=len(ends)
            )

        async def apply(conn: psycopg.AsyncConnection[Any]) -> list[bool]:
            applied = []
            for end in ends:
                lost = lost_values(end)
                if lost is not None:
                    await conn.execute(SQL["lost"], lost)
                tried = attempt_values(end)
                if tried is not None:
                    await conn.execute(SQL["attempt"], tried)
                if isinstance(end, Done) and end.finished_at is not None:
                    cur = await conn.execute(SQL["keep"], keep_params(end))
                    found = await cur.fetchone()
                    ok = found is not None and found[0] == 1
                elif isinstance(end, Done):  # the row goes, its attempts with it
                    cur = await conn.execute(SQL["done"], {"id": end.id, "attempts": end.attempts})
                    ok = cur.rowcount == 1
                else:
                    cur = await conn.execute(*end_sql(end))
                    ok = cur.rowcount == 1
                if ok and isinstance(end, Died):
                    await conn.execute(SQL["death"], death_values(end))
                if ok and end.then is not None:
                    await insert(conn, end.then)
                applied.append(ok)
            return applied

        return await self._connections.run(apply, _ends(len(ends)), work=True, rows=len(ends))

    async def hand_on(self, row_id: int, attempts: int, then: NewRow) -> bool:
        async def hand_on(conn: psycopg.AsyncConnection[Any]) -> bool:
            cur = await conn.execute(SQL["release_key"], (row_id, attempts))
            if cur.rowcount != 1:
                return False
            await insert(conn, then)
            return True

        return await self._connections.run(hand_on, "the hand-on of a unique key", work=True)

    async def cancel(self, row_id: int) -> bool:
        async def cancel(conn: psycopg.AsyncConnection[Any]) -> bool:
            cur = await conn.execute(SQL["cancel"], {"id": row_id})
            found = await cur.fetchone()
            return found is not None and found[0] == 1

        return await self._connections.run(cancel, "a cancel", transaction=False)

    async def retry_dead(self, row_id: int, now_us: int) -> bool:
        row = await self._one(SQL["retry_dead"], (now_us, row_id), what="a retry of a dead row")
        return row is not None

    # ----------------------------------------------------------------------------- wake-ups

    async def watch(self, wake: Callable[[int | None], None]) -> None:
        """Call `wake(run_at)` for every row another process pushes, until cancelled (LISTEN on
        a connection of its own; see `listen`); return at once behind a pooler without a
        `listen_url`."""
        await listen(self._connections, wake)

    _connections: Connections

    async def _one(self, query: str, params: Any = None, *, what: str = "a read") -> Any:
        async def one(conn: psycopg.AsyncConnection[Any]) -> Any:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

        return await self._connections.run(one, what, transaction=False)

    async def stats(self) -> Stats:
        row = await self._one(SQL["stats"], what="a count of the rows")
        return Stats(row[0], row[1], row[2], row[3])

    async def dead_ones(self, limit: int) -> list[DeadRow]:
        async def dead(conn: psycopg.AsyncConnection[Any]) -> list[DeadRow]:
            cur = await conn.execute(SQL["dead_ones"], (LISTED_CHARS + 1, limit))  # `listed`
            return [dead_row(r) for r in await cur.fetchall()]

        return await self._connections.run(dead, "a read of dead rows", transaction=False)

    async def rows(self, state: str, limit: int) -> list[RowView]:
        return await self.find(Where(state=check_state(state)), None, limit)

    async def _all(self, query: str, params: Any = None, *, what: str = "a read") -> Any:
        async def run(conn: psycopg.AsyncConnection[Any]) -> Any:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

        return await self._connections.run(run, what, transaction=False)

    async def row(self, row_id: int) -> RowView | None:
        found = await self._all(SQL["row"], {"id": row_id})
        if not found:
            return None
        tried = await self._all(SQL["attempts_of"], (row_id,))
        return row_view(found[0]).with_attempts([attempt_of(r) for r in tried])

    async def find(self, where: Where, after: tuple[int, int] | None, limit: int) -> list[RowView]:
        query, params = find_statement(where, after, limit, postgres=True)
        return [row_view(r) for r in await self._all(query, params)]

    async def count(self, where: Where) -> int:
        query, params = count_statement(where, postgres=True)
        row = await self._one(query, params, what="a count of rows")
        return int(row[0])

    async def retry_many(self, ids: Sequence[int], now_us: int) -> list[int]:
        return [
            r[0]
            for r in await self._all(
                SQL["retry_many"],
                (now_us, list(ids)),
                what=f"a retry of {count_of(len(ids), 'row')}",
            )
        ]

    async def cancel_many(self, ids: Sequence[int]) -> list[int]:
        found = await self._all(
            SQL["cancel_many"], {"ids": list(ids)}, what=f"a cancel of {count_of(len(ids), 'row')}"
        )
        return [r[0] for r in found]

    async def delete_many(self, ids: Sequence[int]) -> list[int]:
        return [
            r[0]
            for r in await self._all(
                SQL["delete_many"],
                {"ids": list(ids)},
                what=f"a delete of {count_of(len(ids), 'row')}",
            )
        ]

    async def prune(self, before_us: int, limit: int) -> int:
        async def prune(conn: psycopg.AsyncConnection[Any]) -> int:
            cur = await conn.execute(SQL["prune"], (before_us, limit))
            found = await cur.fetchone()
            return 0 if found is None else int(found[0])

        # On the workers' pool: the worker prunes, and its sessions plan without sequential
        # scans, so the prune's plan walks the history's index however small it was planned.
        return await self._connections.run(
            prune, "a prune of done rows", work=True, transaction=False
        )

    async def pause(self, kind: str, at_us: int) -> bool:
        async def pause(conn: psycopg.AsyncConnection[Any]) -> bool:
            cur = await conn.execute(SQL["pause"], (kind, at_us))
            return cur.rowcount == 1

        return await self._connections.run(pause, "a pause", transaction=False)

    async def resume(self, kind: str) -> bool:
        async def resume(conn: psycopg.AsyncConnection[Any]) -> bool:
            cur = await conn.execute(SQL["resume"], (kind,))
            return cur.rowcount == 1

        return await self._connections.run(resume, "a resume", transaction=False)

    async def paused(self) -> dict[str, int]:
        return {kind: int(at) for kind, at in await self._all(SQL["paused"])}

    async def ended(self, since_us: int) -> list[tuple[str, str, int, int]]:
        found = await self._all(SQL["ended"], {"since": since_us})
        return [(kind, state, int(minute), int(n)) for kind, state, minute, n in found]

    async def durations(self, kind: str, since_us: int, limit: int) -> list[int]:
        return [int(r[0]) for r in await self._all(SQL["durations"], (kind, since_us, limit))]

    async def oldest_due(self, now_us: int) -> dict[str, int]:
        return {kind: int(at) for kind, at in await self._all(SQL["oldest_due"], (now_us,))}

    async def holding(self, key: str, kinds: Sequence[str]) -> list[RowView]:
        params = {"key": key, "kinds": list(kinds)}

        async def holding(conn: psycopg.AsyncConnection[Any]) -> list[RowView]:
            cur = await conn.execute(SQL["holding"], params)
            return [row_view(r) for r in await cur.fetchall()]

        return await self._connections.run(holding, "a read of a unique key", transaction=False)

    async def counts(self) -> dict[tuple[str, str], int]:
        async def counts(conn: psycopg.AsyncConnection[Any]) -> dict[tuple[str, str], int]:
            cur = await conn.execute(SQL["counts"])
            return {(kind, state): n for kind, state, n in await cur.fetchall()}

        return await self._connections.run(counts, "a count of the rows", transaction=False)

    # ---------------------------------------------------------------- the worker registry

    async def register(self, entry: WorkerEntry) -> None:
        params = entry_params(entry)

        async def register(conn: psycopg.AsyncConnection[Any]) -> None:
            await conn.execute(SQL["worker_register"], params)

        # On the main pool, as the operator's calls: the workers' pool is the pruner's, and
        # serve's claims and ends have connections of their own.
        await self._connections.run(register, "a worker's entry in the registry", transaction=False)

    async def beat(
        self,
        entry_id: str,
        now_us: int,
        running: Sequence[int],
        renew_until_us: int | None,
        worker: str,
        forget_before_us: int,
    ) -> bool:
        ids = list(running) if renew_until_us is not None else []
        params = {
            "until": renew_until_us, "ids": "{" + ",".join(str(int(n)) for n in ids) + "}",
            "worker": worker, "forget_before": forget_before_us, "id": entry_id,
            "now": now_us, "running": json.dumps(list(running)),
        }  # fmt: skip
        name = "worker_beat" if ids else "worker_beat_only"

        async def beat(conn: psycopg.AsyncConnection[Any]) -> bool:
            cur = await conn.execute(SQL[name], params)
            return await cur.fetchone() is not None

        return await self._connections.run(
            beat, "a worker's beat", transaction=False, rows=max(1, len(ids))
        )

    async def unregister(self, entry_id: str) -> None:
        async def unregister(conn: psycopg.AsyncConnection[Any]) -> None:
            await conn.execute(SQL["worker_unregister"], (entry_id,))

        await self._connections.run(
            unregister, "a worker's leaving the registry", transaction=False
        )

    async def workers(self) -> list[WorkerEntry]:
        return [worker_entry(row) for row in await self._all(SQL["workers"])]

    async def index_sizes(self) -> dict[str, int]:
        return dict(await self._all(SQL["index_sizes"], what="the sizes of the indexes"))

    async def rebuild_swollen(self, before: Mapping[str, int] | None = None) -> list[Rebuilt]:
        return await rebuild_swollen(self._connections, await self.held_back(), before or {})

    async def held_back(self) -> HeldBack | None:
        found = await self._all(SQL["held_back"], what="a look at pg_stat_activity")
        if not found:
            return None
        pid, age_s, state, query, user, application = found[0]
        return HeldBack(
            age_s=max(0.0, float(age_s)),
            pid=int(pid),
            state=state,
            query=query,
            user=user,
            application=application,
            end_it=f"SELECT pg_terminate_backend({int(pid)})",
        )


def _ends(n: int) -> str:
    """How a call that writes `n` ends is named in sentences."""
    return "the end of a row" if n == 1 else f"a group of {n} ends"


def _check_in_transaction(status: pq.TransactionStatus, autocommit: bool, *, awaited: bool) -> None:
    if status == pq.TransactionStatus.INTRANS:
        return
    if status == pq.TransactionStatus.IDLE and not autocommit:
        return  # the INSERT opens the transaction, and the caller commits it
    block = "async with conn.transaction():" if awaited else "with conn.transaction():"
    raise Refusal(
        "push_in got a psycopg connection with no open transaction, so the row would commit on "
        f"its own: use `{block}` (or a connection without autocommit)"
    )


def _is_async_sqlalchemy(tx: object) -> bool:
    """Whether `tx` is a SQLAlchemy `AsyncSession` or `AsyncConnection`."""
    if not type(tx).__module__.startswith("sqlalchemy"):
        return False
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    return isinstance(tx, AsyncSession | AsyncConnection)


def _sqlalchemy_push() -> Any:
    """The push statement as SQLAlchemy's `text`."""
    from sqlalchemy import text

    return text(SQL["push_sqlalchemy"])


async def _claimed(cur: psycopg.AsyncCursor[Any]) -> list[Claimed]:
    """The rows a `claim` statement answered on `cur`, each with the worker it was retaken
    from (`Claimed.retaken_from`)."""
    return [
        Claimed(r[0], r[1], r[2].encode(), r[3], r[4], r[5], None, r[6], r[7], r[8])
        for r in await cur.fetchall()
    ]
