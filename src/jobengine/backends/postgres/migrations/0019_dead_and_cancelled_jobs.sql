-- 0019_dead_and_cancelled_jobs: the jobs that ended dead or cancelled, newest first, so that listing them
-- (the dead-letter page, a jobs list filtered on either state) reads those jobs only, not every finished
-- job the store keeps from the newest down. Jobs enter the index only when they die or are cancelled:
-- no insert, claim or completion touches it.
CREATE INDEX jobs_dead_cancelled ON jobs (id) WHERE state IN ('dead', 'cancelled');
