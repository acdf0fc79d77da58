-- 0013_graphs: graphs of jobs (core/graphs.py). A graph's nodes are ordinary jobs; its edges are their
-- depends_on. PostgreSQL has its own 0013 with the same tables.

-- The graph a job is a node of. NULL for every other job, so the engine tells a node apart from a plain job,
-- without a read, when it ends.
ALTER TABLE jobs ADD COLUMN graph_id TEXT;
-- A graph's nodes by state: is any still unfinished (one probe), and its progress.
CREATE INDEX jobs_graph ON jobs (graph_id, state) WHERE graph_id IS NOT NULL;

-- state and finished_at: the outcome once every node ended, written once (the event it appends goes with
-- it); NULL while the graph goes on, whose state is derived from its nodes. cancelled: a user asked to
-- cancel it (its nodes then end cancelled; none is run again until a retry).
CREATE TABLE graphs (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    total       INTEGER NOT NULL,
    cancelled   INTEGER NOT NULL DEFAULT 0,
    state       TEXT,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    finished_at REAL
);
CREATE INDEX graphs_tenant ON graphs (tenant, id);

-- One row per node: its name in the graph, its failure policy, the names of its parents (a JSON array),
-- and whether a retry of the graph waits to run it again once its parents succeeded.
CREATE TABLE graph_nodes (
    job_id   TEXT PRIMARY KEY,
    graph_id TEXT NOT NULL,
    node     TEXT NOT NULL,
    policy   TEXT NOT NULL,
    parents  TEXT NOT NULL,
    pending  INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE UNIQUE INDEX graph_nodes_name ON graph_nodes (graph_id, node);
