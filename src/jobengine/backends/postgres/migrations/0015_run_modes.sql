-- 0015_run_modes: the mode of a run a run request made (full, incremental, simulate; NULL for any other run),
-- so run lists filter by it without reading trigger_data, and at most one incremental run of a stream
-- (schedule_id holds the stream) is unfinished at a time: a second one would take the same items after the
-- same cursor. A replay (parent_id set) moves no cursor, so it is left out. SQLite has its own 0015.
ALTER TABLE runs ADD COLUMN mode text;

UPDATE runs SET mode = trigger_data::jsonb #>> '{request,mode}'
WHERE trigger = 'request' AND trigger_data IS NOT NULL;

-- Runs that already overlap keep going; only the oldest of them holds its stream.
UPDATE runs SET mode = NULL
WHERE mode = 'incremental' AND parent_id IS NULL AND state IN ('planning', 'queued', 'running')
  AND EXISTS (SELECT 1 FROM runs o WHERE o.tenant = runs.tenant AND o.schedule_id = runs.schedule_id
              AND o.mode = 'incremental' AND o.parent_id IS NULL AND o.state IN ('planning', 'queued', 'running')
              AND o.id < runs.id);

CREATE UNIQUE INDEX runs_one_incremental ON runs (tenant, schedule_id)
    WHERE mode = 'incremental' AND parent_id IS NULL AND state IN ('planning', 'queued', 'running');
CREATE INDEX runs_mode ON runs (tenant, mode, id) WHERE mode IS NOT NULL;
