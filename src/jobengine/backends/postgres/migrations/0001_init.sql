-- jobengine PostgreSQL schema, version 1 (the same version number as the SQLite backend's 0001_init.sql).
--
-- Applied by jobengine.backends.postgres.migrate with search_path set to the store's schema, so no name
-- here is schema-qualified. Times are float8 UNIX seconds: the engine's clock is the time source (tests
-- drive it), and a float round-trips exactly, which timestamptz (microseconds) would not.

CREATE TABLE jobs (
    id               text COLLATE "C" PRIMARY KEY,  -- UUIDv7 text: sorts by creation time; "C" compares bytes
    tenant           text NOT NULL,
    queue            text NOT NULL,
    task             text NOT NULL,
    payload          jsonb,
    priority         integer NOT NULL DEFAULT 0,
    run_at           float8 NOT NULL,
    state            text NOT NULL CHECK (state IN ('blocked', 'scheduled', 'queued', 'running', 'succeeded',
                                                    'failed', 'dead', 'cancelled', 'stale')),
    attempt          integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL,
    created_at       float8 NOT NULL,
    updated_at       float8 NOT NULL,
    idempotency_key  text,
    depends_on       text[] NOT NULL DEFAULT '{}',
    timeout          float8,
    lease_worker     text,
    lease_token      text,
    lease_expires_at float8,
    cancel_requested boolean NOT NULL DEFAULT false,
    reason           text,
    phases           jsonb NOT NULL DEFAULT '[]',
    progress         float8 NOT NULL DEFAULT 0,
    result           jsonb,
    errors           jsonb NOT NULL DEFAULT '[]',
    outcome          text,
    started_at       float8,
    finished_at      float8,
    -- Set (under the parent's row lock) when a job that depends on this one is inserted. Completing or
    -- failing a job without dependents is then one statement; one with dependents takes the slower path
    -- that locks and re-checks its dependents in fresh snapshots (see backends/postgres/store.py).
    has_dependents   boolean NOT NULL DEFAULT false
) WITH (fillfactor = 90);  -- room on the page keeps heartbeats (no indexed column changes) HOT updates

-- The claim: SELECT ... WHERE queue = $1 AND state IN (runnable) ORDER BY priority DESC, run_at, id
-- LIMIT n FOR UPDATE SKIP LOCKED walks this index from its head. Partial, so finished jobs never bloat it.
CREATE INDEX jobs_runnable ON jobs (queue, priority DESC, run_at, id)
    WHERE state IN ('queued', 'scheduled', 'failed');

-- next_run_at over jobs waiting for their time (a million jobs scheduled for tomorrow must not be scanned
-- by every idle poll). Queued jobs are not in it: their run_at has already passed.
CREATE INDEX jobs_waiting ON jobs (queue, run_at) WHERE state IN ('scheduled', 'failed');

-- The rescuer's scan of running jobs. Keyed on id, not lease_expires_at, so a heartbeat (which changes
-- only lease_expires_at) touches no indexed column and stays a HOT update.
CREATE INDEX jobs_running ON jobs (id) WHERE state = 'running';

-- Retention walks finished jobs oldest first.
CREATE INDEX jobs_finished ON jobs (id) WHERE state IN ('succeeded', 'dead', 'cancelled', 'stale');

CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Dependency edges: which jobs wait on dep_id. No foreign keys: an FK check would lock the parent row on
-- every insert; the store keeps the edges consistent itself (and deletes them with the job).
CREATE TABLE job_dependencies (
    dep_id text COLLATE "C" NOT NULL,
    job_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (dep_id, job_id)
);
CREATE INDEX job_dependencies_job ON job_dependencies (job_id);

-- The append-only event log; ids are assigned at insert, so they are monotonic per commit order of inserts.
CREATE TABLE events (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     float8 NOT NULL,
    type   text NOT NULL,
    tenant text NOT NULL,
    job_id text COLLATE "C",
    queue  text,
    task   text,
    data   jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX events_job ON events (job_id, id);

-- Watermarks: per (source, key) high-water marks. A job may carry one (job_watermarks); the store raises
-- watermarks.value to it in the transaction that marks the job succeeded, never before.
CREATE TABLE watermarks (
    source     text NOT NULL,
    key        text NOT NULL,
    value      jsonb NOT NULL CHECK (jsonb_typeof(value) IN ('number', 'string')),
    job_id     text COLLATE "C",
    updated_at float8 NOT NULL,
    PRIMARY KEY (source, key)
);

CREATE TABLE job_watermarks (
    job_id text COLLATE "C" NOT NULL,
    source text NOT NULL,
    key    text NOT NULL,
    value  jsonb NOT NULL CHECK (jsonb_typeof(value) IN ('number', 'string')),
    PRIMARY KEY (job_id, source, key)
);
