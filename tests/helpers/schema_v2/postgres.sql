-- The PostgreSQL statements of nilo-job's table version 2 that the upgrade tests run as an
-- old worker would (tests/stores/test_upgrade.py): the table as it was, a push, a claim, an end.
-- Times are microseconds since the epoch, handed in by the queue.

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

-- name: set_version
INSERT INTO nilo_jobs_version (version, compatible_from) VALUES (%s, %s);

-- name: push
-- The common row: queued, no unique key. No ON CONFLICT, whose speculative insertion costs an
-- extra WAL record even when the key is NULL, and three parameters instead of seven.
WITH pushed AS (
    INSERT INTO nilo_jobs (kind, payload, state, run_at)
    VALUES (%s, %s::json, 'queued', %s)
    RETURNING id, run_at)
SELECT id, pg_notify('nilo_jobs', run_at::text) FROM pushed;

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

-- name: died
UPDATE nilo_jobs
SET state = 'dead', died_at = %s, lease_until = NULL, unique_key = NULL, error = %s, detail = %s,
    traceback = %s
WHERE id = %s AND state = 'running' AND attempts = %s;
