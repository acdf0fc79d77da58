-- 0008_run_retention: what run retention deletes, found by index. Ended runs (with their run_jobs rows) and
-- tick records older than settings.run_retention are deleted by the retention pass; a tick below its
-- schedule's cursor can never fire again (the cursor's compare-and-set guards that), so its row is only
-- history. SQLite has its own 0008_run_retention.

CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX schedule_ticks_fired ON schedule_ticks (fired_at);
