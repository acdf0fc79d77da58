-- 0003_api: what the HTTP API keeps beside the jobs: API keys, idempotency records of POST requests and
-- queue settings. Version 0002 belongs to the scheduler; PostgreSQL has its own 0003_api.

-- Keys are stored hashed (sha256 of the whole key text); the id is the public part of the key.
CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    scopes      TEXT NOT NULL,  -- JSON array of scope names
    secret_hash TEXT NOT NULL,
    created_at  REAL NOT NULL,
    revoked_at  REAL
);
CREATE INDEX api_keys_tenant ON api_keys (tenant, created_at);

-- The first answer to a POST with an Idempotency-Key header, per tenant. status NULL: still in flight,
-- owned until locked_until (after which a retry may take it over: its owner died).
CREATE TABLE http_idempotency (
    tenant       TEXT NOT NULL,
    key          TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    created_at   REAL NOT NULL,
    expires_at   REAL NOT NULL,
    locked_until REAL,
    status       INTEGER,
    content_type TEXT,
    body         BLOB,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX http_idempotency_expires ON http_idempotency (expires_at);

-- Queues without a row are running and unlimited.
CREATE TABLE queue_settings (
    queue       TEXT PRIMARY KEY,
    paused      INTEGER NOT NULL DEFAULT 0,
    concurrency INTEGER,
    updated_at  REAL NOT NULL
);
