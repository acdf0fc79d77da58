-- 0004_outbox: messages owed to a broker transport (Redis, NATS), written in the same transaction as their
-- jobs and deleted by the outbox relay once published. Unused with the database transport.
-- held_until: a relay that took a row holds it until then (0: free); a relay that died releases it so.
-- headers: what the message carries (run id, schedule id). SQLite has its own 0004_outbox.

CREATE TABLE outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       text COLLATE "C" NOT NULL,
    queue        text NOT NULL,
    available_at float8 NOT NULL,
    held_until   float8 NOT NULL DEFAULT 0,
    headers      jsonb NOT NULL DEFAULT '{}'
);

-- The relay's scan: due rows, earliest first.
CREATE INDEX outbox_due ON outbox (available_at, id);
