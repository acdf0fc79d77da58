-- Task pack registry: immutable versions, their content once per sha256, and the audit trail.
CREATE TABLE pack_blobs (
    sha256     TEXT PRIMARY KEY,
    size       INTEGER NOT NULL,
    data       BLOB NOT NULL,
    created_at REAL NOT NULL
);

CREATE TABLE pack_versions (
    name          TEXT NOT NULL,
    version       TEXT NOT NULL,
    sha256        TEXT NOT NULL REFERENCES pack_blobs (sha256),
    size          INTEGER NOT NULL,
    status        TEXT NOT NULL CHECK (status = 'pending_approval' OR status = 'approved' OR status = 'rejected'
                                       OR status = 'deprecated' OR status = 'archived' OR status = 'invalid'),
    status_reason TEXT,
    manifest      TEXT NOT NULL,
    description   TEXT NOT NULL DEFAULT '',
    uploaded_by   TEXT NOT NULL,
    uploaded_at   REAL NOT NULL,
    updated_at    REAL NOT NULL,
    approved_by   TEXT,
    PRIMARY KEY (name, version)
);

CREATE INDEX pack_versions_sha256 ON pack_versions (sha256);

CREATE TABLE pack_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    name    TEXT NOT NULL,
    version TEXT NOT NULL,
    type    TEXT NOT NULL,
    actor   TEXT NOT NULL,
    reason  TEXT,
    at      REAL NOT NULL
);

CREATE INDEX pack_events_version ON pack_events (name, version, id);
