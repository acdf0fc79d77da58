COLUMN api_keys.created_at double precision NOT NULL
COLUMN api_keys.id text NOT NULL
COLUMN api_keys.name text NOT NULL
COLUMN api_keys.revoked_at double precision NULL
COLUMN api_keys.scopes ARRAY NOT NULL
COLUMN api_keys.secret_hash text NOT NULL
COLUMN api_keys.tenant text NOT NULL
COLUMN events.at double precision NOT NULL
COLUMN events.data jsonb NOT NULL DEFAULT '{}'::jsonb
COLUMN events.id bigint NOT NULL IDENTITY
COLUMN events.job_id text NULL COLLATE C
COLUMN events.queue text NULL
COLUMN events.task text NULL
COLUMN events.tenant text NOT NULL
COLUMN events.type text NOT NULL
COLUMN failure_signatures.error_type text NOT NULL
COLUMN failure_signatures.first_seen double precision NOT NULL
COLUMN failure_signatures.frames jsonb NOT NULL
COLUMN failure_signatures.key text NOT NULL COLLATE C
COLUMN failure_signatures.last_seen double precision NOT NULL
COLUMN failure_signatures.message text NOT NULL
COLUMN failure_signatures.non_retryable boolean NOT NULL DEFAULT false
COLUMN failure_signatures.occurrences bigint NOT NULL
COLUMN failure_signatures.sample_job_ids jsonb NOT NULL
COLUMN failure_signatures.status text NOT NULL
COLUMN failure_signatures.task text NOT NULL
COLUMN failure_signatures.tenant text NOT NULL
COLUMN failure_signatures.updated_at double precision NOT NULL
COLUMN flow_buckets.key text NOT NULL COLLATE C
COLUMN flow_buckets.tokens double precision NOT NULL
COLUMN flow_buckets.updated_at double precision NOT NULL
COLUMN flow_limits.queue text NOT NULL
COLUMN flow_limits.spec jsonb NOT NULL
COLUMN flow_limits.updated_at double precision NOT NULL
COLUMN http_idempotency.body bytea NULL
COLUMN http_idempotency.content_type text NULL
COLUMN http_idempotency.created_at double precision NOT NULL
COLUMN http_idempotency.expires_at double precision NOT NULL
COLUMN http_idempotency.fingerprint text NOT NULL
COLUMN http_idempotency.key text NOT NULL
COLUMN http_idempotency.locked_until double precision NULL
COLUMN http_idempotency.status integer NULL
COLUMN http_idempotency.tenant text NOT NULL
COLUMN job_dependencies.dep_id text NOT NULL COLLATE C
COLUMN job_dependencies.job_id text NOT NULL COLLATE C
COLUMN job_watermarks.job_id text NOT NULL COLLATE C
COLUMN job_watermarks.key text NOT NULL
COLUMN job_watermarks.source text NOT NULL
COLUMN job_watermarks.value jsonb NOT NULL
COLUMN jobengine_migrations.applied_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN jobengine_migrations.name text NOT NULL
COLUMN jobengine_migrations.version integer NOT NULL
COLUMN jobs.attempt integer NOT NULL DEFAULT 0
COLUMN jobs.cancel_requested boolean NOT NULL DEFAULT false
COLUMN jobs.created_at double precision NOT NULL
COLUMN jobs.depends_on ARRAY NOT NULL DEFAULT '{}'::text[]
COLUMN jobs.errors jsonb NOT NULL DEFAULT '[]'::jsonb
COLUMN jobs.finished_at double precision NULL
COLUMN jobs.has_dependents boolean NOT NULL DEFAULT false
COLUMN jobs.id text NOT NULL COLLATE C
COLUMN jobs.idempotency_key text NULL
COLUMN jobs.lease_expires_at double precision NULL
COLUMN jobs.lease_token text NULL
COLUMN jobs.lease_worker text NULL
COLUMN jobs.max_attempts integer NOT NULL
COLUMN jobs.outcome text NULL
COLUMN jobs.payload jsonb NULL
COLUMN jobs.phases jsonb NOT NULL DEFAULT '[]'::jsonb
COLUMN jobs.priority integer NOT NULL DEFAULT 0
COLUMN jobs.progress double precision NOT NULL DEFAULT 0
COLUMN jobs.queue text NOT NULL
COLUMN jobs.reason text NULL
COLUMN jobs.result jsonb NULL
COLUMN jobs.run_at double precision NOT NULL
COLUMN jobs.run_id text NULL COLLATE C
COLUMN jobs.schedule_id text NULL COLLATE C
COLUMN jobs.started_at double precision NULL
COLUMN jobs.state text NOT NULL
COLUMN jobs.task text NOT NULL
COLUMN jobs.tenant text NOT NULL
COLUMN jobs.timeout double precision NULL
COLUMN jobs.updated_at double precision NOT NULL
COLUMN outbox.available_at double precision NOT NULL
COLUMN outbox.headers jsonb NOT NULL DEFAULT '{}'::jsonb
COLUMN outbox.held_until double precision NOT NULL DEFAULT 0
COLUMN outbox.id bigint NOT NULL IDENTITY
COLUMN outbox.job_id text NOT NULL COLLATE C
COLUMN outbox.queue text NOT NULL
COLUMN queue_settings.concurrency integer NULL
COLUMN queue_settings.paused boolean NOT NULL DEFAULT false
COLUMN queue_settings.queue text NOT NULL
COLUMN queue_settings.updated_at double precision NOT NULL
COLUMN run_jobs.duration double precision NULL
COLUMN run_jobs.items integer NOT NULL
COLUMN run_jobs.job_id text NOT NULL COLLATE C
COLUMN run_jobs.outcome text NULL
COLUMN run_jobs.run_id text NOT NULL COLLATE C
COLUMN run_jobs.segment integer NOT NULL
COLUMN runs.actor text NULL
COLUMN runs.cancelled integer NOT NULL DEFAULT 0
COLUMN runs.created_at double precision NOT NULL
COLUMN runs.dead integer NOT NULL DEFAULT 0
COLUMN runs.duration_max double precision NOT NULL DEFAULT 0
COLUMN runs.duration_total double precision NOT NULL DEFAULT 0
COLUMN runs.finished_at double precision NULL
COLUMN runs.fired_by text NULL
COLUMN runs.id text NOT NULL COLLATE C
COLUMN runs.items integer NOT NULL DEFAULT 0
COLUMN runs.no_work boolean NOT NULL DEFAULT false
COLUMN runs.parent_id text NULL COLLATE C
COLUMN runs.reason text NULL
COLUMN runs.schedule_id text NOT NULL COLLATE C
COLUMN runs.started_at double precision NULL
COLUMN runs.state text NOT NULL
COLUMN runs.succeeded integer NOT NULL DEFAULT 0
COLUMN runs.tenant text NOT NULL
COLUMN runs.tick double precision NULL
COLUMN runs.total integer NOT NULL DEFAULT 0
COLUMN runs.trigger text NOT NULL
COLUMN runs.updated_at double precision NOT NULL
COLUMN schedule_ticks.fired_at double precision NOT NULL
COLUMN schedule_ticks.fired_by text NULL
COLUMN schedule_ticks.run_id text NULL COLLATE C
COLUMN schedule_ticks.schedule_id text NOT NULL COLLATE C
COLUMN schedule_ticks.tick_ms bigint NOT NULL
COLUMN schedules.created_at double precision NOT NULL
COLUMN schedules.created_by text NULL
COLUMN schedules.cursor double precision NOT NULL
COLUMN schedules.enabled boolean NOT NULL
COLUMN schedules.id text NOT NULL COLLATE C
COLUMN schedules.name text NOT NULL
COLUMN schedules.next_fire_at double precision NULL
COLUMN schedules.spec jsonb NOT NULL
COLUMN schedules.tenant text NOT NULL
COLUMN schedules.updated_at double precision NOT NULL
COLUMN schedules.updated_by text NULL
COLUMN schedules.version integer NOT NULL
COLUMN watermarks.job_id text NULL COLLATE C
COLUMN watermarks.key text NOT NULL
COLUMN watermarks.source text NOT NULL
COLUMN watermarks.updated_at double precision NOT NULL
COLUMN watermarks.value jsonb NOT NULL
CONSTRAINT api_keys.api_keys_pkey PRIMARY KEY (id)
CONSTRAINT events.events_pkey PRIMARY KEY (id)
CONSTRAINT failure_signatures.failure_signatures_pkey PRIMARY KEY (tenant, key)
CONSTRAINT failure_signatures.failure_signatures_status_check CHECK ((status = ANY (ARRAY['active'::text, 'resolved'::text, 'suppressed'::text])))
CONSTRAINT flow_buckets.flow_buckets_pkey PRIMARY KEY (key)
CONSTRAINT flow_limits.flow_limits_pkey PRIMARY KEY (queue)
CONSTRAINT http_idempotency.http_idempotency_pkey PRIMARY KEY (tenant, key)
CONSTRAINT job_dependencies.job_dependencies_pkey PRIMARY KEY (dep_id, job_id)
CONSTRAINT job_watermarks.job_watermarks_pkey PRIMARY KEY (job_id, source, key)
CONSTRAINT job_watermarks.job_watermarks_value_check CHECK ((jsonb_typeof(value) = ANY (ARRAY['number'::text, 'string'::text])))
CONSTRAINT jobengine_migrations.jobengine_migrations_pkey PRIMARY KEY (version)
CONSTRAINT jobs.jobs_pkey PRIMARY KEY (id)
CONSTRAINT jobs.jobs_state_check CHECK ((state = ANY (ARRAY['blocked'::text, 'scheduled'::text, 'queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'dead'::text, 'cancelled'::text, 'stale'::text])))
CONSTRAINT outbox.outbox_pkey PRIMARY KEY (id)
CONSTRAINT queue_settings.queue_settings_pkey PRIMARY KEY (queue)
CONSTRAINT run_jobs.run_jobs_pkey PRIMARY KEY (job_id)
CONSTRAINT runs.runs_pkey PRIMARY KEY (id)
CONSTRAINT runs.runs_state_check CHECK ((state = ANY (ARRAY['planning'::text, 'queued'::text, 'running'::text, 'completed'::text, 'cancelled'::text, 'error'::text])))
CONSTRAINT schedule_ticks.schedule_ticks_pkey PRIMARY KEY (schedule_id, tick_ms)
CONSTRAINT schedules.schedules_pkey PRIMARY KEY (id)
CONSTRAINT watermarks.watermarks_pkey PRIMARY KEY (source, key)
CONSTRAINT watermarks.watermarks_value_check CHECK ((jsonb_typeof(value) = ANY (ARRAY['number'::text, 'string'::text])))
INDEX CREATE INDEX api_keys_tenant ON api_keys USING btree (tenant, created_at)
INDEX CREATE INDEX events_job ON events USING btree (job_id, id)
INDEX CREATE INDEX failure_signatures_non_retryable ON failure_signatures USING btree (key) WHERE non_retryable
INDEX CREATE INDEX failure_signatures_recent ON failure_signatures USING btree (tenant, last_seen)
INDEX CREATE INDEX http_idempotency_expires ON http_idempotency USING btree (expires_at)
INDEX CREATE INDEX job_dependencies_job ON job_dependencies USING btree (job_id)
INDEX CREATE INDEX jobs_finished ON jobs USING btree (id) WHERE (state = ANY (ARRAY['succeeded'::text, 'dead'::text, 'cancelled'::text, 'stale'::text]))
INDEX CREATE INDEX jobs_runnable ON jobs USING btree (queue, priority DESC, run_at, id) WHERE (state = ANY (ARRAY['queued'::text, 'scheduled'::text, 'failed'::text]))
INDEX CREATE INDEX jobs_running ON jobs USING btree (id) WHERE (state = 'running'::text)
INDEX CREATE INDEX jobs_waiting ON jobs USING btree (queue, run_at) WHERE (state = ANY (ARRAY['scheduled'::text, 'failed'::text]))
INDEX CREATE INDEX outbox_due ON outbox USING btree (available_at, id)
INDEX CREATE INDEX run_jobs_run ON run_jobs USING btree (run_id, segment)
INDEX CREATE INDEX runs_active ON runs USING btree (schedule_id, state) WHERE (state = ANY (ARRAY['planning'::text, 'queued'::text, 'running'::text]))
INDEX CREATE INDEX runs_schedule ON runs USING btree (schedule_id, id)
INDEX CREATE INDEX runs_tenant ON runs USING btree (tenant, id)
INDEX CREATE INDEX schedules_due ON schedules USING btree (next_fire_at) WHERE (next_fire_at IS NOT NULL)
INDEX CREATE UNIQUE INDEX api_keys_pkey ON api_keys USING btree (id)
INDEX CREATE UNIQUE INDEX events_pkey ON events USING btree (id)
INDEX CREATE UNIQUE INDEX failure_signatures_pkey ON failure_signatures USING btree (tenant, key)
INDEX CREATE UNIQUE INDEX flow_buckets_pkey ON flow_buckets USING btree (key)
INDEX CREATE UNIQUE INDEX flow_limits_pkey ON flow_limits USING btree (queue)
INDEX CREATE UNIQUE INDEX http_idempotency_pkey ON http_idempotency USING btree (tenant, key)
INDEX CREATE UNIQUE INDEX job_dependencies_pkey ON job_dependencies USING btree (dep_id, job_id)
INDEX CREATE UNIQUE INDEX job_watermarks_pkey ON job_watermarks USING btree (job_id, source, key)
INDEX CREATE UNIQUE INDEX jobengine_migrations_pkey ON jobengine_migrations USING btree (version)
INDEX CREATE UNIQUE INDEX jobs_idempotency ON jobs USING btree (tenant, idempotency_key) WHERE (idempotency_key IS NOT NULL)
INDEX CREATE UNIQUE INDEX jobs_pkey ON jobs USING btree (id)
INDEX CREATE UNIQUE INDEX outbox_pkey ON outbox USING btree (id)
INDEX CREATE UNIQUE INDEX queue_settings_pkey ON queue_settings USING btree (queue)
INDEX CREATE UNIQUE INDEX run_jobs_pkey ON run_jobs USING btree (job_id)
INDEX CREATE UNIQUE INDEX runs_pkey ON runs USING btree (id)
INDEX CREATE UNIQUE INDEX schedule_ticks_pkey ON schedule_ticks USING btree (schedule_id, tick_ms)
INDEX CREATE UNIQUE INDEX schedules_name ON schedules USING btree (tenant, name)
INDEX CREATE UNIQUE INDEX schedules_pkey ON schedules USING btree (id)
INDEX CREATE UNIQUE INDEX watermarks_pkey ON watermarks USING btree (source, key)
OPTIONS jobs fillfactor=90
