-- 0018_blocked_jobs: the jobs waiting on their dependencies, so counting the jobs not finished reads only
-- those (each of the other unfinished states already has a partial index). Blocked jobs are few and leave
-- the index when their dependencies finish, so no insert of a job without dependencies touches it.
CREATE INDEX jobs_blocked ON jobs (queue) WHERE state = 'blocked';
