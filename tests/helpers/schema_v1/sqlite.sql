-- The SQLite statements of nilo-job before table versions were recorded (version 1), kept to test the upgrade.
-- Times are microseconds since the epoch, handed in by the queue; the store never reads a clock.

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

-- name: columns
SELECT name FROM pragma_table_info('nilo_jobs');

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

-- name: retrying
UPDATE nilo_jobs
SET state = 'queued', run_at = ?, lease_until = NULL, error = ?, detail = ?,
    unique_key = CASE WHEN ? THEN NULL ELSE unique_key END
WHERE id = ? AND state = 'running' AND attempts = ?;

-- name: died
UPDATE nilo_jobs
SET state = 'dead', died_at = ?, lease_until = NULL, unique_key = NULL, error = ?, detail = ?
WHERE id = ? AND state = 'running' AND attempts = ?;

-- name: released
UPDATE nilo_jobs
SET state = 'queued', run_at = ?, lease_until = NULL, attempts = attempts - 1
WHERE id = ? AND state = 'running' AND attempts = ?;

-- name: release_key
UPDATE nilo_jobs SET unique_key = NULL
WHERE id = ? AND state = 'running' AND attempts = ? AND unique_key IS NOT NULL;

-- name: cancel
DELETE FROM nilo_jobs WHERE id = ? AND state = 'queued';

-- name: rows_queued
SELECT id, kind, state, payload, run_at, attempts, unique_key, lease_until, error, died_at, detail
FROM nilo_jobs WHERE state = 'queued' ORDER BY run_at, id LIMIT ?;

-- name: rows_running
SELECT id, kind, state, payload, run_at, attempts, unique_key, lease_until, error, died_at, detail
FROM nilo_jobs WHERE state = 'running' ORDER BY run_at, id LIMIT ?;

-- name: rows_dead
SELECT id, kind, state, payload, run_at, attempts, unique_key, lease_until, error, died_at, detail
FROM nilo_jobs WHERE state = 'dead' ORDER BY died_at DESC, id DESC LIMIT ?;

-- name: holding
SELECT id, kind, state, payload, run_at, attempts, unique_key, lease_until, error, died_at, detail
FROM nilo_jobs
WHERE unique_key = :key AND kind IN (SELECT value FROM json_each(:kinds))
ORDER BY kind;

-- name: counts
SELECT kind, state, count(*) FROM nilo_jobs GROUP BY kind, state;

-- name: stats
SELECT (SELECT count(*) FROM nilo_jobs WHERE state = 'queued'),
       (SELECT count(*) FROM nilo_jobs WHERE state = 'running'),
       (SELECT count(*) FROM nilo_jobs WHERE state = 'dead');

-- name: dead_ones
SELECT id, kind, error, attempts, payload, died_at FROM nilo_jobs
WHERE state = 'dead' ORDER BY died_at DESC, id DESC LIMIT ?;

-- name: retry_dead
UPDATE nilo_jobs
SET state = 'queued', run_at = ?, attempts = 0, error = NULL, detail = NULL, died_at = NULL
WHERE id = ? AND state = 'dead';
