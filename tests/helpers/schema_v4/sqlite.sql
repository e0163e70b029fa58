-- The SQLite statements of nilo-job's table version 4 that the upgrade tests run as an
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
    died_at     INTEGER,                            -- µs, while dead
    traceback   TEXT,                               -- the last failure's traceback (version 2)
    pushed_at   INTEGER,                            -- µs, when pushed (version 3)
    started_at  INTEGER,                            -- µs, the last attempt's claim (version 3)
    worker      TEXT,                               -- host:pid that claimed it (version 3)
    snoozes     INTEGER NOT NULL DEFAULT 0          -- times its runs snoozed (version 4)
);
CREATE UNIQUE INDEX IF NOT EXISTS nilo_jobs_unique ON nilo_jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS nilo_jobs_due ON nilo_jobs (run_at, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS nilo_jobs_lease ON nilo_jobs (lease_until, id) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS nilo_jobs_dead ON nilo_jobs (died_at, id) WHERE state = 'dead';
CREATE INDEX IF NOT EXISTS nilo_jobs_dead_kind ON nilo_jobs (kind, died_at, id)
    WHERE state = 'dead';                           -- (version 3)
CREATE TABLE IF NOT EXISTS nilo_jobs_done (       -- done rows kept as history (version 3)
    id          INTEGER PRIMARY KEY,                -- the id it had in nilo_jobs
    kind        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    unique_key  TEXT,                               -- the key it held (released as it finished)
    run_at      INTEGER NOT NULL,
    pushed_at   INTEGER,
    started_at  INTEGER,                            -- µs, when its last run began
    finished_at INTEGER NOT NULL,                   -- µs, when it ended
    attempts    INTEGER NOT NULL,
    worker      TEXT,
    error       TEXT,                               -- an earlier attempt's failure, if any
    detail      TEXT,
    result      TEXT                                -- the JSON its run returned, or NULL
);
CREATE INDEX IF NOT EXISTS nilo_jobs_done_finished ON nilo_jobs_done (finished_at, id);
CREATE INDEX IF NOT EXISTS nilo_jobs_done_kind ON nilo_jobs_done (kind, finished_at, id);
CREATE TABLE IF NOT EXISTS nilo_jobs_paused (     -- kinds no worker claims (version 3)
    kind        TEXT    PRIMARY KEY,
    paused_at   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS nilo_jobs_version (
    version         INTEGER NOT NULL,   -- the table's version
    compatible_from INTEGER NOT NULL    -- the oldest version whose nilo-job works on it
);

-- name: set_version
INSERT INTO nilo_jobs_version (version, compatible_from) VALUES (?, ?);

-- name: push
INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, unique_key, lease_until, pushed_at,
                       started_at, worker)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING id;

-- name: claim
UPDATE nilo_jobs
SET state = 'running', lease_until = :lease_until, attempts = attempts + 1, started_at = :now,
    worker = :worker
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
RETURNING id, kind, payload, attempts, run_at, unique_key, snoozes;

-- name: done
DELETE FROM nilo_jobs WHERE id = ? AND state = 'running' AND attempts = ?;

-- name: died
UPDATE nilo_jobs
SET state = 'dead', died_at = ?, lease_until = NULL, unique_key = NULL, error = ?, detail = ?,
    traceback = ?
WHERE id = ? AND state = 'running' AND attempts = ?;
