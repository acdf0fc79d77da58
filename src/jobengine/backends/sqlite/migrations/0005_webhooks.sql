-- 0005_webhooks: outbound webhook endpoints, their delivery outbox and attempts, the fan-out cursor over the
-- event log, and inbound hooks. PostgreSQL has its own 0005_webhooks (the same tables).

-- A tenant's receiver. Filters are JSON arrays (empty: everything). enabled 0/1.
CREATE TABLE webhook_endpoints (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    url             TEXT NOT NULL,
    secret          TEXT NOT NULL,
    event_types     TEXT NOT NULL,
    queues          TEXT NOT NULL,
    tasks           TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    enabled         INTEGER NOT NULL DEFAULT 1,
    disabled_reason TEXT,
    rate_limit      INTEGER,
    rate_window     REAL,
    previous_secret TEXT,
    previous_until  REAL,
    failing_since   REAL,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant, created_at);

-- The outbox: one row per (endpoint, event), with the body as it was when the event happened.
CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    endpoint_id     TEXT NOT NULL,
    event_id        INTEGER NOT NULL,
    event_type      TEXT NOT NULL,
    body            TEXT NOT NULL,
    state           TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    series_attempts INTEGER NOT NULL DEFAULT 0,
    next_at         REAL NOT NULL,
    window_start    REAL NOT NULL,
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    last_status     INTEGER,
    last_error      TEXT,
    lease_token     TEXT,
    lease_until     REAL,
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_tenant ON webhook_deliveries (tenant, created_at);

CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    tenant      TEXT NOT NULL,
    at          REAL NOT NULL,
    status      INTEGER,
    latency_ms  REAL NOT NULL,
    error       TEXT,
    PRIMARY KEY (delivery_id, attempt)
);

-- How far the dispatcher has fanned the event log out (by event id).
CREATE TABLE webhook_cursors (
    name     TEXT PRIMARY KEY,
    event_id INTEGER NOT NULL
);

-- POST /api/v1/hooks/{name}: names are global (the path carries no tenant).
CREATE TABLE inbound_hooks (
    name       TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL,
    schedule   TEXT NOT NULL,
    secret     TEXT NOT NULL,
    enabled    INTEGER NOT NULL DEFAULT 1,
    created_at REAL NOT NULL
);
