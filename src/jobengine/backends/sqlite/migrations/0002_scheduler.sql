-- 0002_scheduler: schedules, the ledger of fired ticks, runs and their jobs, failure signatures, and the
-- lease row of the scheduler's leader. PostgreSQL has its own 0002_scheduler with the same tables.

-- The jobs of a run (its segments) carry the run and the schedule. NULL for every other job, so the
-- engine tells a run's jobs apart from the job itself, without a read, when they end.
ALTER TABLE jobs ADD COLUMN run_id TEXT;
ALTER TABLE jobs ADD COLUMN schedule_id TEXT;

-- spec: the ScheduleSpec as JSON (core.schedules), written and read whole; only what the scheduler
-- queries on (tenant, name, enabled, next_fire_at) is a column of its own. cursor: the newest tick handled.
-- version: bumped by every change a user makes; a scheduler's claim must name the version it read.
CREATE TABLE schedules (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    name         TEXT NOT NULL,
    spec         TEXT NOT NULL,
    enabled      INTEGER NOT NULL,
    version      INTEGER NOT NULL,
    cursor       REAL NOT NULL,
    next_fire_at REAL,
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL,
    created_by   TEXT,
    updated_by   TEXT
);
CREATE UNIQUE INDEX schedules_name ON schedules (tenant, name);
-- The scheduler's one query per pass: what is due. Paused schedules have no next_fire_at.
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE next_fire_at IS NOT NULL;

-- Exactly once: a tick is fired only by the transaction that inserts its row. tick_ms: the tick in whole
-- milliseconds (an integer key compares exactly). run_id NULL: the overlap policy skipped the tick.
CREATE TABLE schedule_ticks (
    schedule_id TEXT NOT NULL,
    tick_ms     INTEGER NOT NULL,
    run_id      TEXT,
    fired_at    REAL NOT NULL,
    fired_by    TEXT,
    PRIMARY KEY (schedule_id, tick_ms)
) WITHOUT ROWID;

-- summary_* are the run's delta summary (core.runs.RunSummary), kept as its jobs end.
CREATE TABLE runs (
    id             TEXT PRIMARY KEY,
    schedule_id    TEXT NOT NULL,
    tenant         TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state = 'planning' OR state = 'queued' OR state = 'running'
                                        OR state = 'completed' OR state = 'cancelled' OR state = 'error'),
    trigger        TEXT NOT NULL,
    tick           REAL,
    reason         TEXT,
    actor          TEXT,
    parent_id      TEXT,
    no_work        INTEGER NOT NULL DEFAULT 0,
    items          INTEGER NOT NULL DEFAULT 0,
    total          INTEGER NOT NULL DEFAULT 0,
    succeeded      INTEGER NOT NULL DEFAULT 0,
    dead           INTEGER NOT NULL DEFAULT 0,
    cancelled      INTEGER NOT NULL DEFAULT 0,
    duration_total REAL NOT NULL DEFAULT 0,
    duration_max   REAL NOT NULL DEFAULT 0,
    fired_by       TEXT,
    created_at     REAL NOT NULL,
    updated_at     REAL NOT NULL,
    started_at     REAL,
    finished_at    REAL
);
-- Run history of a schedule, newest first; and the overlap check (is a run of this schedule still going).
CREATE INDEX runs_schedule ON runs (schedule_id, id);
CREATE INDEX runs_active ON runs (schedule_id, state)
    WHERE state = 'planning' OR state = 'queued' OR state = 'running';
CREATE INDEX runs_tenant ON runs (tenant, id);

-- A run's jobs: its share of the items, and the outcome already counted in the run's summary (so a
-- repeated report of the same outcome counts once, and a retried job's old outcome can be taken back).
CREATE TABLE run_jobs (
    job_id   TEXT PRIMARY KEY,
    run_id   TEXT NOT NULL,
    segment  INTEGER NOT NULL,
    items    INTEGER NOT NULL,
    outcome  TEXT,
    duration REAL
) WITHOUT ROWID;
CREATE INDEX run_jobs_run ON run_jobs (run_id, segment);

-- One row per (tenant, fingerprint). frames and sample_job_ids are JSON arrays.
CREATE TABLE failure_signatures (
    tenant         TEXT NOT NULL,
    key            TEXT NOT NULL,
    error_type     TEXT NOT NULL,
    message        TEXT NOT NULL,
    frames         TEXT NOT NULL,
    task           TEXT NOT NULL,
    occurrences    INTEGER NOT NULL,
    first_seen     REAL NOT NULL,
    last_seen      REAL NOT NULL,
    sample_job_ids TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status = 'active' OR status = 'resolved' OR status = 'suppressed'),
    non_retryable  INTEGER NOT NULL DEFAULT 0,
    updated_at     REAL NOT NULL,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
CREATE INDEX failure_signatures_recent ON failure_signatures (tenant, last_seen);
CREATE INDEX failure_signatures_non_retryable ON failure_signatures (key) WHERE non_retryable = 1;

-- The Leader port on SQLite: whoever holds an unexpired row leads; the holder renews it.
CREATE TABLE leader_leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    expires_at  REAL NOT NULL,
    acquired_at REAL NOT NULL
) WITHOUT ROWID;
