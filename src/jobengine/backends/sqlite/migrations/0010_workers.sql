-- 0010_workers: the registry of live workers (jobengine.ports.workers). A worker process inserts its row
-- when it starts and deletes it when it stops. While it lives, its process holds an exclusive flock on the
-- file <database>.workers/<lock_key>.lock; a row whose file is not locked belongs to a dead process, whose
-- running jobs are rescued at once. A remote worker (over HTTP) has no lock: its row is dead once
-- expires_at has passed. PostgreSQL has its own 0010_workers.

CREATE TABLE workers (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind = 'local' OR kind = 'remote'),
    tenant      TEXT,
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    version     TEXT NOT NULL,
    queues      TEXT NOT NULL,
    tasks       TEXT NOT NULL,
    packs       TEXT NOT NULL,
    concurrency INTEGER NOT NULL,
    lock_key    INTEGER,
    started_at  REAL NOT NULL,
    last_seen   REAL NOT NULL,
    expires_at  REAL NOT NULL
);

CREATE INDEX jobs_lease_worker ON jobs (lease_worker) WHERE state = 'running';
