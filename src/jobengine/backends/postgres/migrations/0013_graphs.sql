-- 0013_graphs: graphs of jobs (core/graphs.py). A graph's nodes are ordinary jobs; its edges are their
-- depends_on. SQLite has its own 0013 with the same tables.

-- The graph a job is a node of. NULL for every other job, so the engine tells a node apart from a plain job,
-- without a read, when it ends.
ALTER TABLE jobs ADD COLUMN graph_id text COLLATE "C";
-- A graph's nodes by state: is any still unfinished (one probe), and its progress.
CREATE INDEX jobs_graph ON jobs (graph_id, state) WHERE graph_id IS NOT NULL;

-- state and finished_at: the outcome once every node ended, written once (the event it appends goes with
-- it); NULL while the graph goes on, whose state is derived from its nodes. cancelled: a user asked to
-- cancel it (its nodes then end cancelled; none is run again until a retry).
CREATE TABLE graphs (
    id          text COLLATE "C" PRIMARY KEY,
    tenant      text NOT NULL,
    name        text NOT NULL,
    total       integer NOT NULL,
    cancelled   boolean NOT NULL DEFAULT false,
    state       text,
    created_at  float8 NOT NULL,
    updated_at  float8 NOT NULL,
    finished_at float8
);
CREATE INDEX graphs_tenant ON graphs (tenant, id);

-- One row per node: its name in the graph, its failure policy, the names of its parents, and whether a
-- retry of the graph waits to run it again once its parents succeeded.
CREATE TABLE graph_nodes (
    job_id   text COLLATE "C" PRIMARY KEY,
    graph_id text COLLATE "C" NOT NULL,
    node     text NOT NULL,
    policy   text NOT NULL,
    parents  text[] NOT NULL,
    pending  boolean NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX graph_nodes_name ON graph_nodes (graph_id, node);
