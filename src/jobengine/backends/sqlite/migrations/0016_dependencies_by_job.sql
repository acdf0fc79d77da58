-- 0016_dependencies_by_job: nothing to change here. PostgreSQL's 0016 orders a job's dependency edges so
-- that a wide fan-in finds an unfinished parent from the newest down; job_deps's primary key
-- (job_id, position) already does that for SQLite.
SELECT 1;
