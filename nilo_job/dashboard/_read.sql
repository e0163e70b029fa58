-- What the dashboard reads that the store contract does not offer yet, one named statement each,
-- loaded once by _read.py. Each uses an index the stores already have.

-- name: sqlite_holding
-- The rows of `kinds` holding unique key `key`: at most one per kind (the unique index).
SELECT id, kind, state, payload, run_at, attempts, unique_key, lease_until, error, died_at
FROM nilo_jobs
WHERE unique_key = :key AND kind IN (SELECT value FROM json_each(:kinds))
ORDER BY kind;

-- name: postgres_holding
SELECT id, kind, state, payload::text, run_at, attempts, unique_key, lease_until, error, died_at
FROM nilo_jobs
WHERE unique_key = %(key)s AND kind = ANY(%(kinds)s)
ORDER BY kind;
