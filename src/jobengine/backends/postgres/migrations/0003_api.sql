-- 0003_api: what the HTTP API keeps beside the jobs (the same version as SQLite's 0003_api.sql): API keys,
-- idempotency records of POST requests and queue settings. Version 0002 belongs to the scheduler.

-- Keys are stored hashed (sha256 of the whole key text); the id is the public part of the key.
CREATE TABLE api_keys (
    id          text PRIMARY KEY,
    tenant      text NOT NULL,
    name        text NOT NULL,
    scopes      text[] NOT NULL,
    secret_hash text NOT NULL,
    created_at  float8 NOT NULL,
    revoked_at  float8
);
CREATE INDEX api_keys_tenant ON api_keys (tenant, created_at);

-- The first answer to a POST with an Idempotency-Key header, per tenant. status NULL: still in flight,
-- owned until locked_until (after which a retry may take it over: its owner died).
CREATE TABLE http_idempotency (
    tenant       text NOT NULL,
    key          text NOT NULL,
    fingerprint  text NOT NULL,
    created_at   float8 NOT NULL,
    expires_at   float8 NOT NULL,
    locked_until float8,
    status       integer,
    content_type text,
    body         bytea,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX http_idempotency_expires ON http_idempotency (expires_at);

-- Queues without a row are running and unlimited.
CREATE TABLE queue_settings (
    queue       text PRIMARY KEY,
    paused      boolean NOT NULL DEFAULT false,
    concurrency integer,
    updated_at  float8 NOT NULL
);
