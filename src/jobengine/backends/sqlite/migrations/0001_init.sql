-- 0001_init: jobs, their dependency edges and the event log.
-- Times are REAL unix seconds; payload, result, phases, errors and event data are JSON text written by
-- jobengine.core.codec (compact, sorted keys), so equal payloads are byte-equal.
-- PostgreSQL reuses this version number for its own 0001_init.

CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    queue            TEXT NOT NULL,
    task             TEXT NOT NULL,
    payload          TEXT NOT NULL,
    priority         INTEGER NOT NULL,
    run_at           REAL NOT NULL,
    state            TEXT NOT NULL CHECK (state = 'blocked' OR state = 'scheduled' OR state = 'queued'
                                          OR state = 'running' OR state = 'succeeded' OR state = 'failed'
                                          OR state = 'dead' OR state = 'cancelled' OR state = 'stale'),
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL,
    idempotency_key  TEXT,
    timeout          REAL,
    lease_worker     TEXT,
    lease_token      TEXT,
    lease_expires_at REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    reason           TEXT,
    phases           TEXT NOT NULL DEFAULT '[]',
    progress         REAL NOT NULL DEFAULT 0,
    result           TEXT,
    errors           TEXT NOT NULL DEFAULT '[]',
    outcome          TEXT,
    started_at       REAL,
    finished_at      REAL
);

-- The claim: runnable jobs of a queue in priority DESC, run_at, id order. Partial, so running and finished
-- jobs (the bulk of a busy table) cost the claim nothing. Queries must repeat this exact WHERE term.
-- ORs rather than IN, here and in the CHECK above: SQLite evaluates these on every row written, and an IN
-- list is rebuilt as a small temporary b-tree on each statement run
-- (docs/decisions/0016-sqlite-or-not-in-predicates.md).
CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued' OR state = 'scheduled' OR state = 'failed';

-- An idempotency key names at most one job per tenant.
CREATE UNIQUE INDEX jobs_idempotency ON jobs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- The rescuer's scan for expired leases.
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'running';

-- Retention: terminal and stale jobs by finish time. Unfinished jobs (finished_at NULL) stay out of it.
CREATE INDEX jobs_retention ON jobs (state, finished_at) WHERE finished_at IS NOT NULL;

-- list_jobs: newest first within a tenant, optionally by state.
CREATE INDEX jobs_list ON jobs (tenant, state, id);

-- depends_on, one row per edge; position keeps the order the job named them in.
CREATE TABLE job_deps (
    job_id     TEXT NOT NULL,
    position   INTEGER NOT NULL,
    depends_on TEXT NOT NULL,
    PRIMARY KEY (job_id, position)
) WITHOUT ROWID;

-- Finding the dependents of a job that just finished.
CREATE INDEX job_deps_depends_on ON job_deps (depends_on);

-- AUTOINCREMENT: ids are monotonic and never reused, even after the newest events are deleted, so a
-- consumer's "after_id" cursor can never skip a later event.
CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      REAL NOT NULL,
    type    TEXT NOT NULL,
    tenant  TEXT NOT NULL,
    job_id  TEXT,
    queue   TEXT,
    task    TEXT,
    data    TEXT NOT NULL
);

CREATE INDEX events_job ON events (job_id) WHERE job_id IS NOT NULL;
