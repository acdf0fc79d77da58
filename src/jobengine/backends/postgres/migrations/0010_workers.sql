-- 0010_workers: the registry of live workers (jobengine.ports.workers). A worker process inserts its row
-- when it starts and deletes it when it stops. While it lives, its process holds a session-level advisory
-- lock on lock_key; a row whose lock is free belongs to a dead process, whose running jobs are rescued at
-- once. A remote worker (over HTTP) has no lock: its row is dead once expires_at has passed.
-- SQLite has its own 0010_workers.

CREATE TABLE workers (
    id          text COLLATE "C" PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('local', 'remote')),
    tenant      text,             -- NULL: claims any tenant's jobs
    host        text NOT NULL,
    pid         integer NOT NULL,
    version     text NOT NULL,
    queues      jsonb NOT NULL,   -- JSON arrays of names
    tasks       jsonb NOT NULL,
    packs       jsonb NOT NULL,
    concurrency integer NOT NULL,
    lock_key    bigint,
    started_at  float8 NOT NULL,
    last_seen   float8 NOT NULL,
    expires_at  float8 NOT NULL
);

-- Jobs held by given workers (the rescue of a dead worker's jobs, and jobs in hand per worker).
CREATE INDEX jobs_lease_worker ON jobs (lease_worker) WHERE state = 'running';
