-- 0007_flow: flow control (jobengine.flow). SQLite has its own 0007_flow.
-- flow_limits: a queue's FlowLimits (rate, burst, key concurrency, depth limits, adaptive settings).
-- flow_buckets: token buckets (tokens held at updated_at; refilled by computation, written only when taken
-- from) keyed by bucket key (queue, tenant + queue, or tenant + task; see jobengine.flow.limits).

CREATE TABLE flow_limits (
    queue      text PRIMARY KEY,
    spec       jsonb NOT NULL,
    updated_at float8 NOT NULL
);

CREATE TABLE flow_buckets (
    key        text COLLATE "C" PRIMARY KEY,
    tokens     float8 NOT NULL,
    updated_at float8 NOT NULL
);
