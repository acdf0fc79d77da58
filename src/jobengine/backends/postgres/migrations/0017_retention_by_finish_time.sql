-- 0017_retention_by_finish_time: retention finds the jobs it may make stale or delete by their finish time,
-- so a pass reads only the jobs it changes. The index on id it replaces held every finished job, and a pass
-- walked all of them to test each one's finish time: a store that keeps a week of finished jobs read the
-- whole week every retention_interval. Two partial indexes, one per step of retention: a job leaves the
-- first and enters the second when it becomes stale. SQLite's jobs_retention (state, finished_at) already
-- serves both steps; its 0017 changes nothing.
DROP INDEX IF EXISTS jobs_finished;
CREATE INDEX jobs_done_at ON jobs ((coalesce(finished_at, updated_at))) WHERE state IN ('succeeded', 'dead', 'cancelled');
CREATE INDEX jobs_stale_at ON jobs ((coalesce(finished_at, updated_at))) WHERE state = 'stale';
