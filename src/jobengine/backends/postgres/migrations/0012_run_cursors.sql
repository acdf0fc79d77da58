-- 0012_run_cursors: where incremental runs of a task over an input source start (stream: task and source).
-- run_cursors holds the newest item a successful run reached; run_cursor_moves holds where a run moves the
-- cursor once every one of its segments succeeded, applied in the transaction that records its last
-- outcome (a run that fails, is cancelled or is killed leaves the cursor where it was). Values are JSON
-- text, compared in the item order of core.run_requests. SQLite has its own 0012_run_cursors.

CREATE TABLE run_cursors (
    tenant     text NOT NULL,
    stream     text NOT NULL,
    value      text NOT NULL,
    run_id     text COLLATE "C" NOT NULL,
    updated_at float8 NOT NULL,
    PRIMARY KEY (tenant, stream)
);

CREATE TABLE run_cursor_moves (
    run_id text COLLATE "C" PRIMARY KEY,
    tenant text NOT NULL,
    stream text NOT NULL,
    value  text NOT NULL
);
