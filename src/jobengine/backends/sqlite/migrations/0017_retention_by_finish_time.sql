-- 0017_retention_by_finish_time: nothing to change here. PostgreSQL's 0017 indexes finished jobs by their
-- finish time for retention; SQLite's jobs_retention (state, finished_at) already does that.
SELECT 1;
