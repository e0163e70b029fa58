"""Which asyncio driver the MariaDB/MySQL store uses: asyncmy or aiomysql, measured.

    .venv/bin/pip install asyncmy aiomysql
    .venv/bin/python bench/mysql_drivers.py [--host 127.0.0.1] [--port 3306] [--user root]
        [--password ''] [--rounds 3]

Each driver, on one connection to a database of its own (made and dropped here), does what the
store does most: a round trip (`SELECT 1`), a push (one INSERT that commits on its own, its id
read back), a claim of 10 rows (a transaction: `SELECT … FOR UPDATE SKIP LOCKED`, an UPDATE, a
COMMIT) and a read of a page of 500 rows with payloads. The figures are the median of `--rounds`
runs, in operations a second (rows a second for the page); higher is better.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

DDL = """
CREATE TABLE bench_jobs (
    id          bigint      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    kind        varchar(255) NOT NULL,
    payload     longtext    NOT NULL,
    state       varchar(8)  NOT NULL,
    run_at      bigint      NOT NULL,
    lease_until bigint,
    attempts    int         NOT NULL DEFAULT 0,
    worker      varchar(255),
    KEY bench_jobs_due (state, run_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
"""
PAYLOAD = '{"user_id": 12345, "email": "someone@example.com", "text": "' + "x" * 200 + '"}'
PUSH = "INSERT INTO bench_jobs (kind, payload, state, run_at) VALUES (%s, %s, 'queued', %s)"
PICK = (
    "SELECT id, kind, payload, attempts, run_at FROM bench_jobs WHERE state = 'queued' "
    "AND run_at <= %s AND kind IN (%s, %s) ORDER BY run_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
)
TAKE = (
    "UPDATE bench_jobs SET state = 'running', lease_until = %s, attempts = attempts + 1, "
    "worker = %s WHERE id IN ({})"
)
PAGE = "SELECT id, kind, payload, state, run_at, lease_until, attempts, worker FROM bench_jobs " \
    "ORDER BY id LIMIT 500"  # fmt: skip


async def connect(driver: str, args: argparse.Namespace, db: str | None) -> Any:
    if driver == "asyncmy":
        import asyncmy

        return await asyncmy.connect(
            host=args.host, port=args.port, user=args.user, password=args.password,
            database=db, autocommit=True, charset="utf8mb4",
        )  # fmt: skip
    import aiomysql

    return await aiomysql.connect(
        host=args.host, port=args.port, user=args.user, password=args.password,
        db=db, autocommit=True, charset="utf8mb4",
    )  # fmt: skip


async def rate(n: int, once: Callable[[], Awaitable[int]]) -> float:
    """Operations (or rows, as `once` answers) a second over `n` calls of `once`."""
    done = 0
    start = time.perf_counter()
    for _ in range(n):
        done += await once()
    return done / (time.perf_counter() - start)


async def measure(driver: str, args: argparse.Namespace) -> dict[str, float]:
    db = f"nilo_bench_{driver}"
    admin = await connect(driver, args, None)
    async with admin.cursor() as cur:
        await cur.execute(f"DROP DATABASE IF EXISTS {db}")
        await cur.execute(f"CREATE DATABASE {db}")
    conn = await connect(driver, args, db)
    try:
        async with conn.cursor() as cur:
            await cur.execute(DDL)

            async def ping() -> int:
                await cur.execute("SELECT 1")
                await cur.fetchall()
                return 1

            async def push() -> int:
                await cur.execute(PUSH, ("bench", PAYLOAD, 0))
                assert cur.lastrowid
                return 1

            async def claim() -> int:
                await conn.begin()
                await cur.execute(PICK, (1, "bench", "other", 10))
                rows = await cur.fetchall()
                ids = tuple(row[0] for row in rows)
                if ids:
                    marks = ", ".join(["%s"] * len(ids))
                    await cur.execute(TAKE.format(marks), (2, "host:1", *ids))
                await conn.commit()
                return 1

            async def page() -> int:
                await cur.execute(PAGE)
                return len(await cur.fetchall())

            figures = {
                "round trip /s": await rate(5_000, ping),
                "push /s": await rate(5_000, push),
                "claim of 10 /s": await rate(400, claim),
                "page rows /s": await rate(200, page),
            }
    finally:
        conn.close()
        async with admin.cursor() as cur:
            await cur.execute(f"DROP DATABASE IF EXISTS {db}")
        admin.close()
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3306)
    parser.add_argument("--user", default="root")
    parser.add_argument("--password", default="")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for driver in ("asyncmy", "aiomysql"):  # interleaved: a drift in the host hits both
            for name, value in (await measure(driver, args)).items():
                results.setdefault(driver, {}).setdefault(name, []).append(value)
    names = list(results["asyncmy"])
    print(f"{'':16}" + "".join(f"{name:>16}" for name in names))
    for driver, found in results.items():
        line = "".join(f"{statistics.median(found[name]):>16,.0f}" for name in names)
        print(f"{driver:16}{line}")


if __name__ == "__main__":
    asyncio.run(main())
