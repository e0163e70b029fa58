-- The PostgreSQL store's statements, one named statement each, loaded once by postgres.py.
-- Times are microseconds since the epoch (bigint), handed in by the queue.

-- name: create
CREATE TABLE IF NOT EXISTS nilo_jobs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- never reused
    kind        text    NOT NULL,
    payload     json    NOT NULL,                   -- the JSON the queue encoded, kept verbatim
    state       text    NOT NULL CHECK (state IN ('queued', 'running', 'dead')),
    run_at      bigint  NOT NULL,                   -- due at, µs
    lease_until bigint,                             -- while running, µs
    attempts    integer NOT NULL DEFAULT 0,         -- claims so far, this one included
    unique_key  text,                               -- NULL once the row is dead
    error       text,                               -- the last failure's exception class name
    detail      text,                               -- its message
    died_at     bigint,                             -- µs, while dead
    traceback   text                                -- the last failure's traceback (version 2)
);
CREATE UNIQUE INDEX IF NOT EXISTS nilo_jobs_unique ON nilo_jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS nilo_jobs_due ON nilo_jobs (run_at, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS nilo_jobs_lease ON nilo_jobs (lease_until, id) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS nilo_jobs_dead ON nilo_jobs (died_at, id) WHERE state = 'dead';
CREATE TABLE IF NOT EXISTS nilo_jobs_version (
    version         integer NOT NULL,   -- the table's version
    compatible_from integer NOT NULL    -- the oldest version whose nilo-job works on it
);

-- name: upgrade_to_2
-- Version 2 keeps the last failure's traceback beside its name and message. A nullable column
-- without a default: PostgreSQL adds it to the catalog only, rewriting no row.
ALTER TABLE nilo_jobs ADD COLUMN IF NOT EXISTS traceback text;

-- name: has_version
SELECT count(*) FROM information_schema.tables
WHERE table_name = 'nilo_jobs_version' AND table_schema = current_schema();

-- name: version
SELECT max(version), max(compatible_from) FROM nilo_jobs_version;

-- name: forget_version
DELETE FROM nilo_jobs_version;

-- name: set_version
INSERT INTO nilo_jobs_version (version, compatible_from) VALUES (%s, %s);

-- name: columns
SELECT column_name FROM information_schema.columns
WHERE table_name = 'nilo_jobs' AND table_schema = current_schema();

-- name: now
SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;

-- name: push
-- The common row: queued, no unique key. No ON CONFLICT, whose speculative insertion costs an
-- extra WAL record even when the key is NULL, and three parameters instead of seven.
WITH pushed AS (
    INSERT INTO nilo_jobs (kind, payload, state, run_at)
    VALUES (%s, %s::json, 'queued', %s)
    RETURNING id, run_at)
SELECT id, pg_notify('nilo_jobs', run_at::text) FROM pushed;

-- name: push_claimed
-- A row its pusher claimed for an idle worker of its own (no key): it wakes nobody else.
INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, lease_until)
VALUES (%s, %s::json, 'running', %s, 1, %s)
RETURNING id;

-- name: push_row
-- A row with a unique key (and perhaps claimed by its pusher, which then wakes nobody else).
WITH pushed AS (
    INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, unique_key, lease_until)
    VALUES (%(kind)s, %(payload)s::json, %(state)s, %(run_at)s, %(attempts)s, %(unique_key)s,
            %(lease_until)s)
    ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, run_at)
SELECT id, CASE WHEN %(state)s = 'queued' THEN pg_notify('nilo_jobs', run_at::text) END
FROM pushed;

-- name: push_bulk
WITH pushed AS (
    INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, lease_until)
    SELECT kind, payload::json, CASE WHEN lease_until IS NULL THEN 'queued' ELSE 'running' END,
           run_at, CASE WHEN lease_until IS NULL THEN 0 ELSE 1 END, lease_until
    FROM unnest(%(kinds)s::text[], %(payloads)s::text[], %(run_ats)s::bigint[],
                %(leases)s::bigint[])
        AS row(kind, payload, run_at, lease_until)
    RETURNING id, run_at)
SELECT id, pg_notify('nilo_jobs', (SELECT min(run_at) FROM pushed)::text)
FROM pushed WHERE id = (SELECT max(id) FROM pushed)
UNION ALL
SELECT id, NULL FROM pushed WHERE id <> (SELECT max(id) FROM pushed);

-- name: push_sqlalchemy
WITH pushed AS (
    INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, unique_key, lease_until)
    VALUES (:kind, CAST(:payload AS json), :state, :run_at, :attempts, :unique_key,
            CAST(:lease_until AS bigint))
    ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, run_at)
SELECT id, pg_notify('nilo_jobs', CAST(run_at AS text)) FROM pushed;

-- name: claim
WITH queued AS (
    SELECT id, run_at FROM nilo_jobs
    WHERE state = 'queued' AND run_at <= %(now)s AND kind = ANY(%(kinds)s)
    ORDER BY run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT id, run_at FROM nilo_jobs
    WHERE state = 'running' AND lease_until <= %(now)s AND kind = ANY(%(kinds)s)
    ORDER BY lease_until, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id FROM (SELECT id, run_at FROM queued UNION ALL SELECT id, run_at FROM expired) AS due
    ORDER BY run_at, id LIMIT %(limit)s
)
UPDATE nilo_jobs AS job
SET state = 'running', lease_until = %(lease_until)s, attempts = job.attempts + 1
FROM picked WHERE job.id = picked.id
RETURNING job.id, job.kind, job.payload::text, job.attempts, job.run_at, job.unique_key;

-- name: done
DELETE FROM nilo_jobs WHERE id = %s AND state = 'running' AND attempts = %s;

-- name: done_many
DELETE FROM nilo_jobs AS job
USING unnest(%s::bigint[], %s::integer[]) AS done(id, attempts)
WHERE job.id = done.id AND job.attempts = done.attempts AND job.state = 'running'
RETURNING job.id;

-- name: retrying
UPDATE nilo_jobs
SET state = 'queued', run_at = %s, lease_until = NULL, error = %s, detail = %s, traceback = %s,
    unique_key = CASE WHEN %s THEN NULL ELSE unique_key END
WHERE id = %s AND state = 'running' AND attempts = %s;

-- name: died
UPDATE nilo_jobs
SET state = 'dead', died_at = %s, lease_until = NULL, unique_key = NULL, error = %s, detail = %s,
    traceback = %s
WHERE id = %s AND state = 'running' AND attempts = %s;

-- name: released
UPDATE nilo_jobs
SET state = 'queued', run_at = %s, lease_until = NULL, attempts = attempts - 1
WHERE id = %s AND state = 'running' AND attempts = %s;

-- name: release_key
UPDATE nilo_jobs SET unique_key = NULL
WHERE id = %s AND state = 'running' AND attempts = %s AND unique_key IS NOT NULL;

-- name: cancel
DELETE FROM nilo_jobs WHERE id = %s AND state = 'queued';

-- name: rows_queued
SELECT id, kind, state, payload::text, run_at, attempts, unique_key, lease_until, error, died_at,
       detail, traceback
FROM nilo_jobs WHERE state = 'queued' ORDER BY run_at, id LIMIT %s;

-- name: rows_running
SELECT id, kind, state, payload::text, run_at, attempts, unique_key, lease_until, error, died_at,
       detail, traceback
FROM nilo_jobs WHERE state = 'running' ORDER BY run_at, id LIMIT %s;

-- name: rows_dead
SELECT id, kind, state, payload::text, run_at, attempts, unique_key, lease_until, error, died_at,
       detail, traceback
FROM nilo_jobs WHERE state = 'dead' ORDER BY died_at DESC, id DESC LIMIT %s;

-- name: holding
SELECT id, kind, state, payload::text, run_at, attempts, unique_key, lease_until, error, died_at,
       detail, traceback
FROM nilo_jobs
WHERE unique_key = %(key)s AND kind = ANY(%(kinds)s)
ORDER BY kind;

-- name: counts
SELECT kind, state, count(*) FROM nilo_jobs GROUP BY kind, state;

-- name: stats
SELECT (SELECT count(*) FROM nilo_jobs WHERE state = 'queued'),
       (SELECT count(*) FROM nilo_jobs WHERE state = 'running'),
       (SELECT count(*) FROM nilo_jobs WHERE state = 'dead');

-- name: dead_ones
SELECT id, kind, error, attempts, payload::text, died_at, detail, traceback FROM nilo_jobs
WHERE state = 'dead' ORDER BY died_at DESC, id DESC LIMIT %s;

-- name: retry_dead
WITH again AS (
    UPDATE nilo_jobs
    SET state = 'queued', run_at = %s, attempts = 0, error = NULL, detail = NULL, traceback = NULL,
        died_at = NULL
    WHERE id = %s AND state = 'dead'
    RETURNING id, run_at)
SELECT id, pg_notify('nilo_jobs', run_at::text) FROM again;
