-- 0005_webhooks: outbound webhook endpoints, their delivery outbox and attempts, the fan-out cursor over the
-- event log, and inbound hooks. SQLite has its own 0005_webhooks (the same tables).

-- A tenant's receiver. Filters are JSON arrays (empty: everything). enabled 0/1.
CREATE TABLE webhook_endpoints (
    id              text PRIMARY KEY,
    tenant          text NOT NULL,
    url             text NOT NULL,
    secret          text NOT NULL,
    event_types     text NOT NULL,
    queues          text NOT NULL,
    tasks           text NOT NULL,
    description     text NOT NULL DEFAULT '',
    enabled         integer NOT NULL DEFAULT 1,
    disabled_reason text,
    rate_limit      integer,
    rate_window     float8,
    previous_secret text,
    previous_until  float8,
    failing_since   float8,
    created_at      float8 NOT NULL,
    updated_at      float8 NOT NULL
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant, created_at);

-- The outbox: one row per (endpoint, event), with the body as it was when the event happened.
CREATE TABLE webhook_deliveries (
    id              text PRIMARY KEY,
    tenant          text NOT NULL,
    endpoint_id     text NOT NULL,
    event_id        bigint NOT NULL,
    event_type      text NOT NULL,
    body            text NOT NULL,
    state           text NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    series_attempts integer NOT NULL DEFAULT 0,
    next_at         float8 NOT NULL,
    window_start    float8 NOT NULL,
    created_at      float8 NOT NULL,
    updated_at      float8 NOT NULL,
    last_status     integer,
    last_error      text,
    lease_token     text,
    lease_until     float8,
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_tenant ON webhook_deliveries (tenant, created_at);

CREATE TABLE webhook_attempts (
    delivery_id text NOT NULL,
    attempt     integer NOT NULL,
    tenant      text NOT NULL,
    at          float8 NOT NULL,
    status      integer,
    latency_ms  float8 NOT NULL,
    error       text,
    PRIMARY KEY (delivery_id, attempt)
);

-- How far the dispatcher has fanned the event log out (by event id).
CREATE TABLE webhook_cursors (
    name     text PRIMARY KEY,
    event_id bigint NOT NULL
);

-- POST /api/v1/hooks/{name}: names are global (the path carries no tenant).
CREATE TABLE inbound_hooks (
    name       text PRIMARY KEY,
    tenant     text NOT NULL,
    schedule   text NOT NULL,
    secret     text NOT NULL,
    enabled    integer NOT NULL DEFAULT 1,
    created_at float8 NOT NULL
);
