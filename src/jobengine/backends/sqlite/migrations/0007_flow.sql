-- 0007_flow: flow control (jobengine.flow). PostgreSQL has its own 0007_flow.
-- flow_limits: a queue's FlowLimits as JSON (rate, burst, key concurrency, depth limits, adaptive settings).
-- flow_buckets: token buckets (tokens held at updated_at; refilled by computation, written only when taken
-- from) keyed by bucket key (queue, tenant + queue, or tenant + task; see jobengine.flow.limits).

CREATE TABLE flow_limits (
    queue      TEXT PRIMARY KEY,
    spec       TEXT NOT NULL,
    updated_at REAL NOT NULL
);

CREATE TABLE flow_buckets (
    key        TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at REAL NOT NULL
);
