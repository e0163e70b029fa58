"""What only PostgreSQL does: push_in on the caller's psycopg or SQLAlchemy transaction, unique
under concurrent processes, the claim's plan on a million dead rows, the SQLAlchemy table, the
database's clock, and RedisSpace. The contract itself runs on PostgreSQL in test_contract.py."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

import nilo_job as job
from tests.helpers import ROOT
from tests.helpers.forks import pushed_from_forks
from tests.helpers.serving import listeners, listening, until

ran: list[int] = []


@dataclasses.dataclass
class Welcome:
    nilo_job = "welcome"
    retry = job.Retry.NONE

    user_id: int

    def run(self) -> None:
        ran.append(self.user_id)


@pytest.fixture
async def jobs(pg_url: str) -> AsyncIterator[job.Jobs]:
    ran.clear()
    table = job.Table(pg_url)
    queue = job.Jobs(kinds=[Welcome], store=table)
    yield queue
    await table.close()


@pytest.fixture
def users(pg_url: str) -> str:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE users (id bigint PRIMARY KEY)")
    return pg_url


def sqlalchemy_url(pg_url: str, *, driver: str = "psycopg") -> str:
    return pg_url.replace("postgresql://", f"postgresql+{driver}://", 1)


# ------------------------------------------------------------------------------ push_in


async def test_push_in_on_a_psycopg_async_connection_commits_or_rolls_back_with_it(
    jobs: job.Jobs, users: str
) -> None:
    async with await psycopg.AsyncConnection.connect(users) as conn:
        async with conn.transaction():
            await conn.execute("INSERT INTO users (id) VALUES (1)")
            assert await jobs.push_in(conn, Welcome(1)) is not None

        async def sign_up_again() -> None:
            async with conn.transaction():
                await jobs.push_in(conn, Welcome(2))
                await conn.execute("INSERT INTO users (id) VALUES (1)")  # fails: rolls back

        with pytest.raises(psycopg.errors.UniqueViolation):
            await sign_up_again()
    assert await jobs.stats() == (1, 0, 0)
    assert await jobs.drain() == 1
    assert ran == [1]


async def test_push_in_on_a_sync_psycopg_connection(jobs: job.Jobs, users: str) -> None:
    with psycopg.connect(users) as conn:  # not autocommit: the INSERT opens the transaction
        conn.execute("INSERT INTO users (id) VALUES (1)")
        await jobs.push_in(conn, Welcome(1))
        conn.rollback()
        assert await jobs.stats() == (0, 0, 0)
        conn.execute("INSERT INTO users (id) VALUES (2)")
        await jobs.push_in(conn, Welcome(2))
        conn.commit()
    assert await jobs.drain() == 1
    assert ran == [2]


async def test_push_in_refuses_an_autocommit_connection_outside_a_transaction(
    jobs: job.Jobs, pg_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(job.Refusal, match=re.escape("use `async with conn.transaction():`")):
            await jobs.push_in(conn, Welcome(1))
    with (
        psycopg.connect(pg_url, autocommit=True) as sync_conn,
        pytest.raises(job.Refusal, match=re.escape("use `with conn.transaction():`")),
    ):
        await asyncio.to_thread(jobs.sync.push_in, sync_conn, Welcome(2))
    assert await jobs.stats() == (0, 0, 0)


async def test_push_in_refuses_what_it_cannot_write_through_and_lists_what_it_accepts(
    jobs: job.Jobs,
) -> None:
    with pytest.raises(job.Refusal) as refused:
        await jobs.push_in(object(), Welcome(1))
    for accepted in ("psycopg Connection", "AsyncConnection", "SQLAlchemy Session", "AsyncSession"):
        assert accepted in str(refused.value)
    assert await jobs.stats() == (0, 0, 0)


def test_push_in_on_sqlalchemy_sessions_and_connections(pg_url: str, users: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    ran.clear()
    jobs = job.Jobs(kinds=[Welcome], store=job.Table(pg_url))
    engine = create_engine(sqlalchemy_url(pg_url))
    with Session(engine) as session:
        session.execute(text("INSERT INTO users (id) VALUES (1)"))
        assert jobs.sync.push_in(session, Welcome(1)) is not None
        session.rollback()
    assert jobs.sync.stats() == (0, 0, 0)
    with Session(engine) as session, session.begin():
        session.execute(text("INSERT INTO users (id) VALUES (2)"))
        jobs.sync.push_in(session, Welcome(2))
    with engine.connect() as conn:
        jobs.sync.push_in(conn, Welcome(3))
        conn.commit()
    engine.dispose()
    assert jobs.sync.drain() == 2
    assert sorted(ran) == [2, 3]
    jobs.sync.close()


async def test_push_in_on_sqlalchemy_async_sessions_and_connections(
    jobs: job.Jobs, users: str
) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    engine = create_async_engine(sqlalchemy_url(users))
    async with AsyncSession(engine) as session:
        await session.execute(text("INSERT INTO users (id) VALUES (1)"))
        await jobs.push_in(session, Welcome(1))
        await session.rollback()
    assert await jobs.stats() == (0, 0, 0)
    async with AsyncSession(engine) as session, session.begin():
        await session.execute(text("INSERT INTO users (id) VALUES (2)"))
        await jobs.push_in(session, Welcome(2))
    async with engine.connect() as conn:
        await jobs.push_in(conn, Welcome(3))
        await conn.commit()
    await engine.dispose()
    assert await jobs.drain() == 2
    assert sorted(ran) == [2, 3]


async def test_a_key_pushed_in_a_rolled_back_transaction_is_free_for_the_next_push(
    jobs: job.Jobs, pg_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url) as conn:
        assert await jobs.push_in(conn, Welcome(1), unique="k") is not None
        await conn.rollback()
    assert await jobs.push(Welcome(1), unique="k") is not None
    assert await jobs.push(Welcome(1), unique="k") is None


# -------------------------------------------------------------- the push connection


def _pushed_ids(pg_url: str) -> list[int]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute("SELECT payload->>'user_id' FROM nilo_jobs ORDER BY id").fetchall()
    return [int(row[0]) for row in rows]


async def test_pushes_recover_by_themselves_after_the_server_cuts_the_connections(
    jobs: job.Jobs, pg_url: str
) -> None:
    assert await jobs.push(Welcome(1)) is not None
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    written = [1]
    for user_id in range(2, 6):
        try:
            await jobs.push(Welcome(user_id))
        except job.StoreUnavailable:
            continue  # a push on a cut connection fails with a store error and writes nothing
        written.append(user_id)
    assert written[-3:] == [3, 4, 5]  # the store needed one failure at most to notice the cut
    assert _pushed_ids(pg_url) == written


async def test_a_push_cancelled_while_its_insert_waits_leaves_the_next_push_working(
    jobs: job.Jobs, pg_url: str
) -> None:
    assert await jobs.push(Welcome(1)) is not None
    async with await psycopg.AsyncConnection.connect(pg_url) as blocker:
        await blocker.execute("LOCK TABLE nilo_jobs IN EXCLUSIVE MODE")
        stuck = asyncio.create_task(jobs.push(Welcome(2)))
        await asyncio.sleep(0.3)  # real concurrency: the INSERT waits on the lock
        assert not stuck.done()
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        await blocker.rollback()
    async with asyncio.timeout(10):
        assert await jobs.push(Welcome(3)) is not None
    assert _pushed_ids(pg_url) in ([1, 3], [1, 2, 3])  # the server may finish what was sent


async def test_the_store_keeps_no_connection_of_an_applications_pool(pg_url: str) -> None:
    async with AsyncConnectionPool(
        pg_url, min_size=1, max_size=1, kwargs={"autocommit": True}, open=False
    ) as pool:
        queue = job.Jobs(kinds=[Welcome], store=job.Table(pool))
        await queue.store.create_missing()
        for user_id in range(3):
            await queue.push(Welcome(user_id))
        async with pool.connection(timeout=2) as conn:  # not kept out by the store
            cur = await conn.execute("SELECT count(*) FROM nilo_jobs")
            assert await cur.fetchone() == (3,)


async def test_a_store_of_one_connection_answers_every_call_after_pushes(pg_url: str) -> None:
    table = job.Table(pg_url, max_size=1)
    queue = job.Jobs(kinds=[Welcome], store=table)
    try:
        await table.create_missing()
        async with asyncio.timeout(10):  # the pool's own wait for a connection is 30 s
            await queue.push(Welcome(1))
            assert (await queue.stats()).queued == 1
            await queue.push(Welcome(2))
            assert (await queue.stats()).queued == 2
    finally:
        await table.close()


def test_pushes_from_the_sync_face_and_then_from_an_application_loop(pg_url: str) -> None:
    async def create() -> None:
        maker = job.Table(pg_url)
        await maker.create_missing()
        await maker.close()

    asyncio.run(create())
    queue = job.Jobs(kinds=[Welcome], store=job.Table(pg_url))
    assert queue.sync.push(Welcome(1)) is not None  # the store opens on the sync face's loop

    async def app() -> list[int | None]:
        async with asyncio.timeout(10):  # the pool's own wait for a connection is 30 s
            return [await queue.push(Welcome(2)), await queue.push(Welcome(3))]

    assert None not in asyncio.run(app())
    queue.sync.close()
    assert _pushed_ids(pg_url) == [1, 2, 3]


async def test_a_push_in_flight_when_the_store_closes_returns_its_id(pg_url: str) -> None:
    table = job.Table(pg_url)
    queue = job.Jobs(kinds=[Welcome], store=table)
    await table.create_missing()
    assert await queue.push(Welcome(1)) is not None
    async with await psycopg.AsyncConnection.connect(pg_url) as blocker:
        await blocker.execute("LOCK TABLE nilo_jobs IN EXCLUSIVE MODE")
        pushing = asyncio.create_task(queue.push(Welcome(2)))
        await asyncio.sleep(0.3)  # real concurrency: the INSERT waits on the lock
        closing = asyncio.create_task(table.close())
        await asyncio.sleep(0.3)
        assert not pushing.done()
        await blocker.rollback()
    async with asyncio.timeout(10):
        await closing
        assert await pushing is not None
    assert _pushed_ids(pg_url) == [1, 2]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_processes_forked_after_pushes_each_push_on_connections_of_their_own(
    pg_url: str,
) -> None:
    """A pre-forking server: the parent pushes once at start (its loop then closed), then forks
    workers that push. Each child must get its own connection, and its own row's id."""
    table = job.Table(pg_url)
    queue = job.Jobs(kinds=[Welcome], store=table)

    async def parent_push() -> None:
        await table.create_missing()
        await queue.push(Welcome(0))

    asyncio.run(parent_push())
    answers = pushed_from_forks(queue, Welcome, range(101, 107))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, (payload->>'user_id')::int FROM nilo_jobs WHERE id = ANY(%s)",
            (list(answers),),
        ).fetchall()
    assert dict(rows) == answers  # each child was given its own row's id
    # The parent's pool belongs to the loop that opened it, now closed (psycopg_pool runs its
    # workers as tasks of that loop): close() still closes what it can, and raises nothing, on
    # every Python.
    asyncio.run(table.close())


@dataclasses.dataclass
class Ping:
    nilo_job = "ping"
    retry = job.Retry.NONE

    n: int

    async def run(self) -> None:
        ran.append(self.n)


async def test_serve_claims_and_writes_ends_on_its_kept_connections_not_the_pool(
    pg_url: str,
) -> None:
    """Claims come one at a time and groups of ends too: each has a connection kept for it, so
    a run costs no checkout of the workers' pool (which the pruner's deletes use)."""
    ran.clear()
    table = job.Table(pg_url)
    queue = job.Jobs(kinds=[Ping], store=table, workers=4, poll_ms=50)
    await table.create_missing()
    await queue.push_many([Ping(n) for n in range(300)])
    prunes = 0
    prune = table.prune

    async def counted(before_us: int, limit: int) -> int:
        nonlocal prunes
        prunes += 1
        return await prune(before_us, limit)

    table.prune = counted  # type: ignore[method-assign]
    try:
        async with queue.serving(grace_ms=5_000):
            await until("every row to run", lambda: len(ran) == 300, 30)
        pool = table._connections.work_pool
        assert pool is not None
        assert pool.get_stats().get("requests_num", 0) == prunes
        assert sorted(ran) == list(range(300))
        assert await queue.stats() == (0, 0, 0)
    finally:
        await table.close()


async def test_close_while_the_push_connection_opens_leaves_no_connection(pg_url: str) -> None:
    table = job.Table(pg_url)
    queue = job.Jobs(kinds=[Welcome], store=table)
    await table.create_missing()
    pushing = asyncio.create_task(queue.push(Welcome(1)))
    async with asyncio.timeout(10):
        # The connection opens in a few milliseconds: look at every turn of the loop.
        kept = table._connections.kept["push"]
        while not (kept.lock.locked() and kept.conn is None):  # noqa: ASYNC110
            await asyncio.sleep(0)
    await table.close()
    assert await pushing is not None

    def backends_left() -> int:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            found = admin.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        return -1 if found is None else int(found[0])

    # A backend leaves pg_stat_activity a moment after its client has closed the connection.
    await until("every connection of the store to be gone", lambda: backends_left() == 0, 5)


async def test_a_row_another_queue_pushed_for_later_starts_when_due_not_at_the_next_poll(
    pg_url: str,
) -> None:
    """The NOTIFY carries the row's due time: the serving queue wakes at that time. (A pusher
    whose clock runs ahead of the worker's makes a row due "now" look like this one.)"""
    ran.clear()
    worker_table, pusher_table = job.Table(pg_url), job.Table(pg_url)
    worker = job.Jobs(kinds=[Welcome], store=worker_table, poll_ms=60_000, workers=1)
    pusher = job.Jobs(kinds=[Welcome], store=pusher_table)
    try:
        async with worker.serving(grace_ms=1_000):
            await until("the worker to listen", lambda: listening(pg_url))
            pushed = job.now_us()
            await pusher.push(Welcome(1), after_ms=300)
            await until("the row to run, well inside the minute's poll", lambda: ran == [1])
            started = job.now_us()
    finally:
        await worker_table.close()
        await pusher_table.close()
    assert started - pushed >= 300_000


async def test_each_inserted_row_sends_its_due_time_and_a_taken_key_sends_nothing(
    jobs: job.Jobs, pg_url: str
) -> None:
    """What other processes' workers hear: one notification per queued row, its payload the
    row's due time in microseconds; a push whose key was taken inserted nothing and says
    nothing; push_many says the earliest due time once."""
    await jobs.push(Welcome(0))  # the table exists before the listener asks for the channel
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as listener:
        await listener.execute("LISTEN nilo_jobs")
        at = job.now_us() + 3_600_000_000
        await jobs.push(Welcome(1), at=at)
        assert await jobs.push(Welcome(2), at=at + 1, unique="k") is not None
        assert await jobs.push(Welcome(3), at=at + 2, unique="k") is None
        await jobs.push_many([Welcome(4), Welcome(5)], at=at + 3)
        await listener.execute("SELECT 1")  # a round trip: every notification has arrived
        heard: list[tuple[str, str]] = []
        async for note in listener.notifies(timeout=0.5):
            heard.append((note.channel, note.payload))
    assert heard == [
        ("nilo_jobs", str(at)),
        ("nilo_jobs", str(at + 1)),
        ("nilo_jobs", str(at + 3)),
    ]


async def test_the_listener_hands_on_every_notification_in_order_also_those_during_its_checks(
    jobs: job.Jobs, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every notification another process sends reaches serve's wake-ups once, in the order
    sent: those read as they arrive, several in one packet, and those that come while the
    listener's own check of the server runs (after `CHECK_S` of silence, here 2 ms)."""
    monkeypatch.setattr("nilo_job.store.postgres.listen.CHECK_S", 0.002)
    await jobs.push(Welcome(0))  # the table exists
    heard: list[int | None] = []
    listening_task = asyncio.create_task(jobs.store.watch(heard.append))
    try:
        await until("the listener to start", lambda: heard == [None])
        sent: list[int] = []
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as pusher:
            for burst in range(60):
                # A burst in one transaction arrives together; the pauses between bursts let
                # the listener's checks run, and the next burst may land during one.
                async with pusher.transaction():
                    for n in range(5):
                        due = 1_000_000 * burst + n
                        await pusher.execute("SELECT pg_notify('nilo_jobs', %s)", (str(due),))
                        sent.append(due)
                await asyncio.sleep(0.001 * (burst % 4))
        await until("every notification", lambda: len(heard) >= 1 + len(sent), seconds=10)
        assert heard == [None, *sent]
    finally:
        listening_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening_task


# --------------------------------------------------------------------------- concurrency


@pytest.mark.procs
def test_ten_processes_pushing_one_key_at_once_make_one_row(pg_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = (
        "import asyncio, os, sys, time\n"
        "import nilo_job as job\n"
        "from tests.stores.test_postgres import Welcome\n"
        "async def main():\n"
        "    jobs = job.Jobs(kinds=[Welcome], store=job.Table(sys.argv[1]))\n"
        "    await jobs.store.open()\n"
        "    while not os.path.exists(sys.argv[2]):\n"
        "        time.sleep(0.001)\n"
        "    print(await jobs.push(Welcome(1), unique='only-one'))\n"
        "    await jobs.store.close()\n"
        "asyncio.run(main())\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, pg_url, str(go)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(10)
    ]
    go.touch()
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        answers.append(out.strip())
    assert answers.count("None") == 9
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT kind, unique_key FROM nilo_jobs").fetchall()
    assert rows == [("welcome", "only-one")]


# ------------------------------------------------------------------------------ the plan


def test_a_claim_on_a_million_dead_rows_reads_only_the_due_and_lease_indexes(
    pg_url: str,
) -> None:
    """Dead rows stay (done ones are deleted): the claim must not look at them."""
    from nilo_job.store.postgres import SQL

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, error, died_at) "
            "SELECT 'welcome', '{\"user_id\": 1}', 'dead', g, 1, 'Boom', g "
            "FROM generate_series(1, 1000000) AS g"
        )
        conn.execute(
            "INSERT INTO nilo_jobs (kind, payload, state, run_at) "
            "SELECT 'welcome', '{\"user_id\": 1}', 'queued', g FROM generate_series(1, 100) AS g"
        )
        conn.execute("ANALYZE nilo_jobs")
        params = {"now": 50, "lease_until": 1_000, "limit": 4, "kinds": ["welcome"], "worker": "w"}
        plan = "\n".join(
            row[0]
            for row in conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + SQL["claim"],  # type: ignore[operator]
                params,
            ).fetchall()
        )
    assert "Seq Scan" not in plan, plan
    assert "Index Scan using nilo_jobs_due" in plan, plan
    assert "nilo_jobs_lease" in plan, plan


# ------------------------------------------------------------------------- DDL and clock


async def test_the_sqlalchemy_table_is_the_table_check_expects(pg_url: str) -> None:
    from sqlalchemy import MetaData, create_engine

    from nilo_job.sqlalchemy_table import nilo_jobs_table

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE nilo_jobs")
    metadata = MetaData()
    nilo_jobs_table(metadata)
    engine = create_engine(sqlalchemy_url(pg_url))
    metadata.create_all(engine)
    engine.dispose()
    table = job.Table(pg_url)
    await table.check()
    jobs = job.Jobs(kinds=[Welcome], store=table)
    ran.clear()
    await jobs.push(Welcome(5), unique="u")
    assert await jobs.push(Welcome(5), unique="u") is None
    assert await jobs.drain() == 1
    assert ran == [5]
    with psycopg.connect(pg_url) as conn:
        indexes = {
            row[0]
            for row in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'nilo_jobs'"
            ).fetchall()
        }
    assert {"nilo_jobs_unique", "nilo_jobs_due", "nilo_jobs_lease", "nilo_jobs_dead"} <= indexes
    await table.close()


async def test_the_ddl_is_offered_as_text(pg_url: str) -> None:
    table = job.Table(pg_url)
    assert "CREATE TABLE IF NOT EXISTS nilo_jobs" in table.ddl  # type: ignore[attr-defined]
    await table.close()


async def test_check_says_what_is_wrong_with_a_missing_table(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE nilo_jobs")
    table = job.Table(pg_url)
    with pytest.raises(job.StoreUnavailable, match="there is no nilo_jobs table"):
        await table.check()
    await table.create_missing()
    await table.create_missing()
    await table.check()
    await table.close()


async def test_an_unreachable_server_is_a_store_error_with_a_sentence() -> None:
    table = job.Table("postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=1")
    with pytest.raises(job.StoreUnavailable, match="cannot reach PostgreSQL"):
        await table.ping()
    jobs = job.Jobs(kinds=[Welcome], store=table)
    assert await jobs.ready() is False
    await table.close()


async def test_serve_follows_the_database_clock(pg_url: str) -> None:
    table = job.Table(pg_url)
    jobs = job.Jobs(kinds=[Welcome], store=table)
    database_now = await table.now_us()
    assert database_now is not None
    assert abs(database_now - job.now_us()) < 5_000_000
    await jobs._parts.clock.follow(jobs.store.now_us)
    assert abs(jobs._parts.clock.now() - job.now_us()) < 1_000_000
    await table.close()


# ------------------------------------------------------------------------------ RedisSpace


@pytest.fixture
async def redis_client() -> AsyncIterator[object]:
    from redis.asyncio import Redis

    client = Redis.from_url(os.environ.get("NILO_TEST_REDIS", "redis://127.0.0.1:6379/15"))
    try:
        await client.ping()
    except Exception as error:
        await client.aclose()
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs Redis: {error}")
        pytest.skip(f"no Redis: {error}")
    yield client
    await client.aclose()


async def test_redis_space_carries_status_between_two_queues(
    pg_url: str, redis_client: object
) -> None:
    import uuid

    name = f"nilo-test-{uuid.uuid4().hex[:8]}"
    worker_side = job.Jobs(
        kinds=[Welcome],
        store=job.Table(pg_url),
        status=job.RedisSpace(redis_client, name=name, ttl_s=60),
    )
    web_side = job.Jobs(
        kinds=[Welcome],
        store=job.Table(pg_url),
        status=job.RedisSpace(redis_client, name=name, ttl_s=60),
    )
    row = await web_side.push(Welcome(1))
    assert await web_side.status(row) == job.Status(job.State.QUEUED, 0, None)
    assert await worker_side.drain() == 1
    assert await web_side.status(row) == job.Status(job.State.DONE, 1, 0)
    space = job.RedisSpace(redis_client, name=name, ttl_s=60)
    assert await space.add("k", b"1") is True
    assert await space.add("k", b"2") is False
    assert await space.get("k") == b"1"
    await space.delete("k")
    assert await space.get("k") is None
    await worker_side.store.close()
    await web_side.store.close()


def test_redis_space_refuses_a_sync_client() -> None:
    import redis

    with pytest.raises(job.Refusal, match=r"redis\.asyncio\.Redis"):
        job.RedisSpace(redis.Redis(), name="x", ttl_s=10)


@dataclasses.dataclass
class Parent:
    """A run that pushes a row of its own, through the same table."""

    nilo_job = "parent"
    retry = job.Retry.NONE

    n: int

    async def run(self, jobs: job.Jobs) -> None:
        await jobs.push(Welcome(1_000 + self.n))
        ran.append(self.n)


@pytest.mark.parametrize(
    ("max_size", "queues"), [(1, 1), (2, 1), (1, 2)], ids=["one", "two", "one_two_queues"]
)
async def test_serve_over_an_applications_pool_of_any_size_runs_every_row(
    pg_url: str, max_size: int, queues: int
) -> None:
    """Claims, ends, the pruner and pushes from runs each check a connection out of the pool
    for one call; serve's listener, which holds its connection for as long as serve runs, has
    one of its own. So even one connection, shared by two serving queues, serves them all, and
    the application can still check it out meanwhile."""
    ran.clear()
    async with AsyncConnectionPool(
        pg_url, min_size=1, max_size=max_size, kwargs={"autocommit": True}, open=False
    ) as pool:
        served = [
            job.Jobs(kinds=[Parent, Welcome], store=job.Table(pool), workers=4, poll_ms=50)
            for _ in range(queues)
        ]
        await served[0].push_many([Parent(n) for n in range(60)])
        async with contextlib.AsyncExitStack() as serving:
            for queue in served:
                await serving.enter_async_context(queue.serving(grace_ms=5_000))
            await until("a listener per queue", lambda: listeners(pg_url) == queues)
            async with pool.connection(timeout=2) as conn:  # not held by the store
                await conn.execute("SELECT 1")
            await until("every row and the rows they pushed", lambda: len(ran) == 120, 20)
        assert await served[0].stats() == (0, 0, 0)
    assert sorted(ran) == [*range(60), *range(1_000, 1_060)]


async def test_the_urls_own_options_hold_on_every_connection_the_workers_use_too(
    pg_url: str,
) -> None:
    """`options` in the URL (here a schema of the application's own, by `search_path`) is the
    session's on every connection: the workers' settings do not replace it. Pushes, claims and
    ends all find the table in that schema, and the public one stays empty."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA shop")
    url = f"{pg_url}?options=-csearch_path%3Dshop"
    table = job.Table(url)
    queue = job.Jobs(kinds=[Welcome], store=table, workers=2, poll_ms=50)
    try:
        await table.create_missing()
        ran.clear()
        await queue.push_many([Welcome(n) for n in range(10)])
        async with queue.serving(grace_ms=5_000):
            await until("every row", lambda: len(ran) == 10, 10)
        assert await queue.stats() == (0, 0, 0)
    finally:
        await table.close()
    with psycopg.connect(pg_url) as admin:
        found = admin.execute(
            "SELECT table_schema, count(*) FROM information_schema.tables "
            "WHERE table_name = 'nilo_jobs' GROUP BY 1 ORDER BY 1"
        ).fetchall()
        public = admin.execute("SELECT count(*) FROM public.nilo_jobs").fetchone()
    assert found == [("public", 1), ("shop", 1)]
    assert public == (0,)
    assert sorted(ran) == list(range(10))
