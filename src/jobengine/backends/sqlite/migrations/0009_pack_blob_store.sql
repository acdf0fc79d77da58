-- 0009_pack_blob_store: pack content may live outside the database (packs_blob_store = filesystem | s3), so a
-- version row no longer references pack_blobs, which stays as the `database` blob store's table. SQLite cannot
-- drop a constraint: the table is rebuilt (its rows kept). PostgreSQL has its own 0009.

CREATE TABLE pack_versions_0009 (
    name          TEXT NOT NULL,
    version       TEXT NOT NULL,
    sha256        TEXT NOT NULL,
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

INSERT INTO pack_versions_0009 (name, version, sha256, size, status, status_reason, manifest, description,
                                uploaded_by, uploaded_at, updated_at, approved_by)
SELECT name, version, sha256, size, status, status_reason, manifest, description, uploaded_by, uploaded_at,
       updated_at, approved_by
FROM pack_versions;

DROP TABLE pack_versions;

ALTER TABLE pack_versions_0009 RENAME TO pack_versions;

CREATE INDEX pack_versions_sha256 ON pack_versions (sha256);
