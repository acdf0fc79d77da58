-- 0016_dependencies_by_job: a job's dependency edges in dependency id order, so the store finds one that has
-- not succeeded by reading from the newest dependency down (a wide fan-in's newest parents end last), in
-- one index probe instead of one per dependency. Replaces the index on job_id alone. SQLite has its own
-- 0016 (its job_deps key already orders a job's dependencies).
DROP INDEX IF EXISTS job_dependencies_job;
CREATE INDEX job_dependencies_job ON job_dependencies (job_id, dep_id);
