-- The PostgreSQL store's statements, one named statement each, loaded once by the store.
-- Times are microseconds since the epoch (bigint), handed in by the queue.
-- Arrays of numbers go as array literals the store builds ('{1,2,3}', cast on the server): psycopg
-- would inspect every element to pick the array's type. Arrays of text go in binary (%b): in
-- text, psycopg quotes every element with a regex; but a claim's kinds, the same every time, go
-- as a literal the store quotes once and keeps.

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
CREATE TABLE IF NOT EXISTS nilo_jobs_workers (    -- serving processes (version 6)
    id          text    PRIMARY KEY,                -- "host:pid:started_at"
    host        text    NOT NULL,
    pid         integer NOT NULL,
    version     text    NOT NULL,                   -- nilo-job's version in that process
    kinds       text    NOT NULL,                   -- JSON list of the kinds it serves
    workers     integer NOT NULL,                   -- rows it runs at once
    beat_ms     integer NOT NULL,                   -- how often it beats
    started_at  bigint  NOT NULL,                   -- µs, when its serve started
    beat_at     bigint  NOT NULL,                   -- µs, its last beat
    running     text    NOT NULL                    -- JSON list of the row ids it holds
);
CREATE INDEX IF NOT EXISTS nilo_jobs_workers_beat ON nilo_jobs_workers (beat_at);
CREATE TABLE IF NOT EXISTS nilo_jobs_attempts (  -- attempts that did not end done (version 7)
    id          bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- the order they were written
    row_id      bigint  NOT NULL,                   -- the row's id (in nilo_jobs or nilo_jobs_done)
    attempt     integer NOT NULL,                   -- the row's attempts when it ended
    started_at  bigint,                             -- µs, its claim
    ended_at    bigint  NOT NULL,                   -- µs
    worker      text,                               -- host:pid that ran it
    outcome     text    NOT NULL,                   -- retrying, dead, snoozed, released, lost
    error       text,                               -- its failure's class name, message and
    detail      text,                               -- traceback, bounded as the row's
    traceback   text
);
CREATE INDEX IF NOT EXISTS nilo_jobs_attempts_row ON nilo_jobs_attempts (row_id, id);
CREATE TABLE IF NOT EXISTS nilo_jobs_deaths (    -- deaths by kind and minute, a day (version 7)
    kind        text    NOT NULL,
    minute      bigint  NOT NULL,                   -- µs since the epoch, the minute's start
    deaths      integer NOT NULL,
    PRIMARY KEY (kind, minute)
);
CREATE TABLE IF NOT EXISTS nilo_jobs_version (
    version         integer NOT NULL,   -- the table's version
    compatible_from integer NOT NULL    -- the oldest version whose nilo-job works on it
);

-- name: upgrade_to_2
-- Version 2 keeps the last failure's traceback beside its name and message. A nullable column
-- without a default: PostgreSQL adds it to the catalog only, rewriting no row.
ALTER TABLE nilo_jobs ADD COLUMN IF NOT EXISTS traceback text;

-- name: upgrade_to_3
-- Version 3 records when a row was pushed and started and by which worker (nullable columns
-- without defaults: no row is rewritten), and adds the history of done rows and the paused
-- kinds (their tables come with `create`).
ALTER TABLE nilo_jobs ADD COLUMN IF NOT EXISTS pushed_at bigint;
ALTER TABLE nilo_jobs ADD COLUMN IF NOT EXISTS started_at bigint;
ALTER TABLE nilo_jobs ADD COLUMN IF NOT EXISTS worker text;

-- name: upgrade_to_4
-- Version 4 counts each row's snoozes. A constant default: PostgreSQL keeps it in the catalog,
-- rewriting no row. An older nilo-job never names the column, and its inserts get the default.
ALTER TABLE nilo_jobs ADD COLUMN IF NOT EXISTS snoozes integer NOT NULL DEFAULT 0;

-- name: upgrade_to_5
-- Version 5 keeps the W3C trace context of each row's push (OpenTelemetry), NULL without one. A
-- nullable column without a default: PostgreSQL adds it to the catalog only, rewriting no row,
-- and a NULL costs a row nothing beyond the bit its null bitmap already has room for.
ALTER TABLE nilo_jobs ADD COLUMN IF NOT EXISTS trace text;

-- name: upgrade_to_6
-- Version 6 adds the registry of serving processes, a table of its own (made by `create`, which
-- runs after the steps): no column of nilo_jobs changes, and an older nilo-job never reads it.
SELECT 1;

-- name: upgrade_to_7
-- Version 7 keeps each row's attempts and counts deaths by the minute, in tables of their own
-- (made here, as `create` runs after the steps): no column of nilo_jobs changes. Each dead row's
-- death is recorded as its last attempt and counted in its minute (unless it is
-- already: a table whose version was not recorded, as Alembic's, may be at version 7).
CREATE TABLE IF NOT EXISTS nilo_jobs_attempts (  -- attempts that did not end done (version 7)
    id          bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- the order they were written
    row_id      bigint  NOT NULL,                   -- the row's id (in nilo_jobs or nilo_jobs_done)
    attempt     integer NOT NULL,                   -- the row's attempts when it ended
    started_at  bigint,                             -- µs, its claim
    ended_at    bigint  NOT NULL,                   -- µs
    worker      text,                               -- host:pid that ran it
    outcome     text    NOT NULL,                   -- retrying, dead, snoozed, released, lost
    error       text,                               -- its failure's class name, message and
    detail      text,                               -- traceback, bounded as the row's
    traceback   text
);
CREATE INDEX IF NOT EXISTS nilo_jobs_attempts_row ON nilo_jobs_attempts (row_id, id);
CREATE TABLE IF NOT EXISTS nilo_jobs_deaths (    -- deaths by kind and minute, a day (version 7)
    kind        text    NOT NULL,
    minute      bigint  NOT NULL,                   -- µs since the epoch, the minute's start
    deaths      integer NOT NULL,
    PRIMARY KEY (kind, minute)
);
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
VALUES (%(id)s, %(host)s, %(pid)s, %(version)s, %(kinds)s, %(workers)s, %(beat_ms)s,
        %(started_at)s, %(beat_at)s, %(running)s)
ON CONFLICT (id) DO UPDATE SET beat_at = excluded.beat_at, running = excluded.running;

-- name: worker_beat
-- A beat that renews, one statement whatever the number of rows: the leases of the rows this
-- process holds renewed (never shortened), lost entries past the time they are kept forgotten,
-- and the process's own entry written. Answers one row when the entry was there. Every scan
-- has an index.
WITH renewed AS (
    UPDATE nilo_jobs SET lease_until = greatest(lease_until, %(until)s)
    WHERE id = ANY(%(ids)s::bigint[]) AND state = 'running' AND worker = %(worker)s
    RETURNING id
), forgotten AS (
    DELETE FROM nilo_jobs_workers WHERE beat_at < %(forget_before)s AND id <> %(id)s
)
UPDATE nilo_jobs_workers SET beat_at = %(now)s, running = %(running)s
WHERE id = %(id)s
RETURNING (SELECT count(*) FROM renewed);

-- name: worker_beat_only
-- A beat with no lease to renew (no heartbeat_ms, or no row held): the same, without the renewal.
WITH forgotten AS (
    DELETE FROM nilo_jobs_workers WHERE beat_at < %(forget_before)s AND id <> %(id)s
)
UPDATE nilo_jobs_workers SET beat_at = %(now)s, running = %(running)s
WHERE id = %(id)s
RETURNING 0;

-- name: worker_unregister
DELETE FROM nilo_jobs_workers WHERE id = %s;

-- name: workers
SELECT id, host, pid, version, kinds, workers, beat_ms, started_at, beat_at, running
FROM nilo_jobs_workers ORDER BY started_at, id;

-- name: tables
-- Which of the tables beside nilo_jobs (the names given) exist, found as the statements find
-- them: through the connection's search_path.
SELECT name FROM unnest(%s::text[]) AS name WHERE to_regclass(name) IS NOT NULL;

-- name: version
SELECT max(version), max(compatible_from) FROM nilo_jobs_version;

-- name: forget_version
DELETE FROM nilo_jobs_version;

-- name: set_version
INSERT INTO nilo_jobs_version (version, compatible_from) VALUES (%s, %s);

-- name: columns
SELECT column_name FROM information_schema.columns
WHERE table_name = 'nilo_jobs' AND table_schema = current_schema();

-- name: readable
-- One arm of a check's read of the queue's tables that the statements find (`{table}`: each
-- of them, joined by UNION ALL), reading no row: the server refuses it, naming the table, when
-- the user may not read one (information_schema would only hide such a table's columns).
SELECT 1 FROM {table} WHERE false

-- name: now
SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;

-- name: push
-- The common row: queued, no unique key. No ON CONFLICT, whose speculative insertion costs an
-- extra WAL record even when the key is NULL, and five parameters instead of eleven. The NOTIFY
-- is in RETURNING, not in a SELECT over a WITH: one plan node fewer (about a fiftieth of a push).
INSERT INTO nilo_jobs (kind, payload, state, run_at, pushed_at, trace)
VALUES (%s, %s::json, 'queued', %s, %s, %s)
RETURNING id, pg_notify('nilo_jobs', run_at::text);

-- name: push_claimed
-- A row its pusher claimed for an idle worker of its own (no key): it wakes nobody else.
INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, lease_until, pushed_at, started_at,
                       worker, trace)
VALUES (%s, %s::json, 'running', %s, 1, %s, %s, %s, %s, %s)
RETURNING id;

-- name: push_row
-- A row with a unique key (and perhaps claimed by its pusher, which then wakes nobody else).
-- RETURNING holds no row, and so sends no NOTIFY, when the key was taken.
INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, unique_key, lease_until, pushed_at,
                       started_at, worker, trace)
VALUES (%(kind)s, %(payload)s::json, %(state)s, %(run_at)s, %(attempts)s, %(unique_key)s,
        %(lease_until)s, %(pushed_at)s, %(started_at)s, %(worker)s, %(trace)s)
ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
RETURNING id, CASE WHEN state = 'queued' THEN pg_notify('nilo_jobs', run_at::text) END;

-- name: push_bulk
WITH pushed AS (
    INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, lease_until, pushed_at,
                           started_at, worker, trace)
    SELECT kind, payload::json, CASE WHEN lease_until IS NULL THEN 'queued' ELSE 'running' END,
           run_at, CASE WHEN lease_until IS NULL THEN 0 ELSE 1 END, lease_until, pushed_at,
           CASE WHEN lease_until IS NULL THEN NULL ELSE pushed_at END,
           CASE WHEN lease_until IS NULL THEN NULL ELSE worker END, trace
    FROM unnest(%(kinds)b::text[], %(payloads)b::text[], %(run_ats)b::bigint[],
                %(leases)b::bigint[], %(pushed_ats)b::bigint[], %(workers)b::text[],
                %(traces)b::text[])
        AS row(kind, payload, run_at, lease_until, pushed_at, worker, trace)
    RETURNING id, run_at)
SELECT id, pg_notify('nilo_jobs', (SELECT min(run_at) FROM pushed)::text)
FROM pushed WHERE id = (SELECT max(id) FROM pushed)
UNION ALL
SELECT id, NULL FROM pushed WHERE id <> (SELECT max(id) FROM pushed);

-- name: push_sqlalchemy
WITH pushed AS (
    INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, unique_key, lease_until,
                           pushed_at, started_at, worker, trace)
    VALUES (:kind, CAST(:payload AS json), :state, :run_at, :attempts, :unique_key,
            CAST(:lease_until AS bigint), CAST(:pushed_at AS bigint), CAST(:started_at AS bigint),
            CAST(:worker AS text), CAST(:trace AS text))
    ON CONFLICT (kind, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, run_at)
SELECT id, pg_notify('nilo_jobs', CAST(run_at AS text)) FROM pushed;

-- name: claim
-- Each row taken is answered with `held`: NULL when it was queued; when it was running under a
-- lease that ran out, the worker that held it ('' when the row does not say), read before the
-- update (a CTE sees the table as the statement found it). The rows picked are updated by
-- `id = ANY` on the primary key, the one way this leaves the planner to find them: as a join
-- with the picked rows, a plan made while the table's statistics said it was empty (a vacuum
-- that found few live rows sets them so) walked the whole primary key for every row picked,
-- seconds a claim once rows piled up, until the next analyze.
WITH queued AS (
    SELECT id, run_at FROM nilo_jobs
    WHERE state = 'queued' AND run_at <= %(now)s AND kind = ANY(%(kinds)s::text[])
    ORDER BY run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT id, run_at, coalesce(worker, '') AS held FROM nilo_jobs
    WHERE state = 'running' AND lease_until <= %(now)s AND kind = ANY(%(kinds)s::text[])
    ORDER BY lease_until, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id, held FROM (
        SELECT id, run_at, NULL::text AS held FROM queued
        UNION ALL SELECT id, run_at, held FROM expired) AS due
    ORDER BY run_at, id LIMIT %(limit)s
), taken AS (
    UPDATE nilo_jobs AS job
    SET state = 'running', lease_until = %(lease_until)s, attempts = job.attempts + 1,
        started_at = %(now)s, worker = %(worker)s
    WHERE job.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING job.id, job.kind, job.payload::text AS payload, job.attempts, job.run_at,
              job.unique_key, job.snoozes, job.trace
)
SELECT taken.id, taken.kind, taken.payload, taken.attempts, taken.run_at, taken.unique_key,
       taken.snoozes, taken.trace, picked.held
FROM taken JOIN picked ON picked.id = taken.id
ORDER BY taken.run_at, taken.id;

-- name: claim_from
-- `claim` of the queued rows due from %(from)s on, and no running row: serve's claims read from
-- where its last ones reached, not past the entries of rows claimed long before that cleanup
-- cannot remove while a transaction holds an old snapshot. Updated by `id = ANY`, as `claim`.
WITH picked AS (
    SELECT id FROM nilo_jobs
    WHERE state = 'queued' AND run_at >= %(from)s AND run_at <= %(now)s
      AND kind = ANY(%(kinds)s::text[])
    ORDER BY run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE nilo_jobs AS job
    SET state = 'running', lease_until = %(lease_until)s, attempts = job.attempts + 1,
        started_at = %(now)s, worker = %(worker)s
    WHERE job.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING job.id, job.kind, job.payload::text AS payload, job.attempts, job.run_at,
              job.unique_key, job.snoozes, job.trace
)
SELECT id, kind, payload, attempts, run_at, unique_key, snoozes, trace, NULL::text
FROM taken ORDER BY run_at, id;

-- name: lock_kind
-- A claim of a kind with a concurrency limit takes this lock first, until its transaction ends:
-- claims of one limited kind, in every process, then count and claim one after the other. The
-- key is a namespace of nilo-job's and a hash of the kind's name (two kinds whose names hash
-- alike only wait for each other). A transaction's lock: it works behind a pooler in
-- transaction mode too.
SELECT pg_advisory_xact_lock(hashtext('nilo_jobs concurrency'), hashtext(%(kind)s));

-- name: running
-- How many rows of one kind run under a live lease (one that ends after the claim's now): what
-- its concurrency limit counts. A statement of its own after `lock_kind`, so that its snapshot,
-- taken once the lock is held, sees what the claim before it committed. It walks
-- `nilo_jobs_lease` from now on.
SELECT count(*) FROM nilo_jobs
WHERE state = 'running' AND lease_until > %(now)s AND kind = %(kind)s;

-- name: done
-- A running row is asked for as neither queued nor dead, here and in every end below: the
-- planner then has the primary key alone to find it by, whereas `state = 'running'` lets a plan
-- chosen while few rows ran walk the whole lease index (whose second column is the id).
-- The row goes, and the attempts it recorded with it.
WITH gone AS (
    DELETE FROM nilo_jobs
    WHERE id = %(id)s AND state <> 'queued' AND state <> 'dead' AND attempts = %(attempts)s
    RETURNING id
), forgot AS (
    DELETE FROM nilo_jobs_attempts WHERE row_id = %(id)s AND EXISTS (SELECT FROM gone)
)
SELECT id FROM gone;

-- name: keep
-- A done row moved into the history, in one statement.
WITH gone AS (
    DELETE FROM nilo_jobs
    WHERE id = %(id)s AND state <> 'queued' AND state <> 'dead' AND attempts = %(attempts)s
    RETURNING *
), kept AS (
    INSERT INTO nilo_jobs_done (id, kind, payload, unique_key, run_at, pushed_at, started_at,
                                finished_at, attempts, worker, error, detail, result)
    SELECT id, kind, payload, unique_key, run_at, pushed_at,
           coalesce(%(started_at)s::bigint, started_at), %(finished_at)s, attempts, worker, error,
           detail, %(result)s
    FROM gone
    ON CONFLICT (id) DO NOTHING
)
SELECT count(*) FROM gone;

-- name: keep_many
-- The ends' rows are found by `id = ANY` on the primary key, the one index this statement
-- leaves the planner (with the workers' `enable_seqscan = off`, and a running row asked for as
-- neither queued nor dead: see `done`); each row's own values are at its place in the arrays.
WITH gone AS (
    DELETE FROM nilo_jobs AS job
    WHERE job.id = ANY(%(ids)s::bigint[]) AND job.state <> 'queued' AND job.state <> 'dead'
      AND job.attempts = (%(attempts)s::integer[])[array_position(%(ids)s::bigint[], job.id)]
    RETURNING job.id, job.kind, job.payload, job.unique_key, job.run_at, job.pushed_at,
              job.started_at, job.attempts, job.worker, job.error, job.detail,
              array_position(%(ids)s::bigint[], job.id) AS at
), kept AS (
    INSERT INTO nilo_jobs_done (id, kind, payload, unique_key, run_at, pushed_at, started_at,
                                finished_at, attempts, worker, error, detail, result)
    SELECT id, kind, payload, unique_key, run_at, pushed_at,
           coalesce((%(started)s::bigint[])[at], started_at), (%(finished)s::bigint[])[at],
           attempts, worker, error, detail, (%(results)b::text[])[at]
    FROM gone WHERE (%(finished)s::bigint[])[at] IS NOT NULL
    ON CONFLICT (id) DO NOTHING
)
SELECT id FROM gone;

-- name: done_many
-- As keep_many: by `id = ANY` on the primary key, whatever the planner believes of the table.
-- The rows are gone, and the attempts they recorded with them.
WITH gone AS (
    DELETE FROM nilo_jobs AS job
    WHERE job.id = ANY(%(ids)s::bigint[]) AND job.state <> 'queued' AND job.state <> 'dead'
      AND job.attempts = (%(attempts)s::integer[])[array_position(%(ids)s::bigint[], job.id)]
    RETURNING job.id
), forgot AS (
    DELETE FROM nilo_jobs_attempts WHERE row_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT id FROM gone;

-- name: attempt
-- The attempt an end closes, recorded before the end's statement changes the row (one
-- transaction), and the row's attempts past the newest 20 (ATTEMPTS_KEPT) forgotten: ended_at,
-- outcome, error, detail, traceback, id, attempts.
WITH tried AS (
    INSERT INTO nilo_jobs_attempts (row_id, attempt, started_at, ended_at, worker, outcome,
                                    error, detail, traceback)
    SELECT id, attempts, started_at, %(ended_at)s, worker, %(outcome)s, %(error)s, %(detail)s,
           %(traceback)s
    FROM nilo_jobs
    WHERE id = %(id)s AND state <> 'queued' AND state <> 'dead' AND attempts = %(attempts)s
    RETURNING id
)
DELETE FROM nilo_jobs_attempts WHERE row_id = %(id)s AND EXISTS (SELECT FROM tried) AND id < (
    SELECT id FROM nilo_jobs_attempts WHERE row_id = %(id)s ORDER BY id DESC OFFSET 18 LIMIT 1);

-- name: lost
-- The attempt a worker lost with its lease (it stopped being heard from), recorded by the one
-- that took the row back as that claim ends: ended when the claim took it (the row's
-- started_at), with the attempts past the newest 20 forgotten, as `attempt` does.
WITH tried AS (
    INSERT INTO nilo_jobs_attempts (row_id, attempt, ended_at, worker, outcome)
    SELECT id, attempts - 1, coalesce(started_at, lease_until), %(worker)s, 'lost'
    FROM nilo_jobs
    WHERE id = %(id)s AND state <> 'queued' AND state <> 'dead' AND attempts = %(attempts)s
    RETURNING id
)
DELETE FROM nilo_jobs_attempts WHERE row_id = %(id)s AND EXISTS (SELECT FROM tried) AND id < (
    SELECT id FROM nilo_jobs_attempts WHERE row_id = %(id)s ORDER BY id DESC OFFSET 18 LIMIT 1);

-- name: death
-- A death counted in its minute, and the kind's minutes older than a day forgotten: the
-- kind is the dead row's.
WITH old AS (
    DELETE FROM nilo_jobs_deaths
    WHERE kind = (SELECT kind FROM nilo_jobs WHERE id = %(id)s)
      AND minute < %(oldest)s
)
INSERT INTO nilo_jobs_deaths (kind, minute, deaths)
SELECT kind, %(minute)s, 1 FROM nilo_jobs WHERE id = %(id)s
ON CONFLICT (kind, minute) DO UPDATE SET deaths = nilo_jobs_deaths.deaths + 1;

-- name: attempts_of
SELECT attempt, outcome, started_at, ended_at, worker, error, detail, traceback
FROM nilo_jobs_attempts WHERE row_id = %s ORDER BY id;

-- name: retrying
UPDATE nilo_jobs
SET state = 'queued', run_at = %s, lease_until = NULL, error = %s, detail = %s, traceback = %s,
    unique_key = CASE WHEN %s THEN NULL ELSE unique_key END
WHERE id = %s AND state <> 'queued' AND state <> 'dead' AND attempts = %s;

-- name: died
UPDATE nilo_jobs
SET state = 'dead', died_at = %s, lease_until = NULL, unique_key = NULL, error = %s, detail = %s,
    traceback = %s
WHERE id = %s AND state <> 'queued' AND state <> 'dead' AND attempts = %s;

-- name: released
UPDATE nilo_jobs
SET state = 'queued', run_at = %s, lease_until = NULL, attempts = attempts - 1, started_at = NULL,
    worker = NULL
WHERE id = %s AND state <> 'queued' AND state <> 'dead' AND attempts = %s;

-- name: snoozed
UPDATE nilo_jobs
SET state = 'queued', run_at = %s, lease_until = NULL, attempts = attempts - 1,
    snoozes = snoozes + 1, unique_key = CASE WHEN %s THEN NULL ELSE unique_key END
WHERE id = %s AND state <> 'queued' AND state <> 'dead' AND attempts = %s;

-- name: release_key
UPDATE nilo_jobs SET unique_key = NULL
WHERE id = %s AND state <> 'queued' AND state <> 'dead' AND attempts = %s
  AND unique_key IS NOT NULL;

-- name: cancel
WITH gone AS (
    DELETE FROM nilo_jobs WHERE id = %(id)s AND state = 'queued' RETURNING id
), forgot AS (
    DELETE FROM nilo_jobs_attempts WHERE row_id = %(id)s AND EXISTS (SELECT FROM gone)
)
SELECT count(*) FROM gone;

-- name: holding
SELECT id, kind, state, payload::text, run_at, attempts, unique_key, lease_until, error, died_at,
       detail, traceback, pushed_at, started_at, NULL::bigint, worker, NULL::text, snoozes
FROM nilo_jobs
WHERE unique_key = %(key)s AND kind = ANY(%(kinds)s)
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
-- Each payload's start only, its first LISTED_CHARS + 1 characters (contract.listed).
SELECT id, kind, error, attempts, left(payload::text, %s), died_at, detail, traceback
FROM nilo_jobs
WHERE state = 'dead' ORDER BY died_at DESC, id DESC LIMIT %s;

-- name: retry_dead
WITH again AS (
    UPDATE nilo_jobs
    SET state = 'queued', run_at = %s, attempts = 0, error = NULL, detail = NULL, traceback = NULL,
        died_at = NULL, started_at = NULL, worker = NULL, snoozes = 0
    WHERE id = %s AND state = 'dead'
    RETURNING id, run_at)
SELECT id, pg_notify('nilo_jobs', run_at::text) FROM again;

-- name: row
SELECT id, kind, state, payload::text, run_at, attempts, unique_key, lease_until, error, died_at,
       detail, traceback, pushed_at, started_at, NULL::bigint, worker, NULL::text, snoozes
FROM nilo_jobs WHERE id = %(id)s
UNION ALL
SELECT id, kind, 'done', payload::text, run_at, attempts, unique_key, NULL, error, NULL, detail,
       NULL, pushed_at, started_at, finished_at, worker, result, NULL
FROM nilo_jobs_done WHERE id = %(id)s;

-- name: retry_many
WITH again AS (
    UPDATE nilo_jobs
    SET state = 'queued', run_at = %s, attempts = 0, error = NULL, detail = NULL, traceback = NULL,
        died_at = NULL, started_at = NULL, worker = NULL, snoozes = 0
    WHERE id = ANY(%s) AND state = 'dead'
    RETURNING id, run_at)
SELECT id, CASE WHEN id = (SELECT min(id) FROM again)
                THEN pg_notify('nilo_jobs', run_at::text) END
FROM again;

-- name: cancel_many
WITH gone AS (
    DELETE FROM nilo_jobs WHERE id = ANY(%(ids)s) AND state = 'queued' RETURNING id
), forgot AS (
    DELETE FROM nilo_jobs_attempts WHERE row_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT id FROM gone;

-- name: delete_many
WITH dead AS (
    DELETE FROM nilo_jobs WHERE id = ANY(%(ids)s) AND state = 'dead' RETURNING id
), done AS (
    DELETE FROM nilo_jobs_done WHERE id = ANY(%(ids)s) RETURNING id
), forgot AS (
    DELETE FROM nilo_jobs_attempts
    WHERE row_id = ANY(ARRAY(SELECT id FROM dead UNION ALL SELECT id FROM done))
)
SELECT id FROM dead UNION ALL SELECT id FROM done;

-- name: prune
-- The oldest done rows by the history's index, then each by its primary key (`id = ANY` of an
-- array, not `IN` a subquery, which a plan made while the table was small may join by walking
-- the whole primary key).
-- Their attempts go with them.
WITH gone AS (
    DELETE FROM nilo_jobs_done WHERE id = ANY(ARRAY(
        SELECT id FROM nilo_jobs_done WHERE finished_at < %s ORDER BY finished_at, id LIMIT %s))
    RETURNING id
), forgot AS (
    DELETE FROM nilo_jobs_attempts WHERE row_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT count(*) FROM gone;

-- name: pause
INSERT INTO nilo_jobs_paused (kind, paused_at) VALUES (%s, %s) ON CONFLICT (kind) DO NOTHING;

-- name: resume
DELETE FROM nilo_jobs_paused WHERE kind = %s;

-- name: paused
SELECT kind, paused_at FROM nilo_jobs_paused;

-- name: ended
SELECT kind, 'done', finished_at - finished_at %% 60000000 AS minute, count(*)
FROM nilo_jobs_done WHERE finished_at >= %(since)s GROUP BY kind, minute
UNION ALL
SELECT kind, 'dead', minute, deaths FROM nilo_jobs_deaths WHERE minute >= %(since)s;

-- name: durations
SELECT finished_at - started_at FROM nilo_jobs_done
WHERE kind = %s AND finished_at >= %s AND started_at IS NOT NULL
ORDER BY finished_at DESC, id DESC LIMIT %s;

-- name: oldest_due
SELECT kind, min(run_at) FROM nilo_jobs WHERE state = 'queued' AND run_at <= %s GROUP BY kind;

-- name: held_back
-- The oldest transaction of another session of this database that holds a snapshot, which
-- keeps cleanup (vacuum) from removing what was deleted or updated since it began. A role
-- without pg_read_all_stats sees the state and query of its own sessions only (NULL for others).
SELECT pid, extract(epoch FROM now() - xact_start)::float8, state, left(query, 200), usename,
       application_name
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL
  AND xact_start IS NOT NULL AND backend_type = 'client backend'
ORDER BY xact_start LIMIT 1;

-- name: swollen
-- The valid indexes of `nilo_jobs` whose files have swollen: larger than 1 MB and than four
-- times what their live entries need at 100 bytes each (VACUUM counts the live entries in the
-- index's `reltuples`; -1, never counted, is left alone). What a transaction holding an old
-- snapshot, or a backlog run down, leaves: a B-tree's file never shrinks by itself.
SELECT index.relname, pg_relation_size(index.oid)
FROM pg_index AS i JOIN pg_class AS index ON index.oid = i.indexrelid
WHERE i.indrelid = 'nilo_jobs'::regclass AND i.indisvalid AND index.reltuples >= 0
  AND pg_relation_size(index.oid) > greatest(1048576, 4 * 100 * index.reltuples)
ORDER BY index.relname;

-- name: index_sizes
-- Each valid index of `nilo_jobs` with its size in bytes (`Store.index_sizes`).
SELECT index.relname, pg_relation_size(index.oid)
FROM pg_index AS i JOIN pg_class AS index ON index.oid = i.indexrelid
WHERE i.indrelid = 'nilo_jobs'::regclass AND i.indisvalid
ORDER BY index.relname;

-- name: unfinished_rebuilds
-- What a `REINDEX CONCURRENTLY` of `nilo_jobs` cut short leaves: an invalid index named
-- `…_ccnew` (or `…_ccold`), which every write still keeps up. Dropped before the next rebuild.
SELECT index.relname
FROM pg_index AS i JOIN pg_class AS index ON index.oid = i.indexrelid
WHERE i.indrelid = 'nilo_jobs'::regclass AND NOT i.indisvalid
  AND (index.relname LIKE '%\_ccnew%' OR index.relname LIKE '%\_ccold%')
ORDER BY index.relname;

-- name: index_size
SELECT pg_relation_size(to_regclass(%s));

-- name: rebuild_lock
-- One process rebuilds at a time: a session lock, tried (the others go on without waiting).
SELECT pg_try_advisory_lock(hashtext('nilo_jobs concurrency'), hashtext('rebuild'));
