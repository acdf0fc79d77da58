-- 0011_sessions_hooks: server-side dashboard sessions. PostgreSQL has its own 0011.

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
