-- The SQLite statements before table versions were recorded (version 1) that the upgrade tests run as an
-- old worker would (tests/stores/test_upgrade.py): the table as it was, a push, a claim, an end.
-- Times are microseconds since the epoch, handed in by the queue.

-- name: create
CREATE TABLE IF NOT EXISTS nilo_jobs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, so an old id is never a new row
    kind        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,                   -- the JSON the queue encoded
    state       TEXT    NOT NULL CHECK (state IN ('queued', 'running', 'dead')),
    run_at      INTEGER NOT NULL,                   -- due at, µs
    lease_until INTEGER,                            -- while running, µs
    attempts    INTEGER NOT NULL DEFAULT 0,         -- claims so far, this one included
    unique_key  TEXT,                               -- NULL once the row is dead
    error       TEXT,                               -- the last failure's exception class name
    detail      TEXT,                               -- its message
    died_at     INTEGER                             -- µs, while dead
);
CREATE UNIQUE INDEX IF NOT EXISTS nilo_jobs_unique ON nilo_jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS nilo_jobs_due ON nilo_jobs (run_at, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS nilo_jobs_lease ON nilo_jobs (lease_until, id) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS nilo_jobs_dead ON nilo_jobs (died_at, id) WHERE state = 'dead';

-- name: push
INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, unique_key, lease_until)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING id;

-- name: claim
UPDATE nilo_jobs
SET state = 'running', lease_until = :lease_until, attempts = attempts + 1
WHERE id IN (
    SELECT id FROM (
        SELECT id, run_at FROM (
            SELECT id, run_at FROM nilo_jobs
            WHERE state = 'queued' AND run_at <= :now
              AND +kind IN (SELECT value FROM json_each(:kinds))
            ORDER BY run_at, id LIMIT :limit)
        UNION ALL
        SELECT id, run_at FROM (
            SELECT id, run_at FROM nilo_jobs
            WHERE state = 'running' AND lease_until <= :now
              AND +kind IN (SELECT value FROM json_each(:kinds))
            ORDER BY lease_until, id LIMIT :limit)
    )
    ORDER BY run_at, id LIMIT :limit)
RETURNING id, kind, payload, attempts, run_at, unique_key;

-- name: done
DELETE FROM nilo_jobs WHERE id = ? AND state = 'running' AND attempts = ?;

-- name: died
UPDATE nilo_jobs
SET state = 'dead', died_at = ?, lease_until = NULL, unique_key = NULL, error = ?, detail = ?
WHERE id = ? AND state = 'running' AND attempts = ?;
