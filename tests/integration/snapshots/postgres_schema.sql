COLUMN api_keys.created_at double precision NOT NULL
COLUMN api_keys.id text NOT NULL
COLUMN api_keys.name text NOT NULL
COLUMN api_keys.revoked_at double precision NULL
COLUMN api_keys.scopes ARRAY NOT NULL
COLUMN api_keys.secret_hash text NOT NULL
COLUMN api_keys.tenant text NOT NULL
COLUMN dashboard_sessions.created_at double precision NOT NULL
COLUMN dashboard_sessions.ended_at double precision NULL
COLUMN dashboard_sessions.expires_at double precision NOT NULL
COLUMN dashboard_sessions.key_id text NOT NULL
COLUMN dashboard_sessions.tenant text NOT NULL
COLUMN dashboard_sessions.token_hash text NOT NULL
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
COLUMN graph_nodes.graph_id text NOT NULL COLLATE C
COLUMN graph_nodes.job_id text NOT NULL COLLATE C
COLUMN graph_nodes.node text NOT NULL
COLUMN graph_nodes.parents ARRAY NOT NULL
COLUMN graph_nodes.pending boolean NOT NULL DEFAULT false
COLUMN graph_nodes.policy text NOT NULL
COLUMN graphs.cancelled boolean NOT NULL DEFAULT false
COLUMN graphs.created_at double precision NOT NULL
COLUMN graphs.finished_at double precision NULL
COLUMN graphs.id text NOT NULL COLLATE C
COLUMN graphs.name text NOT NULL
COLUMN graphs.state text NULL
COLUMN graphs.tenant text NOT NULL
COLUMN graphs.total integer NOT NULL
COLUMN graphs.updated_at double precision NOT NULL
COLUMN http_idempotency.body bytea NULL
COLUMN http_idempotency.content_type text NULL
COLUMN http_idempotency.created_at double precision NOT NULL
COLUMN http_idempotency.expires_at double precision NOT NULL
COLUMN http_idempotency.fingerprint text NOT NULL
COLUMN http_idempotency.key text NOT NULL
COLUMN http_idempotency.locked_until double precision NULL
COLUMN http_idempotency.status integer NULL
COLUMN http_idempotency.tenant text NOT NULL
COLUMN inbound_hooks.created_at double precision NOT NULL
COLUMN inbound_hooks.enabled integer NOT NULL DEFAULT 1
COLUMN inbound_hooks.name text NOT NULL
COLUMN inbound_hooks.schedule text NOT NULL
COLUMN inbound_hooks.secret text NOT NULL
COLUMN inbound_hooks.template text NULL
COLUMN inbound_hooks.tenant text NOT NULL
COLUMN inbound_receipts.event_id text NOT NULL
COLUMN inbound_receipts.hook text NOT NULL
COLUMN inbound_receipts.received_at double precision NOT NULL
COLUMN inbound_receipts.tenant text NOT NULL
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
COLUMN jobs.graph_id text NULL COLLATE C
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
COLUMN jobs.trace text NULL
COLUMN jobs.updated_at double precision NOT NULL
COLUMN outbox.available_at double precision NOT NULL
COLUMN outbox.headers jsonb NOT NULL DEFAULT '{}'::jsonb
COLUMN outbox.held_until double precision NOT NULL DEFAULT 0
COLUMN outbox.id bigint NOT NULL IDENTITY
COLUMN outbox.job_id text NOT NULL COLLATE C
COLUMN outbox.queue text NOT NULL
COLUMN pack_blobs.created_at double precision NOT NULL
COLUMN pack_blobs.data bytea NOT NULL
COLUMN pack_blobs.sha256 text NOT NULL COLLATE C
COLUMN pack_blobs.size bigint NOT NULL
COLUMN pack_events.actor text NOT NULL
COLUMN pack_events.at double precision NOT NULL
COLUMN pack_events.id bigint NOT NULL DEFAULT nextval('pack_events_id_seq'::regclass)
COLUMN pack_events.name text NOT NULL COLLATE C
COLUMN pack_events.reason text NULL
COLUMN pack_events.type text NOT NULL
COLUMN pack_events.version text NOT NULL COLLATE C
COLUMN pack_versions.approved_by text NULL
COLUMN pack_versions.description text NOT NULL DEFAULT ''::text
COLUMN pack_versions.manifest jsonb NOT NULL
COLUMN pack_versions.name text NOT NULL COLLATE C
COLUMN pack_versions.sha256 text NOT NULL COLLATE C
COLUMN pack_versions.size bigint NOT NULL
COLUMN pack_versions.status text NOT NULL
COLUMN pack_versions.status_reason text NULL
COLUMN pack_versions.updated_at double precision NOT NULL
COLUMN pack_versions.uploaded_at double precision NOT NULL
COLUMN pack_versions.uploaded_by text NOT NULL
COLUMN pack_versions.version text NOT NULL COLLATE C
COLUMN queue_settings.concurrency integer NULL
COLUMN queue_settings.paused boolean NOT NULL DEFAULT false
COLUMN queue_settings.queue text NOT NULL
COLUMN queue_settings.updated_at double precision NOT NULL
COLUMN run_cursor_moves.run_id text NOT NULL COLLATE C
COLUMN run_cursor_moves.stream text NOT NULL
COLUMN run_cursor_moves.tenant text NOT NULL
COLUMN run_cursor_moves.value text NOT NULL
COLUMN run_cursors.run_id text NOT NULL COLLATE C
COLUMN run_cursors.stream text NOT NULL
COLUMN run_cursors.tenant text NOT NULL
COLUMN run_cursors.updated_at double precision NOT NULL
COLUMN run_cursors.value text NOT NULL
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
COLUMN runs.mode text NULL
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
COLUMN runs.trigger_data text NULL
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
COLUMN webhook_attempts.at double precision NOT NULL
COLUMN webhook_attempts.attempt integer NOT NULL
COLUMN webhook_attempts.delivery_id text NOT NULL
COLUMN webhook_attempts.error text NULL
COLUMN webhook_attempts.latency_ms double precision NOT NULL
COLUMN webhook_attempts.status integer NULL
COLUMN webhook_attempts.tenant text NOT NULL
COLUMN webhook_cursors.event_id bigint NOT NULL
COLUMN webhook_cursors.name text NOT NULL
COLUMN webhook_deliveries.attempts integer NOT NULL DEFAULT 0
COLUMN webhook_deliveries.body text NOT NULL
COLUMN webhook_deliveries.created_at double precision NOT NULL
COLUMN webhook_deliveries.endpoint_id text NOT NULL
COLUMN webhook_deliveries.event_id bigint NOT NULL
COLUMN webhook_deliveries.event_type text NOT NULL
COLUMN webhook_deliveries.id text NOT NULL
COLUMN webhook_deliveries.last_error text NULL
COLUMN webhook_deliveries.last_status integer NULL
COLUMN webhook_deliveries.lease_token text NULL
COLUMN webhook_deliveries.lease_until double precision NULL
COLUMN webhook_deliveries.next_at double precision NOT NULL
COLUMN webhook_deliveries.series_attempts integer NOT NULL DEFAULT 0
COLUMN webhook_deliveries.state text NOT NULL
COLUMN webhook_deliveries.tenant text NOT NULL
COLUMN webhook_deliveries.updated_at double precision NOT NULL
COLUMN webhook_deliveries.window_start double precision NOT NULL
COLUMN webhook_endpoints.created_at double precision NOT NULL
COLUMN webhook_endpoints.description text NOT NULL DEFAULT ''::text
COLUMN webhook_endpoints.disabled_reason text NULL
COLUMN webhook_endpoints.enabled integer NOT NULL DEFAULT 1
COLUMN webhook_endpoints.event_types text NOT NULL
COLUMN webhook_endpoints.failing_since double precision NULL
COLUMN webhook_endpoints.id text NOT NULL
COLUMN webhook_endpoints.previous_secret text NULL
COLUMN webhook_endpoints.previous_until double precision NULL
COLUMN webhook_endpoints.queues text NOT NULL
COLUMN webhook_endpoints.rate_limit integer NULL
COLUMN webhook_endpoints.rate_window double precision NULL
COLUMN webhook_endpoints.secret text NOT NULL
COLUMN webhook_endpoints.tasks text NOT NULL
COLUMN webhook_endpoints.tenant text NOT NULL
COLUMN webhook_endpoints.updated_at double precision NOT NULL
COLUMN webhook_endpoints.url text NOT NULL
COLUMN workers.concurrency integer NOT NULL
COLUMN workers.expires_at double precision NOT NULL
COLUMN workers.host text NOT NULL
COLUMN workers.id text NOT NULL COLLATE C
COLUMN workers.kind text NOT NULL
COLUMN workers.last_seen double precision NOT NULL
COLUMN workers.lock_key bigint NULL
COLUMN workers.packs jsonb NOT NULL
COLUMN workers.pid integer NOT NULL
COLUMN workers.queues jsonb NOT NULL
COLUMN workers.started_at double precision NOT NULL
COLUMN workers.tasks jsonb NOT NULL
COLUMN workers.tenant text NULL
COLUMN workers.version text NOT NULL
CONSTRAINT api_keys.api_keys_pkey PRIMARY KEY (id)
CONSTRAINT dashboard_sessions.dashboard_sessions_pkey PRIMARY KEY (token_hash)
CONSTRAINT events.events_pkey PRIMARY KEY (id)
CONSTRAINT failure_signatures.failure_signatures_pkey PRIMARY KEY (tenant, key)
CONSTRAINT failure_signatures.failure_signatures_status_check CHECK ((status = ANY (ARRAY['active'::text, 'resolved'::text, 'suppressed'::text])))
CONSTRAINT flow_buckets.flow_buckets_pkey PRIMARY KEY (key)
CONSTRAINT flow_limits.flow_limits_pkey PRIMARY KEY (queue)
CONSTRAINT graph_nodes.graph_nodes_pkey PRIMARY KEY (job_id)
CONSTRAINT graphs.graphs_pkey PRIMARY KEY (id)
CONSTRAINT http_idempotency.http_idempotency_pkey PRIMARY KEY (tenant, key)
CONSTRAINT inbound_hooks.inbound_hooks_pkey PRIMARY KEY (tenant, name)
CONSTRAINT inbound_receipts.inbound_receipts_pkey PRIMARY KEY (tenant, hook, event_id)
CONSTRAINT job_dependencies.job_dependencies_pkey PRIMARY KEY (dep_id, job_id)
CONSTRAINT job_watermarks.job_watermarks_pkey PRIMARY KEY (job_id, source, key)
CONSTRAINT job_watermarks.job_watermarks_value_check CHECK ((jsonb_typeof(value) = ANY (ARRAY['number'::text, 'string'::text])))
CONSTRAINT jobengine_migrations.jobengine_migrations_pkey PRIMARY KEY (version)
CONSTRAINT jobs.jobs_pkey PRIMARY KEY (id)
CONSTRAINT jobs.jobs_state_check CHECK ((state = ANY (ARRAY['blocked'::text, 'scheduled'::text, 'queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'dead'::text, 'cancelled'::text, 'stale'::text])))
CONSTRAINT outbox.outbox_pkey PRIMARY KEY (id)
CONSTRAINT pack_blobs.pack_blobs_pkey PRIMARY KEY (sha256)
CONSTRAINT pack_events.pack_events_pkey PRIMARY KEY (id)
CONSTRAINT pack_versions.pack_versions_pkey PRIMARY KEY (name, version)
CONSTRAINT pack_versions.pack_versions_status_check CHECK ((status = ANY (ARRAY['pending_approval'::text, 'approved'::text, 'rejected'::text, 'deprecated'::text, 'archived'::text, 'invalid'::text])))
CONSTRAINT queue_settings.queue_settings_pkey PRIMARY KEY (queue)
CONSTRAINT run_cursor_moves.run_cursor_moves_pkey PRIMARY KEY (run_id)
CONSTRAINT run_cursors.run_cursors_pkey PRIMARY KEY (tenant, stream)
CONSTRAINT run_jobs.run_jobs_pkey PRIMARY KEY (job_id)
CONSTRAINT runs.runs_pkey PRIMARY KEY (id)
CONSTRAINT runs.runs_state_check CHECK ((state = ANY (ARRAY['planning'::text, 'queued'::text, 'running'::text, 'completed'::text, 'cancelled'::text, 'error'::text])))
CONSTRAINT schedule_ticks.schedule_ticks_pkey PRIMARY KEY (schedule_id, tick_ms)
CONSTRAINT schedules.schedules_pkey PRIMARY KEY (id)
CONSTRAINT watermarks.watermarks_pkey PRIMARY KEY (source, key)
CONSTRAINT watermarks.watermarks_value_check CHECK ((jsonb_typeof(value) = ANY (ARRAY['number'::text, 'string'::text])))
CONSTRAINT webhook_attempts.webhook_attempts_pkey PRIMARY KEY (delivery_id, attempt)
CONSTRAINT webhook_cursors.webhook_cursors_pkey PRIMARY KEY (name)
CONSTRAINT webhook_deliveries.webhook_deliveries_endpoint_id_event_id_key UNIQUE (endpoint_id, event_id)
CONSTRAINT webhook_deliveries.webhook_deliveries_pkey PRIMARY KEY (id)
CONSTRAINT webhook_endpoints.webhook_endpoints_pkey PRIMARY KEY (id)
CONSTRAINT workers.workers_kind_check CHECK ((kind = ANY (ARRAY['local'::text, 'remote'::text])))
CONSTRAINT workers.workers_pkey PRIMARY KEY (id)
INDEX CREATE INDEX api_keys_tenant ON api_keys USING btree (tenant, created_at)
INDEX CREATE INDEX dashboard_sessions_expires ON dashboard_sessions USING btree (expires_at)
INDEX CREATE INDEX dashboard_sessions_key ON dashboard_sessions USING btree (key_id)
INDEX CREATE INDEX events_job ON events USING btree (job_id, id)
INDEX CREATE INDEX failure_signatures_non_retryable ON failure_signatures USING btree (key) WHERE non_retryable
INDEX CREATE INDEX failure_signatures_recent ON failure_signatures USING btree (tenant, last_seen)
INDEX CREATE INDEX graphs_tenant ON graphs USING btree (tenant, id)
INDEX CREATE INDEX http_idempotency_expires ON http_idempotency USING btree (expires_at)
INDEX CREATE INDEX inbound_hooks_name ON inbound_hooks USING btree (name)
INDEX CREATE INDEX inbound_receipts_received ON inbound_receipts USING btree (received_at)
INDEX CREATE INDEX job_dependencies_job ON job_dependencies USING btree (job_id, dep_id)
INDEX CREATE INDEX jobs_blocked ON jobs USING btree (queue) WHERE (state = 'blocked'::text)
INDEX CREATE INDEX jobs_dead_cancelled ON jobs USING btree (id) WHERE (state = ANY (ARRAY['dead'::text, 'cancelled'::text]))
INDEX CREATE INDEX jobs_done_at ON jobs USING btree (COALESCE(finished_at, updated_at)) WHERE (state = ANY (ARRAY['succeeded'::text, 'dead'::text, 'cancelled'::text]))
INDEX CREATE INDEX jobs_graph ON jobs USING btree (graph_id, state) WHERE (graph_id IS NOT NULL)
INDEX CREATE INDEX jobs_lease_worker ON jobs USING btree (lease_worker) WHERE (state = 'running'::text)
INDEX CREATE INDEX jobs_runnable ON jobs USING btree (queue, priority DESC, run_at, id) WHERE (state = ANY (ARRAY['queued'::text, 'scheduled'::text, 'failed'::text]))
INDEX CREATE INDEX jobs_running ON jobs USING btree (id) WHERE (state = 'running'::text)
INDEX CREATE INDEX jobs_stale_at ON jobs USING btree (COALESCE(finished_at, updated_at)) WHERE (state = 'stale'::text)
INDEX CREATE INDEX jobs_waiting ON jobs USING btree (queue, run_at) WHERE (state = ANY (ARRAY['scheduled'::text, 'failed'::text]))
INDEX CREATE INDEX outbox_due ON outbox USING btree (available_at, id)
INDEX CREATE INDEX pack_events_version ON pack_events USING btree (name, version, id)
INDEX CREATE INDEX pack_versions_sha256 ON pack_versions USING btree (sha256)
INDEX CREATE INDEX run_jobs_run ON run_jobs USING btree (run_id, segment)
INDEX CREATE INDEX runs_active ON runs USING btree (schedule_id, state) WHERE (state = ANY (ARRAY['planning'::text, 'queued'::text, 'running'::text]))
INDEX CREATE INDEX runs_finished ON runs USING btree (finished_at) WHERE (finished_at IS NOT NULL)
INDEX CREATE INDEX runs_mode ON runs USING btree (tenant, mode, id) WHERE (mode IS NOT NULL)
INDEX CREATE INDEX runs_schedule ON runs USING btree (schedule_id, id)
INDEX CREATE INDEX runs_tenant ON runs USING btree (tenant, id)
INDEX CREATE INDEX schedule_ticks_fired ON schedule_ticks USING btree (fired_at)
INDEX CREATE INDEX schedules_due ON schedules USING btree (next_fire_at) WHERE (next_fire_at IS NOT NULL)
INDEX CREATE INDEX webhook_deliveries_due ON webhook_deliveries USING btree (next_at) WHERE (state = 'pending'::text)
INDEX CREATE INDEX webhook_deliveries_tenant ON webhook_deliveries USING btree (tenant, created_at)
INDEX CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints USING btree (tenant, created_at)
INDEX CREATE UNIQUE INDEX api_keys_pkey ON api_keys USING btree (id)
INDEX CREATE UNIQUE INDEX dashboard_sessions_pkey ON dashboard_sessions USING btree (token_hash)
INDEX CREATE UNIQUE INDEX events_pkey ON events USING btree (id)
INDEX CREATE UNIQUE INDEX failure_signatures_pkey ON failure_signatures USING btree (tenant, key)
INDEX CREATE UNIQUE INDEX flow_buckets_pkey ON flow_buckets USING btree (key)
INDEX CREATE UNIQUE INDEX flow_limits_pkey ON flow_limits USING btree (queue)
INDEX CREATE UNIQUE INDEX graph_nodes_name ON graph_nodes USING btree (graph_id, node)
INDEX CREATE UNIQUE INDEX graph_nodes_pkey ON graph_nodes USING btree (job_id)
INDEX CREATE UNIQUE INDEX graphs_pkey ON graphs USING btree (id)
INDEX CREATE UNIQUE INDEX http_idempotency_pkey ON http_idempotency USING btree (tenant, key)
INDEX CREATE UNIQUE INDEX inbound_hooks_pkey ON inbound_hooks USING btree (tenant, name)
INDEX CREATE UNIQUE INDEX inbound_receipts_pkey ON inbound_receipts USING btree (tenant, hook, event_id)
INDEX CREATE UNIQUE INDEX job_dependencies_pkey ON job_dependencies USING btree (dep_id, job_id)
INDEX CREATE UNIQUE INDEX job_watermarks_pkey ON job_watermarks USING btree (job_id, source, key)
INDEX CREATE UNIQUE INDEX jobengine_migrations_pkey ON jobengine_migrations USING btree (version)
INDEX CREATE UNIQUE INDEX jobs_idempotency ON jobs USING btree (tenant, idempotency_key) WHERE (idempotency_key IS NOT NULL)
INDEX CREATE UNIQUE INDEX jobs_pkey ON jobs USING btree (id)
INDEX CREATE UNIQUE INDEX outbox_pkey ON outbox USING btree (id)
INDEX CREATE UNIQUE INDEX pack_blobs_pkey ON pack_blobs USING btree (sha256)
INDEX CREATE UNIQUE INDEX pack_events_pkey ON pack_events USING btree (id)
INDEX CREATE UNIQUE INDEX pack_versions_pkey ON pack_versions USING btree (name, version)
INDEX CREATE UNIQUE INDEX queue_settings_pkey ON queue_settings USING btree (queue)
INDEX CREATE UNIQUE INDEX run_cursor_moves_pkey ON run_cursor_moves USING btree (run_id)
INDEX CREATE UNIQUE INDEX run_cursors_pkey ON run_cursors USING btree (tenant, stream)
INDEX CREATE UNIQUE INDEX run_jobs_pkey ON run_jobs USING btree (job_id)
INDEX CREATE UNIQUE INDEX runs_one_incremental ON runs USING btree (tenant, schedule_id) WHERE ((mode = 'incremental'::text) AND (parent_id IS NULL) AND (state = ANY (ARRAY['planning'::text, 'queued'::text, 'running'::text])))
INDEX CREATE UNIQUE INDEX runs_pkey ON runs USING btree (id)
INDEX CREATE UNIQUE INDEX schedule_ticks_pkey ON schedule_ticks USING btree (schedule_id, tick_ms)
INDEX CREATE UNIQUE INDEX schedules_name ON schedules USING btree (tenant, name)
INDEX CREATE UNIQUE INDEX schedules_pkey ON schedules USING btree (id)
INDEX CREATE UNIQUE INDEX watermarks_pkey ON watermarks USING btree (source, key)
INDEX CREATE UNIQUE INDEX webhook_attempts_pkey ON webhook_attempts USING btree (delivery_id, attempt)
INDEX CREATE UNIQUE INDEX webhook_cursors_pkey ON webhook_cursors USING btree (name)
INDEX CREATE UNIQUE INDEX webhook_deliveries_endpoint_id_event_id_key ON webhook_deliveries USING btree (endpoint_id, event_id)
INDEX CREATE UNIQUE INDEX webhook_deliveries_pkey ON webhook_deliveries USING btree (id)
INDEX CREATE UNIQUE INDEX webhook_endpoints_pkey ON webhook_endpoints USING btree (id)
INDEX CREATE UNIQUE INDEX workers_pkey ON workers USING btree (id)
OPTIONS jobs fillfactor=90
