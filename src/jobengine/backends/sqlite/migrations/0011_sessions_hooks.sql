-- 0011_sessions_hooks: server-side dashboard sessions; inbound hooks named per tenant, with a template that
-- maps their event into the jobs; the ids of the inbound events received (a replay is refused); the JSON
-- that came with a run's trigger. PostgreSQL has its own 0011.

-- A dashboard login. The cookie holds a random token; the row keeps its sha256, so reading the table gives
-- no cookie that works. ended_at: logged out, or its key was revoked.
CREATE TABLE dashboard_sessions (
    token_hash TEXT PRIMARY KEY,
    key_id     TEXT NOT NULL,
    tenant     TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    ended_at   REAL
);
CREATE INDEX dashboard_sessions_key ON dashboard_sessions (key_id);
CREATE INDEX dashboard_sessions_expires ON dashboard_sessions (expires_at);

-- Inbound hooks are named per tenant (POST /api/v1/hooks/{tenant}/{name}). template: how the event's JSON
-- reaches the jobs (core/mapping.py), NULL for none. secret: sealed (jobengine.secretbox), or clear text
-- written before 0011 until it is sealed. SQLite cannot change a primary key: the table is rebuilt.
CREATE TABLE inbound_hooks_0011 (
    tenant     TEXT NOT NULL,
    name       TEXT NOT NULL,
    schedule   TEXT NOT NULL,
    secret     TEXT NOT NULL,
    enabled    INTEGER NOT NULL DEFAULT 1,
    created_at REAL NOT NULL,
    template   TEXT,
    PRIMARY KEY (tenant, name)
);

INSERT INTO inbound_hooks_0011 (tenant, name, schedule, secret, enabled, created_at)
SELECT tenant, name, schedule, secret, enabled, created_at FROM inbound_hooks;

DROP TABLE inbound_hooks;

ALTER TABLE inbound_hooks_0011 RENAME TO inbound_hooks;

-- POST /api/v1/hooks/{name} (no tenant in the path) finds the hooks of that name in every tenant.
CREATE INDEX inbound_hooks_name ON inbound_hooks (name);

-- The id of every inbound event accepted in the last inbound_replay_window (webhook-id, or the signature
-- of a body signed sha256=): the same id again within the window is a replay.
CREATE TABLE inbound_receipts (
    tenant      TEXT NOT NULL,
    hook        TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    received_at REAL NOT NULL,
    PRIMARY KEY (tenant, hook, event_id)
);
CREATE INDEX inbound_receipts_received ON inbound_receipts (received_at);

-- Run.trigger_data: read with one run only, never by the job paths that rewrite the run's other columns.
ALTER TABLE runs ADD COLUMN trigger_data TEXT;
