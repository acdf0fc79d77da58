-- 0014_trace: the W3C traceparent a job was enqueued under (jobengine.tracing), so the span of each of its
-- runs, on any worker, joins the trace of the request that enqueued it. NULL when tracing is off. PostgreSQL has
-- its own 0014 with the same column.
ALTER TABLE jobs ADD COLUMN trace TEXT;
