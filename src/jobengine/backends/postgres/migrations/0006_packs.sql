-- Task pack registry: immutable versions, their content once per sha256, and the audit trail.
CREATE TABLE pack_blobs (
    sha256     text COLLATE "C" PRIMARY KEY,
    size       bigint NOT NULL,
    data       bytea NOT NULL,
    created_at float8 NOT NULL
);

CREATE TABLE pack_versions (
    name          text COLLATE "C" NOT NULL,
    version       text COLLATE "C" NOT NULL,
    sha256        text COLLATE "C" NOT NULL REFERENCES pack_blobs (sha256),
    size          bigint NOT NULL,
    status        text NOT NULL CHECK (status IN ('pending_approval', 'approved', 'rejected', 'deprecated',
                                                  'archived', 'invalid')),
    status_reason text,
    manifest      jsonb NOT NULL,
    description   text NOT NULL DEFAULT '',
    uploaded_by   text NOT NULL,
    uploaded_at   float8 NOT NULL,
    updated_at    float8 NOT NULL,
    approved_by   text,
    PRIMARY KEY (name, version)
);

CREATE INDEX pack_versions_sha256 ON pack_versions (sha256);

CREATE TABLE pack_events (
    id      bigserial PRIMARY KEY,
    name    text COLLATE "C" NOT NULL,
    version text COLLATE "C" NOT NULL,
    type    text NOT NULL,
    actor   text NOT NULL,
    reason  text,
    at      float8 NOT NULL
);

CREATE INDEX pack_events_version ON pack_events (name, version, id);
