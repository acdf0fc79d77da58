-- jobengine PostgreSQL schema, version 2: the scheduler (the same version number as the SQLite backend's
-- 0002_scheduler.sql, with the same tables). Applied with search_path set to the store's schema.

-- The jobs of a run (its segments) carry the run and the schedule; NULL for every other job. Nullable
-- without a default: adding them rewrites no row.
ALTER TABLE jobs ADD COLUMN run_id text COLLATE "C";
ALTER TABLE jobs ADD COLUMN schedule_id text COLLATE "C";

-- spec: the ScheduleSpec as JSON (core.schedules), written and read whole. cursor: the newest tick handled.
-- version: bumped by every change a user makes; a scheduler's claim must name the version it read.
CREATE TABLE schedules (
    id           text COLLATE "C" PRIMARY KEY,
    tenant       text NOT NULL,
    name         text NOT NULL,
    spec         jsonb NOT NULL,
    enabled      boolean NOT NULL,
    version      integer NOT NULL,
    cursor       float8 NOT NULL,
    next_fire_at float8,
    created_at   float8 NOT NULL,
    updated_at   float8 NOT NULL,
    created_by   text,
    updated_by   text
);
CREATE UNIQUE INDEX schedules_name ON schedules (tenant, name);
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE next_fire_at IS NOT NULL;

-- Exactly once: a tick is fired only by the transaction whose insert of its row succeeds.
CREATE TABLE schedule_ticks (
    schedule_id text COLLATE "C" NOT NULL,
    tick_ms     bigint NOT NULL,
    run_id      text COLLATE "C",
    fired_at    float8 NOT NULL,
    fired_by    text,
    PRIMARY KEY (schedule_id, tick_ms)
);

CREATE TABLE runs (
    id             text COLLATE "C" PRIMARY KEY,
    schedule_id    text COLLATE "C" NOT NULL,
    tenant         text NOT NULL,
    state          text NOT NULL CHECK (state IN ('planning', 'queued', 'running', 'completed', 'cancelled', 'error')),
    trigger        text NOT NULL,
    tick           float8,
    reason         text,
    actor          text,
    parent_id      text COLLATE "C",
    no_work        boolean NOT NULL DEFAULT false,
    items          integer NOT NULL DEFAULT 0,
    total          integer NOT NULL DEFAULT 0,
    succeeded      integer NOT NULL DEFAULT 0,
    dead           integer NOT NULL DEFAULT 0,
    cancelled      integer NOT NULL DEFAULT 0,
    duration_total float8 NOT NULL DEFAULT 0,
    duration_max   float8 NOT NULL DEFAULT 0,
    fired_by       text,
    created_at     float8 NOT NULL,
    updated_at     float8 NOT NULL,
    started_at     float8,
    finished_at    float8
);
CREATE INDEX runs_schedule ON runs (schedule_id, id);
CREATE INDEX runs_active ON runs (schedule_id, state) WHERE state IN ('planning', 'queued', 'running');
CREATE INDEX runs_tenant ON runs (tenant, id);

CREATE TABLE run_jobs (
    job_id   text COLLATE "C" PRIMARY KEY,
    run_id   text COLLATE "C" NOT NULL,
    segment  integer NOT NULL,
    items    integer NOT NULL,
    outcome  text,
    duration float8
);
CREATE INDEX run_jobs_run ON run_jobs (run_id, segment);

CREATE TABLE failure_signatures (
    tenant         text NOT NULL,
    key            text COLLATE "C" NOT NULL,
    error_type     text NOT NULL,
    message        text NOT NULL,
    frames         jsonb NOT NULL,
    task           text NOT NULL,
    occurrences    bigint NOT NULL,
    first_seen     float8 NOT NULL,
    last_seen      float8 NOT NULL,
    sample_job_ids jsonb NOT NULL,
    status         text NOT NULL CHECK (status IN ('active', 'resolved', 'suppressed')),
    non_retryable  boolean NOT NULL DEFAULT false,
    updated_at     float8 NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX failure_signatures_recent ON failure_signatures (tenant, last_seen);
CREATE INDEX failure_signatures_non_retryable ON failure_signatures (key) WHERE non_retryable;
