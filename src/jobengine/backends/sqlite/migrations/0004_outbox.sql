-- 0004_outbox: messages owed to a broker transport (Redis, NATS), written in the same transaction as their
-- jobs and deleted by the outbox relay once published. Unused with the database transport.
-- held_until: a relay that took a row holds it until then (0: free); a relay that died releases it so.
-- headers: a JSON object (run id, schedule id) that the message carries. PostgreSQL has its own 0004_outbox.

CREATE TABLE outbox (
    id           INTEGER PRIMARY KEY,
    job_id       TEXT NOT NULL,
    queue        TEXT NOT NULL,
    available_at REAL NOT NULL,
    held_until   REAL NOT NULL DEFAULT 0,
    headers      TEXT NOT NULL DEFAULT '{}'
);

-- The relay's scan: due rows, earliest first (rowid breaks ties, in insertion order).
CREATE INDEX outbox_due ON outbox (available_at);
