-- The SQLite store's statements, one named statement each, loaded once by the store.
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
    died_at     INTEGER,                            -- µs, while dead
    traceback   TEXT,                               -- the last failure's traceback (version 2)
    pushed_at   INTEGER,                            -- µs, when pushed (version 3)
    started_at  INTEGER,                            -- µs, the last attempt's claim (version 3)
    worker      TEXT,                               -- host:pid that claimed it (version 3)
    snoozes     INTEGER NOT NULL DEFAULT 0,         -- times its runs snoozed (version 4)
    trace       TEXT                                -- its push's trace context (version 5)
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

-- name: upgrade_to_2
-- Version 2 keeps the last failure's traceback beside its name and message.
ALTER TABLE nilo_jobs ADD COLUMN traceback TEXT;

-- name: upgrade_to_3
-- Version 3 records when a row was pushed and started and by which worker, and adds the
-- history of done rows and the paused kinds (their tables come with `create`).
ALTER TABLE nilo_jobs ADD COLUMN pushed_at INTEGER;
ALTER TABLE nilo_jobs ADD COLUMN started_at INTEGER;
ALTER TABLE nilo_jobs ADD COLUMN worker TEXT;

-- name: upgrade_to_4
-- Version 4 counts each row's snoozes. An older nilo-job never names the column, and its
-- inserts get the default.
ALTER TABLE nilo_jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;

-- name: upgrade_to_5
-- Version 5 keeps the W3C trace context of each row's push (OpenTelemetry), NULL without one. An
-- older nilo-job never names the column, and its inserts leave it NULL.
ALTER TABLE nilo_jobs ADD COLUMN trace TEXT;

-- name: version
SELECT max(version), max(compatible_from) FROM nilo_jobs_version;

-- name: has_version
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'nilo_jobs_version';

-- name: forget_version
DELETE FROM nilo_jobs_version;

-- name: set_version
INSERT INTO nilo_jobs_version (version, compatible_from) VALUES (?, ?);

-- name: columns
SELECT name FROM pragma_table_info('nilo_jobs');

-- name: push_plain
-- The common row: queued, no unique key. Nothing can conflict, and its id is the connection's
-- last rowid, so no ON CONFLICT and no RETURNING (each costs a push a little).
INSERT INTO nilo_jobs (kind, payload, state, run_at, pushed_at, trace)
VALUES (?, ?, 'queued', ?, ?, ?);

-- name: push
INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, unique_key, lease_until, pushed_at,
                       started_at, worker, trace)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
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
RETURNING id, kind, payload, attempts, run_at, unique_key, snoozes, trace;

-- name: running
-- How many rows of one kind run under a live lease at :now: what a kind's concurrency limit
-- counts, in the write transaction of the claim that takes the rest of its room (`claim`, for
-- that kind alone). It walks `nilo_jobs_lease` from :now on.
SELECT count(*) FROM nilo_jobs
WHERE state = 'running' AND lease_until > :now AND +kind = :kind;

-- name: done
DELETE FROM nilo_jobs WHERE id = ? AND state = 'running' AND attempts = ?;

-- name: keep
-- A done row into the history, before `done` deletes it (one transaction).
INSERT INTO nilo_jobs_done (id, kind, payload, unique_key, run_at, pushed_at, started_at,
                            finished_at, attempts, worker, error, detail, result)
SELECT id, kind, payload, unique_key, run_at, pushed_at, coalesce(?, started_at), ?, attempts,
       worker, error, detail, ?
FROM nilo_jobs WHERE id = ? AND state = 'running' AND attempts = ?
ON CONFLICT (id) DO NOTHING;

-- name: retrying
UPDATE nilo_jobs
SET state = 'queued', run_at = ?, lease_until = NULL, error = ?, detail = ?, traceback = ?,
    unique_key = CASE WHEN ? THEN NULL ELSE unique_key END
WHERE id = ? AND state = 'running' AND attempts = ?;

-- name: died
UPDATE nilo_jobs
SET state = 'dead', died_at = ?, lease_until = NULL, unique_key = NULL, error = ?, detail = ?,
    traceback = ?
WHERE id = ? AND state = 'running' AND attempts = ?;

-- name: released
UPDATE nilo_jobs
SET state = 'queued', run_at = ?, lease_until = NULL, attempts = attempts - 1, started_at = NULL,
    worker = NULL
WHERE id = ? AND state = 'running' AND attempts = ?;

-- name: snoozed
UPDATE nilo_jobs
SET state = 'queued', run_at = ?, lease_until = NULL, attempts = attempts - 1,
    snoozes = snoozes + 1, unique_key = CASE WHEN ? THEN NULL ELSE unique_key END
WHERE id = ? AND state = 'running' AND attempts = ?;

-- name: release_key
UPDATE nilo_jobs SET unique_key = NULL
WHERE id = ? AND state = 'running' AND attempts = ? AND unique_key IS NOT NULL;

-- name: cancel
DELETE FROM nilo_jobs WHERE id = ? AND state = 'queued';

-- name: holding
SELECT id, kind, state, payload, run_at, attempts, unique_key, lease_until, error, died_at, detail,
       traceback, pushed_at, started_at, NULL, worker, NULL, snoozes
FROM nilo_jobs
WHERE unique_key = :key AND kind IN (SELECT value FROM json_each(:kinds))
ORDER BY kind;

-- name: counts
SELECT kind, state, count(*) FROM nilo_jobs GROUP BY kind, state
UNION ALL
SELECT kind, 'done', count(*) FROM nilo_jobs_done GROUP BY kind;

-- name: stats
SELECT (SELECT count(*) FROM nilo_jobs WHERE state = 'queued'),
       (SELECT count(*) FROM nilo_jobs WHERE state = 'running'),
       (SELECT count(*) FROM nilo_jobs WHERE state = 'dead'),
       (SELECT count(*) FROM nilo_jobs_done);

-- name: dead_ones
-- Each payload's start only, its first LISTED_CHARS + 1 characters (contract.listed): a text
-- or a BLOB is cut, a number another program stored stays itself, for dead_row to name.
SELECT id, kind, error, attempts,
       CASE WHEN typeof(payload) IN ('text', 'blob') THEN substr(payload, 1, ?) ELSE payload END,
       died_at, detail, traceback
FROM nilo_jobs
WHERE state = 'dead' ORDER BY died_at DESC, id DESC LIMIT ?;

-- name: retry_dead
UPDATE nilo_jobs
SET state = 'queued', run_at = ?, attempts = 0, error = NULL, detail = NULL, traceback = NULL,
    died_at = NULL, started_at = NULL, worker = NULL, snoozes = 0
WHERE id = ? AND state = 'dead';

-- name: row
SELECT id, kind, state, payload, run_at, attempts, unique_key, lease_until, error, died_at, detail,
       traceback, pushed_at, started_at, NULL, worker, NULL, snoozes
FROM nilo_jobs WHERE id = :id
UNION ALL
SELECT id, kind, 'done', payload, run_at, attempts, unique_key, NULL, error, NULL, detail, NULL,
       pushed_at, started_at, finished_at, worker, result, NULL
FROM nilo_jobs_done WHERE id = :id;

-- name: retry_many
UPDATE nilo_jobs
SET state = 'queued', run_at = ?, attempts = 0, error = NULL, detail = NULL, traceback = NULL,
    died_at = NULL, started_at = NULL, worker = NULL, snoozes = 0
WHERE id IN (SELECT value FROM json_each(?)) AND state = 'dead'
RETURNING id;

-- name: cancel_many
DELETE FROM nilo_jobs WHERE id IN (SELECT value FROM json_each(?)) AND state = 'queued'
RETURNING id;

-- name: delete_dead
DELETE FROM nilo_jobs WHERE id IN (SELECT value FROM json_each(?)) AND state = 'dead'
RETURNING id;

-- name: delete_done
DELETE FROM nilo_jobs_done WHERE id IN (SELECT value FROM json_each(?)) RETURNING id;

-- name: prune
DELETE FROM nilo_jobs_done WHERE id IN (
    SELECT id FROM nilo_jobs_done WHERE finished_at < ? ORDER BY finished_at, id LIMIT ?);

-- name: pause
INSERT INTO nilo_jobs_paused (kind, paused_at) VALUES (?, ?) ON CONFLICT (kind) DO NOTHING;

-- name: resume
DELETE FROM nilo_jobs_paused WHERE kind = ?;

-- name: paused
SELECT kind, paused_at FROM nilo_jobs_paused;

-- name: ended
SELECT kind, 'done', finished_at - finished_at % 60000000 AS minute, count(*)
FROM nilo_jobs_done WHERE finished_at >= :since GROUP BY kind, minute
UNION ALL
SELECT kind, 'dead', died_at - died_at % 60000000 AS minute, count(*)
FROM nilo_jobs WHERE state = 'dead' AND died_at >= :since GROUP BY kind, minute;

-- name: durations
SELECT finished_at - started_at FROM nilo_jobs_done
WHERE kind = ? AND finished_at >= ? AND started_at IS NOT NULL
ORDER BY finished_at DESC, id DESC LIMIT ?;

-- name: oldest_due
SELECT kind, min(run_at) FROM nilo_jobs WHERE state = 'queued' AND run_at <= ? GROUP BY kind;
