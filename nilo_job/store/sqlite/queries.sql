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
CREATE TABLE IF NOT EXISTS nilo_jobs_workers (    -- serving processes (version 6)
    id          TEXT    PRIMARY KEY,                -- "host:pid:started_at"
    host        TEXT    NOT NULL,
    pid         INTEGER NOT NULL,
    version     TEXT    NOT NULL,                   -- nilo-job's version in that process
    kinds       TEXT    NOT NULL,                   -- JSON list of the kinds it serves
    workers     INTEGER NOT NULL,                   -- rows it runs at once
    beat_ms     INTEGER NOT NULL,                   -- how often it beats
    started_at  INTEGER NOT NULL,                   -- µs, when its serve started
    beat_at     INTEGER NOT NULL,                   -- µs, its last beat
    running     TEXT    NOT NULL                    -- JSON list of the row ids it holds
);
CREATE INDEX IF NOT EXISTS nilo_jobs_workers_beat ON nilo_jobs_workers (beat_at);
CREATE TABLE IF NOT EXISTS nilo_jobs_attempts (  -- attempts that did not end done (version 7)
    id          INTEGER PRIMARY KEY AUTOINCREMENT,  -- the order they were written in
    row_id      INTEGER NOT NULL,                   -- the row's id (in nilo_jobs or nilo_jobs_done)
    attempt     INTEGER NOT NULL,                   -- the row's attempts when it ended
    started_at  INTEGER,                            -- µs, its claim
    ended_at    INTEGER NOT NULL,                   -- µs
    worker      TEXT,                               -- host:pid that ran it
    outcome     TEXT    NOT NULL,                   -- retrying, dead, snoozed, released, lost
    error       TEXT,                               -- its failure's class name, message and
    detail      TEXT,                               -- traceback, bounded as the row's
    traceback   TEXT
);
CREATE INDEX IF NOT EXISTS nilo_jobs_attempts_row ON nilo_jobs_attempts (row_id, id);
CREATE TABLE IF NOT EXISTS nilo_jobs_deaths (    -- deaths by kind and minute, a day (version 7)
    kind        TEXT    NOT NULL,
    minute      INTEGER NOT NULL,                   -- µs since the epoch, the minute's start
    deaths      INTEGER NOT NULL,
    PRIMARY KEY (kind, minute)
) WITHOUT ROWID;
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

-- name: upgrade_to_6
-- Version 6 adds the registry of serving processes, a table of its own (made by `create`, which
-- runs before the steps): no column of nilo_jobs changes, and an older nilo-job never reads it.
SELECT 1;

-- name: upgrade_to_7
-- Version 7 keeps each row's attempts and counts deaths by the minute, in tables of their own
-- (made by `create`, which runs before the steps): no column of nilo_jobs changes. Each dead
-- row's death is recorded as its last attempt and counted in its minute (unless it is
-- already: a table whose version was not recorded, as Alembic's, may be at version 7).
INSERT INTO nilo_jobs_attempts (row_id, attempt, started_at, ended_at, worker, outcome, error,
                                detail, traceback)
SELECT id, attempts, started_at, died_at, worker, 'dead', error, detail, traceback
FROM nilo_jobs WHERE state = 'dead' AND died_at IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM nilo_jobs_attempts AS a
                    WHERE a.row_id = nilo_jobs.id AND a.attempt = nilo_jobs.attempts
                    AND a.outcome = 'dead')
ORDER BY id;
INSERT INTO nilo_jobs_deaths (kind, minute, deaths)
SELECT kind, died_at - died_at % 60000000, count(*)
FROM nilo_jobs WHERE state = 'dead' AND died_at IS NOT NULL
GROUP BY kind, died_at - died_at % 60000000
ON CONFLICT (kind, minute) DO NOTHING;

-- name: worker_register
-- A serving process records itself as its serve starts (again, after its entry was forgotten).
INSERT INTO nilo_jobs_workers (id, host, pid, version, kinds, workers, beat_ms, started_at,
                               beat_at, running)
VALUES (:id, :host, :pid, :version, :kinds, :workers, :beat_ms, :started_at, :beat_at, :running)
ON CONFLICT (id) DO UPDATE SET beat_at = excluded.beat_at, running = excluded.running;

-- name: worker_renew
-- The leases of the rows this process holds, renewed at its beat in one statement whatever
-- their number (never shortened).
UPDATE nilo_jobs SET lease_until = max(coalesce(lease_until, 0), :until)
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'running' AND worker = :worker;

-- name: worker_forget
DELETE FROM nilo_jobs_workers WHERE beat_at < :forget_before AND id <> :id;

-- name: worker_beat
UPDATE nilo_jobs_workers SET beat_at = :now, running = :running WHERE id = :id;

-- name: worker_unregister
DELETE FROM nilo_jobs_workers WHERE id = ?;

-- name: workers
SELECT id, host, pid, version, kinds, workers, beat_ms, started_at, beat_at, running
FROM nilo_jobs_workers ORDER BY started_at, id;

-- name: version
SELECT max(version), max(compatible_from) FROM nilo_jobs_version;

-- name: tables
-- The tables beside nilo_jobs that the file has (a name is any case in SQLite).
SELECT lower(name) FROM sqlite_master
WHERE type = 'table' AND name LIKE 'nilo\_jobs\_%' ESCAPE '\';

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

-- name: claim_from
-- `claim` of the queued rows due from :from on, and no running row: serve's claims read from
-- where its last ones reached.
UPDATE nilo_jobs
SET state = 'running', lease_until = :lease_until, attempts = attempts + 1, started_at = :now,
    worker = :worker
WHERE id IN (
    SELECT id FROM nilo_jobs
    WHERE state = 'queued' AND run_at >= :from AND run_at <= :now
      AND +kind IN (SELECT value FROM json_each(:kinds))
    ORDER BY run_at, id LIMIT :limit)
RETURNING id, kind, payload, attempts, run_at, unique_key, snoozes, trace;

-- name: expired
-- The running rows of :kinds whose lease ran out by :now that `claim` may take back, each with
-- the worker that held it ('' when the row does not say): read just before `claim`, in its
-- write transaction, since SQLite's RETURNING answers only the values the update wrote. The
-- rows `claim` answers that are among these were retaken. It walks `nilo_jobs_lease` as the
-- claim does, and finds nothing at once while no lease ran out.
SELECT id, coalesce(worker, '') FROM nilo_jobs
WHERE state = 'running' AND lease_until <= :now
  AND +kind IN (SELECT value FROM json_each(:kinds))
ORDER BY lease_until, id LIMIT :limit;

-- name: running
-- How many rows of one kind run under a live lease at :now: what a kind's concurrency limit
-- counts, in the write transaction of the claim that takes the rest of its room (`claim`, for
-- that kind alone). It walks `nilo_jobs_lease` from :now on.
SELECT count(*) FROM nilo_jobs
WHERE state = 'running' AND lease_until > :now AND +kind = :kind;

-- name: attempt
-- The attempt an end closes, recorded before the end's statement changes the row (one
-- transaction): ended_at, outcome, error, detail, traceback, id, attempts.
INSERT INTO nilo_jobs_attempts (row_id, attempt, started_at, ended_at, worker, outcome, error,
                                detail, traceback)
SELECT id, attempts, started_at, :ended_at, worker, :outcome, :error, :detail, :traceback
FROM nilo_jobs WHERE id = :id AND state = 'running' AND attempts = :attempts;

-- name: lost
-- The attempt a worker lost with its lease (it stopped being heard from), recorded by the one
-- that took the row back as that claim ends: ended when the claim took it (the row's
-- started_at).
INSERT INTO nilo_jobs_attempts (row_id, attempt, ended_at, worker, outcome)
SELECT id, attempts - 1, coalesce(started_at, lease_until), :worker, 'lost'
FROM nilo_jobs WHERE id = :id AND state = 'running' AND attempts = :attempts;

-- name: attempts_trim
-- A row's attempts past the newest 20 (ATTEMPTS_KEPT), forgotten: the row's id.
DELETE FROM nilo_jobs_attempts WHERE row_id = :id AND id < (
    SELECT id FROM nilo_jobs_attempts WHERE row_id = :id ORDER BY id DESC LIMIT 1 OFFSET 19);

-- name: death
-- A death counted in its minute (the kind is the dead row's).
INSERT INTO nilo_jobs_deaths (kind, minute, deaths)
SELECT kind, :minute, 1 FROM nilo_jobs WHERE id = :id
ON CONFLICT (kind, minute) DO UPDATE SET deaths = deaths + 1;

-- name: deaths_trim
-- The dead row's kind's minutes older than a day, forgotten.
DELETE FROM nilo_jobs_deaths
WHERE kind = (SELECT kind FROM nilo_jobs WHERE id = :id) AND minute < :oldest;

-- name: attempts_forget
-- The attempts of rows deleted: a JSON list of their ids.
DELETE FROM nilo_jobs_attempts WHERE row_id IN (SELECT value FROM json_each(?));

-- name: attempts_of
SELECT attempt, outcome, started_at, ended_at, worker, error, detail, traceback
FROM nilo_jobs_attempts WHERE row_id = ? ORDER BY id;

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

-- name: attempts_forget_one
DELETE FROM nilo_jobs_attempts WHERE row_id = ?;

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
    SELECT id FROM nilo_jobs_done WHERE finished_at < ? ORDER BY finished_at, id LIMIT ?)
RETURNING id;

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
SELECT kind, 'dead', minute, deaths FROM nilo_jobs_deaths WHERE minute >= :since;

-- name: durations
SELECT finished_at - started_at FROM nilo_jobs_done
WHERE kind = ? AND finished_at >= ? AND started_at IS NOT NULL
ORDER BY finished_at DESC, id DESC LIMIT ?;

-- name: oldest_due
SELECT kind, min(run_at) FROM nilo_jobs WHERE state = 'queued' AND run_at <= ? GROUP BY kind;

-- name: held_back
-- A passive checkpoint: (busy, the WAL's frames, the frames copied back). Fewer copied than
-- there are means a reader's open transaction still needs the rest.
PRAGMA wal_checkpoint(PASSIVE);
