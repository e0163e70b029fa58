-- The MariaDB/MySQL store's statements, one named statement each, loaded once by the store.
-- Times are microseconds since the epoch (bigint), handed in by the queue.
-- Parameters are asyncmy's: %s, or %(name)s; a list goes as `IN (%(name)s)`, which the store
-- spells out as one parameter per value (`statements.spelled`). A literal % is %%.
-- No statement here uses RETURNING (MySQL has none; MariaDB has it for INSERT and DELETE only):
-- an insert's id is the connection's last insert id, and a statement that must say which rows
-- it changed is preceded by a locking read of them in its transaction.

-- name: create
-- Every text column is utf8mb4 with a binary collation that does not pad, MariaDB's
-- utf8mb4_nopad_bin (on MySQL 8 the store writes utf8mb4_0900_bin instead): a kind or a unique
-- key matches byte for byte, as on the other stores ('K' is not 'k', 'k ' is not 'k'). No comment
-- in this script holds a semicolon: the store sends it one statement per semicolon.
-- The indexes lead with the state, since neither database has partial indexes: each state's
-- rows are a range of its own index. A claim reads each of its kinds through an index that
-- leads with (state, kind), so that it locks no row of a kind it does not claim, even for the
-- moment it takes to look at it (InnoDB locks a row as it reads it, before the WHERE clause
-- has had its say). A NULL unique key never collides in a unique index.
CREATE TABLE IF NOT EXISTS nilo_jobs (
    id          bigint       NOT NULL AUTO_INCREMENT,  -- never reused (the counter is persistent)
    kind        varchar(255) NOT NULL,
    payload     longtext     NOT NULL,              -- the JSON the queue encoded, kept verbatim
    state       varchar(7)   NOT NULL,
    run_at      bigint       NOT NULL,              -- due at, µs
    lease_until bigint,                             -- while running, µs
    attempts    int          NOT NULL DEFAULT 0,    -- claims so far, this one included
    unique_key  varchar(255),                       -- NULL once the row is dead
    error       text,                               -- the last failure's exception class name
    detail      text,                               -- its message
    died_at     bigint,                             -- µs, while dead
    traceback   mediumtext,                         -- the last failure's traceback
    pushed_at   bigint,                             -- µs, when pushed
    started_at  bigint,                             -- µs, the last attempt's claim
    worker      text,                               -- host:pid that claimed it
    snoozes     int          NOT NULL DEFAULT 0,    -- times its runs snoozed
    trace       text,                               -- its push's trace context
    PRIMARY KEY (id),
    CONSTRAINT nilo_jobs_state CHECK (state IN ('queued', 'running', 'dead')),
    UNIQUE KEY nilo_jobs_unique (kind, unique_key),
    KEY nilo_jobs_due (state, kind, run_at, id),
    KEY nilo_jobs_lease (state, kind, lease_until, id),
    KEY nilo_jobs_order (state, run_at, id),
    KEY nilo_jobs_dead (state, died_at, id),
    KEY nilo_jobs_dead_kind (state, kind, died_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE TABLE IF NOT EXISTS nilo_jobs_done (       -- done rows kept as history
    id          bigint       NOT NULL,              -- the id it had in nilo_jobs
    kind        varchar(255) NOT NULL,
    payload     longtext     NOT NULL,
    unique_key  varchar(255),                       -- the key it held (released as it finished)
    run_at      bigint       NOT NULL,
    pushed_at   bigint,
    started_at  bigint,                             -- µs, when its last run began
    finished_at bigint       NOT NULL,              -- µs, when it ended
    attempts    int          NOT NULL,
    worker      text,
    error       text,                               -- an earlier attempt's failure, if any
    detail      text,
    result      mediumtext,                         -- the JSON its run returned, or NULL
    PRIMARY KEY (id),
    KEY nilo_jobs_done_finished (finished_at, id),
    KEY nilo_jobs_done_kind (kind, finished_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE TABLE IF NOT EXISTS nilo_jobs_paused (     -- kinds no worker claims
    kind        varchar(255) NOT NULL,
    paused_at   bigint       NOT NULL,
    PRIMARY KEY (kind)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE TABLE IF NOT EXISTS nilo_jobs_workers (    -- serving processes
    id          varchar(255) NOT NULL,              -- "host:pid:started_at"
    host        text         NOT NULL,
    pid         int          NOT NULL,
    version     text         NOT NULL,              -- nilo-job's version in that process
    kinds       mediumtext   NOT NULL,              -- JSON list of the kinds it serves
    workers     int          NOT NULL,              -- rows it runs at once
    beat_ms     int          NOT NULL,              -- how often it beats
    started_at  bigint       NOT NULL,              -- µs, when its serve started
    beat_at     bigint       NOT NULL,              -- µs, its last beat
    running     mediumtext   NOT NULL,              -- JSON list of the row ids it holds
    PRIMARY KEY (id),
    KEY nilo_jobs_workers_beat (beat_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE TABLE IF NOT EXISTS nilo_jobs_attempts (  -- attempts that did not end done
    id          bigint       NOT NULL AUTO_INCREMENT,  -- the order they were written in
    row_id      bigint       NOT NULL,              -- the row's id (in nilo_jobs or nilo_jobs_done)
    attempt     int          NOT NULL,              -- the row's attempts when it ended
    started_at  bigint,                             -- µs, its claim
    ended_at    bigint       NOT NULL,              -- µs
    worker      text,                               -- host:pid that ran it
    outcome     varchar(8)   NOT NULL,              -- retrying, dead, snoozed, released, lost
    error       text,                               -- its failure's class name, message and
    detail      text,                               -- traceback, bounded as the row's
    traceback   mediumtext,
    PRIMARY KEY (id),
    KEY nilo_jobs_attempts_row (row_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE TABLE IF NOT EXISTS nilo_jobs_deaths (    -- deaths by kind and minute, a day
    kind        varchar(255) NOT NULL,
    minute      bigint       NOT NULL,              -- µs since the epoch, the minute's start
    deaths      int          NOT NULL,
    PRIMARY KEY (kind, minute)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE TABLE IF NOT EXISTS nilo_jobs_version (
    version         int NOT NULL,   -- the table's version
    compatible_from int NOT NULL    -- the oldest version whose nilo-job works on it
) ENGINE=InnoDB;

-- name: upgrade_to_6
-- A table made by this store always records its version. One without a record but with every
-- column of version 5 (made by hand from `table.ddl`, or a migration stopped before its record
-- was written) gets the tables beside it from `create`, which runs first.
SELECT 1;

-- name: upgrade_to_7
-- As on the other stores: each dead row's death recorded as its last attempt and counted in its
-- minute.
INSERT INTO nilo_jobs_attempts (row_id, attempt, started_at, ended_at, worker, outcome, error,
                                detail, traceback)
SELECT id, attempts, started_at, died_at, worker, 'dead', error, detail, traceback
FROM nilo_jobs WHERE state = 'dead' AND died_at IS NOT NULL ORDER BY id;
INSERT INTO nilo_jobs_deaths (kind, minute, deaths)
SELECT kind, died_at - died_at %% 60000000 AS at_minute, count(*) FROM nilo_jobs
WHERE state = 'dead' AND died_at IS NOT NULL
GROUP BY kind, at_minute
ON DUPLICATE KEY UPDATE deaths = nilo_jobs_deaths.deaths;

-- name: lock_migration
-- One migration of this database at a time, in every process: a named lock of the session
-- (the server's names are not per database, so the database's own name is in it, hashed to
-- stay within MySQL's 64 characters). 1 when taken; 0 after the seconds given.
SELECT GET_LOCK(CONCAT('nilo_jobs:', SHA1(CONCAT('migrate ', DATABASE()))), %s);

-- name: unlock_migration
SELECT RELEASE_LOCK(CONCAT('nilo_jobs:', SHA1(CONCAT('migrate ', DATABASE()))));

-- name: columns
SELECT column_name FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = 'nilo_jobs';

-- name: readable
-- A read of one of the queue's tables (`{table}`: nilo_jobs or a table beside it) that reads no
-- row, for a check that did not find it in information_schema, which hides a table the user
-- may not read: the server then refuses it (ER_TABLEACCESS_DENIED_ERROR, whether the table
-- exists or not: the privilege is checked first), else it says there is no such table.
SELECT 1 FROM {table} LIMIT 0;

-- name: tables
-- The tables beside nilo_jobs that the database has.
SELECT table_name FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name LIKE 'nilo\_jobs\_%%';

-- name: version
SELECT max(version), max(compatible_from) FROM nilo_jobs_version;

-- name: forget_version
DELETE FROM nilo_jobs_version;

-- name: set_version
INSERT INTO nilo_jobs_version (version, compatible_from) VALUES (%s, %s);

-- name: now
-- The server's clock, in µs since the epoch (the session's time zone is UTC: no hour is
-- ambiguous).
SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED);

-- name: session
-- Every connection of the store's own, as it opens: UTC, strict about what a column can hold
-- (a value too long is an error, never cut), and READ COMMITTED, so that a claim's locking read
-- locks only the rows it takes (no gap locks), and each statement reads what was committed
-- before it.
SET SESSION time_zone = '+00:00', SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION';

-- name: isolation
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;

-- name: lock_wait
-- How long a statement waits for a row another transaction holds (whole seconds, at least 1):
-- the store's `answer_ms`, rounded up, so that a statement its caller gave up on does not wait
-- on in the server for longer than the call could have.
SET SESSION innodb_lock_wait_timeout = %s;

-- name: push
-- A row; its id is the connection's last insert id. A unique key another queued or running row
-- of the kind holds is the error ER_DUP_ENTRY, which undoes this statement alone (the store
-- answers None for it).
INSERT INTO nilo_jobs (kind, payload, state, run_at, attempts, unique_key, lease_until, pushed_at,
                       started_at, worker, trace)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s);

-- name: push_queued
-- The common row: queued, no unique key, not claimed: five parameters, the rest the columns'
-- defaults (NULL, and no attempts). Nothing can conflict.
INSERT INTO nilo_jobs (kind, payload, state, run_at, pushed_at, trace)
VALUES (%s, %s, 'queued', %s, %s, %s);

-- name: claim_due
-- One arm of a claim's first step, for one kind: the ids of its due queued rows in the order of
-- `nilo_jobs_due` (named, so that no plan reads the rows of other kinds), read from that index
-- alone and locking nothing. A claim that locked rows as it read them would lock one more than
-- it takes: InnoDB reads the entry after a range to find where the range ends, and keeps the
-- lock of that entry, which is another kind's most due row (or a running row whose end must
-- then wait), until the claim commits; another claim skips it meanwhile. A claim's first step
-- is one such arm and one `claim_lease` arm per kind, in one UNION ALL; `claim_lock` then locks
-- the rows found, by their primary key.
(SELECT id, run_at
 FROM nilo_jobs FORCE INDEX (nilo_jobs_due)
 WHERE state = 'queued' AND kind = %(kind)s AND run_at <= %(now)s
 ORDER BY run_at, id LIMIT %(limit)s)

-- name: claim_due_from
-- `claim_due` of the rows due from %(from)s on, with no `claim_lease` arm: serve's claims read
-- from where its last ones reached, not past the entries of rows claimed long before that purge
-- cannot remove while a transaction's read view holds them.
(SELECT id, run_at
 FROM nilo_jobs FORCE INDEX (nilo_jobs_due)
 WHERE state = 'queued' AND kind = %(kind)s AND run_at >= %(from)s AND run_at <= %(now)s
 ORDER BY run_at, id LIMIT %(limit)s)

-- name: claim_lease
-- The other arm: running rows of the kind whose lease ran out, in the order of
-- `nilo_jobs_lease`.
(SELECT id, run_at
 FROM nilo_jobs FORCE INDEX (nilo_jobs_lease)
 WHERE state = 'running' AND kind = %(kind)s AND lease_until <= %(now)s
 ORDER BY lease_until, id LIMIT %(limit)s)

-- name: claim_lock
-- A claim's second step: the rows its first step found, each by its primary key (a lookup of
-- one key reads no entry past it), locked and skipping rows another claim holds (`FOR UPDATE
-- SKIP LOCKED`), and only while still due: queued and due, or running with its lease run out
-- (a row another claim took and committed since is left out). Each comes with what the claim
-- answers (its attempts before this claim) and `held`: NULL when it was queued, else the worker
-- that held it ('' when the row does not say).
SELECT id, kind, payload, attempts, run_at, unique_key, snoozes, trace,
       CASE WHEN state = 'running' THEN coalesce(worker, '') END AS held
FROM nilo_jobs FORCE INDEX (PRIMARY)
WHERE id IN (%(ids)s)
  AND (state = 'queued' AND run_at <= %(now)s OR state = 'running' AND lease_until <= %(now)s)
FOR UPDATE SKIP LOCKED;

-- name: take
UPDATE nilo_jobs
SET state = 'running', lease_until = %(lease_until)s, attempts = attempts + 1,
    started_at = %(now)s, worker = %(worker)s
WHERE id IN (%(ids)s);

-- name: lock_kind
-- A claim of a kind with a concurrency limit takes this lock first, and gives it back once its
-- transaction has ended: claims of one limited kind, in every process, then count and claim one
-- after the other. A named lock of the session, per database and kind (hashed, as
-- `lock_migration`). 1 when taken; 0 after the seconds given.
SELECT GET_LOCK(CONCAT('nilo_jobs:', SHA1(CONCAT('concurrency ', DATABASE(), ' ', %(kind)s))),
                %(wait)s);

-- name: unlock_kinds
-- Every named lock of the session (a connection of the store's own holds none between calls).
SELECT RELEASE_ALL_LOCKS();

-- name: running
-- How many rows of one kind run under a live lease (one that ends after the claim's now): what
-- its concurrency limit counts, once its lock is held (READ COMMITTED: it sees what the claim
-- before it committed). A range of `nilo_jobs_lease`.
SELECT count(*) FROM nilo_jobs
WHERE state = 'running' AND lease_until > %(now)s AND kind = %(kind)s;

-- name: fence
-- The rows of a group of ends that still hold their claim, locked until the ends are written:
-- every end applies to its row only when it is among these, with its attempts. By the primary
-- key, so that it locks those rows alone, whatever plan the optimizer would choose.
SELECT id, attempts FROM nilo_jobs FORCE INDEX (PRIMARY)
WHERE id IN (%(ids)s) AND state = 'running' FOR UPDATE;

-- name: attempt
-- The attempt an end closes, recorded before the end's statement changes the row (one
-- transaction): ended_at, outcome, error, detail, traceback, id.
INSERT INTO nilo_jobs_attempts (row_id, attempt, started_at, ended_at, worker, outcome, error,
                                detail, traceback)
SELECT id, attempts, started_at, %(ended_at)s, worker, %(outcome)s, %(error)s, %(detail)s,
       %(traceback)s
FROM nilo_jobs WHERE id = %(id)s AND attempts = %(attempts)s;

-- name: lost
-- The attempt a worker lost with its lease, recorded by the one that took the row back as that
-- claim ends: ended when the claim took it (the row's started_at).
INSERT INTO nilo_jobs_attempts (row_id, attempt, ended_at, worker, outcome)
SELECT id, attempts - 1, coalesce(started_at, lease_until), %(worker)s, 'lost'
FROM nilo_jobs WHERE id = %(id)s AND attempts = %(attempts)s;

-- name: attempts_trim
-- A row's attempts past the newest 20 (ATTEMPTS_KEPT), forgotten. The newest 20th is read
-- through a derived table: MySQL refuses a DELETE whose subquery reads its own table.
DELETE FROM nilo_jobs_attempts WHERE row_id = %(id)s AND id < (
    SELECT id FROM (
        SELECT id FROM nilo_jobs_attempts WHERE row_id = %(id)s
        ORDER BY id DESC LIMIT 1 OFFSET 19) AS newest);

-- name: death
-- A death counted in its minute (the kind is the dead row's).
INSERT INTO nilo_jobs_deaths (kind, minute, deaths)
SELECT kind, %(minute)s, 1 FROM nilo_jobs WHERE id = %(id)s
ON DUPLICATE KEY UPDATE deaths = nilo_jobs_deaths.deaths + 1;

-- name: deaths_trim
-- The dead row's kind's minutes older than a day, forgotten.
DELETE FROM nilo_jobs_deaths
WHERE kind = (SELECT kind FROM nilo_jobs WHERE id = %(id)s) AND minute < %(oldest)s;

-- name: attempts_of
SELECT attempt, outcome, started_at, ended_at, worker, error, detail, traceback
FROM nilo_jobs_attempts WHERE row_id = %s ORDER BY id;

-- name: keep
-- A done row copied into the history, before `done` deletes it (one transaction, the row
-- locked by `fence`): started_at, finished_at, result, id.
INSERT INTO nilo_jobs_done (id, kind, payload, unique_key, run_at, pushed_at, started_at,
                            finished_at, attempts, worker, error, detail, result)
SELECT id, kind, payload, unique_key, run_at, pushed_at, coalesce(%s, started_at), %s, attempts,
       worker, error, detail, %s
FROM nilo_jobs WHERE id = %s
ON DUPLICATE KEY UPDATE id = nilo_jobs_done.id;

-- name: keep_many
-- A group of done rows copied into the history in one statement (the rows locked by `fence`):
-- each row's own start, end and result come from `ended`, a derived table the store spells out
-- (`SELECT %(id_0)s AS id, … UNION ALL SELECT …`, which both databases read; their VALUES
-- tables differ).
INSERT INTO nilo_jobs_done (id, kind, payload, unique_key, run_at, pushed_at, started_at,
                            finished_at, attempts, worker, error, detail, result)
SELECT job.id, job.kind, job.payload, job.unique_key, job.run_at, job.pushed_at,
       coalesce(ended.started_at, job.started_at), ended.finished_at, job.attempts, job.worker,
       job.error, job.detail, ended.result
FROM nilo_jobs AS job JOIN ({ended}) AS ended ON ended.id = job.id
ON DUPLICATE KEY UPDATE id = nilo_jobs_done.id;

-- name: done
DELETE FROM nilo_jobs WHERE id = %s AND state = 'running' AND attempts = %s;

-- name: attempts_forget_one
DELETE FROM nilo_jobs_attempts WHERE row_id = %s;

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
SET state = 'queued', run_at = %s, lease_until = NULL, attempts = attempts - 1, started_at = NULL,
    worker = NULL
WHERE id = %s AND state = 'running' AND attempts = %s;

-- name: snoozed
UPDATE nilo_jobs
SET state = 'queued', run_at = %s, lease_until = NULL, attempts = attempts - 1,
    snoozes = snoozes + 1, unique_key = CASE WHEN %s THEN NULL ELSE unique_key END
WHERE id = %s AND state = 'running' AND attempts = %s;

-- name: release_key
UPDATE nilo_jobs SET unique_key = NULL
WHERE id = %s AND state = 'running' AND attempts = %s AND unique_key IS NOT NULL;

-- name: cancel
-- A queued row and its attempts, in one statement (a DELETE of two tables): it deletes
-- something only when the row is queued, so a count above 0 says it was.
DELETE nilo_jobs, nilo_jobs_attempts
FROM nilo_jobs LEFT JOIN nilo_jobs_attempts ON nilo_jobs_attempts.row_id = nilo_jobs.id
WHERE nilo_jobs.id = %s AND nilo_jobs.state = 'queued';

-- name: holding
SELECT id, kind, state, payload, run_at, attempts, unique_key, lease_until, error, died_at,
       detail, traceback, pushed_at, started_at, NULL, worker, NULL, snoozes
FROM nilo_jobs
WHERE unique_key = %(key)s AND kind IN (%(kinds)s)
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
SELECT id, kind, error, attempts, left(payload, %s), died_at, detail, traceback
FROM nilo_jobs
WHERE state = 'dead' ORDER BY died_at DESC, id DESC LIMIT %s;

-- name: retry_dead
UPDATE nilo_jobs
SET state = 'queued', run_at = %s, attempts = 0, error = NULL, detail = NULL, traceback = NULL,
    died_at = NULL, started_at = NULL, worker = NULL, snoozes = 0
WHERE id = %s AND state = 'dead';

-- name: row
SELECT id, kind, state, payload, run_at, attempts, unique_key, lease_until, error, died_at,
       detail, traceback, pushed_at, started_at, NULL, worker, NULL, snoozes
FROM nilo_jobs WHERE id = %(id)s
UNION ALL
SELECT id, kind, 'done', payload, run_at, attempts, unique_key, NULL, error, NULL, detail, NULL,
       pushed_at, started_at, finished_at, worker, result, NULL
FROM nilo_jobs_done WHERE id = %(id)s;

-- name: dead_among
-- The dead rows among a list of ids, locked until the transaction that acts on them ends (by
-- the primary key, as `fence`, these rows alone).
SELECT id FROM nilo_jobs FORCE INDEX (PRIMARY)
WHERE id IN (%(ids)s) AND state = 'dead' ORDER BY id FOR UPDATE;

-- name: queued_among
SELECT id FROM nilo_jobs FORCE INDEX (PRIMARY)
WHERE id IN (%(ids)s) AND state = 'queued' ORDER BY id FOR UPDATE;

-- name: done_among
SELECT id FROM nilo_jobs_done FORCE INDEX (PRIMARY) WHERE id IN (%(ids)s) ORDER BY id FOR UPDATE;

-- name: retry_many
UPDATE nilo_jobs
SET state = 'queued', run_at = %(now)s, attempts = 0, error = NULL, detail = NULL,
    traceback = NULL, died_at = NULL, started_at = NULL, worker = NULL, snoozes = 0
WHERE id IN (%(ids)s) AND state = 'dead';

-- name: delete_rows
DELETE FROM nilo_jobs WHERE id IN (%(ids)s);

-- name: delete_done
DELETE FROM nilo_jobs_done WHERE id IN (%(ids)s);

-- name: attempts_forget
-- The attempts of rows deleted.
DELETE FROM nilo_jobs_attempts WHERE row_id IN (%(ids)s);

-- name: prunable
-- The oldest done rows finished before a time, by the history's index, locked until they are
-- deleted with their attempts.
SELECT id FROM nilo_jobs_done WHERE finished_at < %s ORDER BY finished_at, id LIMIT %s
FOR UPDATE;

-- name: pause
-- A kind already paused is ER_DUP_ENTRY (the store answers False).
INSERT INTO nilo_jobs_paused (kind, paused_at) VALUES (%s, %s);

-- name: resume
DELETE FROM nilo_jobs_paused WHERE kind = %s;

-- name: paused
SELECT kind, paused_at FROM nilo_jobs_paused;

-- name: ended
SELECT kind, 'done', finished_at - finished_at %% 60000000 AS at_minute, count(*)
FROM nilo_jobs_done WHERE finished_at >= %(since)s GROUP BY kind, at_minute
UNION ALL
SELECT kind, 'dead', minute, deaths FROM nilo_jobs_deaths WHERE minute >= %(since)s;

-- name: durations
SELECT finished_at - started_at FROM nilo_jobs_done
WHERE kind = %s AND finished_at >= %s AND started_at IS NOT NULL
ORDER BY finished_at DESC, id DESC LIMIT %s;

-- name: oldest_due
SELECT kind, min(run_at) FROM nilo_jobs WHERE state = 'queued' AND run_at <= %s GROUP BY kind;

-- name: held_back
-- The oldest transaction of another session that holds a read view, which keeps InnoDB's purge
-- from removing what was deleted or updated since it began, in every database of the server:
-- one in REPEATABLE READ or SERIALIZABLE (its view lasts as long as it does), or one running a
-- statement. Its start is in the server's own time zone, so the session reads it in that zone
-- (`time_zone = SYSTEM`, set around it). Reading it needs the PROCESS privilege.
SELECT t.trx_mysql_thread_id, TIMESTAMPDIFF(SECOND, t.trx_started, NOW()),
       CASE p.command WHEN 'Sleep' THEN 'idle in transaction' ELSE 'active' END,
       left(t.trx_query, 200), p.user
FROM information_schema.innodb_trx AS t
LEFT JOIN information_schema.processlist AS p ON p.id = t.trx_mysql_thread_id
WHERE t.trx_mysql_thread_id <> CONNECTION_ID()
  AND (t.trx_isolation_level IN ('REPEATABLE READ', 'SERIALIZABLE') OR t.trx_query IS NOT NULL)
ORDER BY t.trx_started, t.trx_mysql_thread_id LIMIT 1;

-- name: worker_register
-- A serving process records itself as its serve starts (again, after its entry was forgotten).
-- The new values are given twice rather than read with VALUES(), which MySQL 8 deprecates.
INSERT INTO nilo_jobs_workers (id, host, pid, version, kinds, workers, beat_ms, started_at,
                               beat_at, running)
VALUES (%(id)s, %(host)s, %(pid)s, %(version)s, %(kinds)s, %(workers)s, %(beat_ms)s,
        %(started_at)s, %(beat_at)s, %(running)s)
ON DUPLICATE KEY UPDATE beat_at = %(beat_at)s, running = %(running)s;

-- name: worker_renew
-- The leases of the rows this process holds, renewed at its beat in one statement whatever
-- their number (never shortened).
UPDATE nilo_jobs SET lease_until = greatest(coalesce(lease_until, 0), %(until)s)
WHERE id IN (%(ids)s) AND state = 'running' AND worker = %(worker)s;

-- name: worker_forget
DELETE FROM nilo_jobs_workers WHERE beat_at < %(forget_before)s AND id <> %(id)s;

-- name: worker_beat
-- Answers (affected rows, with the connection's CLIENT_FOUND_ROWS) 1 when the entry was there,
-- also when its values did not change.
UPDATE nilo_jobs_workers SET beat_at = %(now)s, running = %(running)s WHERE id = %(id)s;

-- name: worker_unregister
DELETE FROM nilo_jobs_workers WHERE id = %s;

-- name: workers
SELECT id, host, pid, version, kinds, workers, beat_ms, started_at, beat_at, running
FROM nilo_jobs_workers ORDER BY started_at, id;
