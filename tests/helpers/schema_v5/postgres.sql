-- The PostgreSQL statements of nilo-job's table version 5 that the upgrade tests run as an
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
    traceback   text,                               -- the last failure's traceback (version 2)
    pushed_at   bigint,                             -- µs, when pushed (version 3)
    started_at  bigint,                             -- µs, the last attempt's claim (version 3)
    worker      text,                               -- host:pid that claimed it (version 3)
    snoozes     integer NOT NULL DEFAULT 0,         -- times its runs snoozed (version 4)
    trace       text                                -- its push's trace context (version 5)
);
CREATE UNIQUE INDEX IF NOT EXISTS nilo_jobs_unique ON nilo_jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS nilo_jobs_due ON nilo_jobs (run_at, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS nilo_jobs_lease ON nilo_jobs (lease_until, id) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS nilo_jobs_dead ON nilo_jobs (died_at, id) WHERE state = 'dead';
CREATE INDEX IF NOT EXISTS nilo_jobs_dead_kind ON nilo_jobs (kind, died_at, id)
    WHERE state = 'dead';                           -- (version 3)
CREATE TABLE IF NOT EXISTS nilo_jobs_done (       -- done rows kept as history (version 3)
    id          bigint  PRIMARY KEY,                -- the id it had in nilo_jobs
    kind        text    NOT NULL,
    payload     json    NOT NULL,
    unique_key  text,                               -- the key it held (released as it finished)
    run_at      bigint  NOT NULL,
    pushed_at   bigint,
    started_at  bigint,                             -- µs, when its last run began
    finished_at bigint  NOT NULL,                   -- µs, when it ended
    attempts    integer NOT NULL,
    worker      text,
    error       text,                               -- an earlier attempt's failure, if any
    detail      text,
    result      text                                -- the JSON its run returned, or NULL
);
CREATE INDEX IF NOT EXISTS nilo_jobs_done_finished ON nilo_jobs_done (finished_at, id);
CREATE INDEX IF NOT EXISTS nilo_jobs_done_kind ON nilo_jobs_done (kind, finished_at, id);
CREATE TABLE IF NOT EXISTS nilo_jobs_paused (     -- kinds no worker claims (version 3)
    kind        text    PRIMARY KEY,
    paused_at   bigint  NOT NULL
);
CREATE TABLE IF NOT EXISTS nilo_jobs_version (
    version         integer NOT NULL,   -- the table's version
    compatible_from integer NOT NULL    -- the oldest version whose nilo-job works on it
);

-- name: set_version
INSERT INTO nilo_jobs_version (version, compatible_from) VALUES (%s, %s);

-- name: push
-- The common row: queued, no unique key. No ON CONFLICT, whose speculative insertion costs an
-- extra WAL record even when the key is NULL, and five parameters instead of eleven. The NOTIFY
-- is in RETURNING, not in a SELECT over a WITH: one plan node fewer (about a fiftieth of a push).
INSERT INTO nilo_jobs (kind, payload, state, run_at, pushed_at, trace)
VALUES (%s, %s::json, 'queued', %s, %s, %s)
RETURNING id, pg_notify('nilo_jobs', run_at::text);

-- name: claim
WITH queued AS (
    SELECT id, run_at FROM nilo_jobs
    WHERE state = 'queued' AND run_at <= %(now)s AND kind = ANY(%(kinds)s::text[])
    ORDER BY run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT id, run_at FROM nilo_jobs
    WHERE state = 'running' AND lease_until <= %(now)s AND kind = ANY(%(kinds)s::text[])
    ORDER BY lease_until, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id FROM (SELECT id, run_at FROM queued UNION ALL SELECT id, run_at FROM expired) AS due
    ORDER BY run_at, id LIMIT %(limit)s
)
UPDATE nilo_jobs AS job
SET state = 'running', lease_until = %(lease_until)s, attempts = job.attempts + 1,
    started_at = %(now)s, worker = %(worker)s
FROM picked WHERE job.id = picked.id
RETURNING job.id, job.kind, job.payload::text, job.attempts, job.run_at, job.unique_key,
          job.snoozes, job.trace;

-- name: done
-- A running row is asked for as neither queued nor dead, here and in every end below: the
-- planner then has the primary key alone to find it by, whereas `state = 'running'` lets a plan
-- chosen while few rows ran walk the whole lease index (whose second column is the id).
DELETE FROM nilo_jobs WHERE id = %s AND state <> 'queued' AND state <> 'dead' AND attempts = %s;

-- name: died
UPDATE nilo_jobs
SET state = 'dead', died_at = %s, lease_until = NULL, unique_key = NULL, error = %s, detail = %s,
    traceback = %s
WHERE id = %s AND state <> 'queued' AND state <> 'dead' AND attempts = %s;
