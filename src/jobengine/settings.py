"""Settings: read once at the edge (CLI) from ``jobengine.yaml`` and ``JOBENGINE_*``, then passed down frozen.

Environment overrides use the field name upper-cased: ``JOBENGINE_DATABASE=/data/jobs.db``,
``JOBENGINE_WORKER_CONCURRENCY=20``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from jobengine.delivery.config import QueueConfig
from jobengine.errors import ConfigError
from jobengine.flow.config import check_flow_settings
from jobengine.packs.storage import check_blob_settings
from jobengine.webhooks.config import check_webhook_settings


@dataclass(frozen=True, slots=True)
class Settings:
    #: ``memory``, a SQLite file path (``./jobengine.db``), ``sqlite:///path`` or ``postgresql://...``.
    database: str = "./jobengine.db"
    sqlite_synchronous: str = "FULL"
    #: The level of a worker's own transitions (claim, heartbeat, complete, fail, release; never more than
    #: sqlite_synchronous): NORMAL loses no acknowledged job on power loss, only worker progress, which is
    #: redone (see backends/sqlite/store.py).
    sqlite_worker_synchronous: str = "NORMAL"
    postgres_schema: str = "jobengine"  # the schema that holds jobengine's tables in a postgresql:// database
    postgres_pool_size: int = 10  # connections per process (per event loop)
    worker_concurrency: int = 10
    worker_queues: tuple[str, ...] = ()  # empty: every queue of the registered tasks
    lease_seconds: float = 30.0
    heartbeat_interval: float = 0.0  # 0: a third of the lease
    poll_interval: float = 1.0
    rescue_interval: float = 5.0
    #: How often a worker looks for workers whose process is gone (the liveness their store holds for them:
    #: jobengine.ports.workers); their running jobs run again at once instead of after their lease.
    liveness_interval: float = 0.5
    #: Refuse an enqueue whose task no live worker runs and this process does not know (422 naming the
    #: task), for deployments whose catalogue of tasks is known; off: such a job waits, and says why.
    refuse_unknown_tasks: bool = False
    fetch_batch: int = 0  # 0: up to the free slots
    grace_period: float = 30.0
    #: A worker reports finished jobs at most once per this many seconds (WorkerOptions.flush_spacing):
    #: fewer commits at a modest rate, at the cost of a job's outcome being stored up to this much later.
    worker_flush_spacing: float = 0.05
    retention_interval: float = 60.0
    stale_after: float = 7 * 86400.0
    delete_after: float = 30 * 86400.0
    # -- the scheduler (jobengine scheduler / up) --
    scheduler_poll_interval: float = 1.0  # longest sleep between passes; how soon a new schedule is seen
    scheduler_lease_seconds: float = 5.0  # the SQLite leader's lease (PostgreSQL uses an advisory lock)
    #: A tick seen later than this after its time counts as missed (misfire policy); sooner, it fires as on
    #: time. Longer than a leader fail-over (the lease plus a poll), so a fail-over loses no tick.
    scheduler_misfire_grace: float = 15.0
    scheduler_reconcile_interval: float = 10.0  # how often runs are checked against their jobs
    signature_cache_seconds: float = 2.0  # a signature marked non-retryable elsewhere applies within this
    event_retention: float = 0.0  # seconds events are kept (0: forever); SSE resumes within it
    run_retention: float = 30 * 86400.0  # seconds ended runs and tick records are kept (0: forever)
    # -- the HTTP API (jobengine serve / up) --
    api_host: str = "127.0.0.1"
    api_port: int = 8080
    api_max_body_bytes: int = 1_048_576  # larger request bodies get 413
    api_key_cache_seconds: float = 5.0  # a key revoked in another process is refused within this time
    idempotency_ttl: float = 86400.0  # how long an Idempotency-Key's first answer is replayed
    sse_keepalive: float = 15.0  # seconds between keep-alive comments on an idle stream
    sse_buffer: int = 1000  # events buffered per stream; a client that stops reading is dropped past it
    sse_poll_interval: float = 1.0  # an idle stream looks for other processes' events this often
    # PostgreSQL: a hole in the event ids younger than this may be a transaction still open; followers wait
    # for it to fill, and after this take it for a rollback (see jobengine.feed).
    event_settle_grace: float = 5.0
    claim_max_wait: float = 30.0  # the longest long-poll of a remote worker's claim
    # -- task packs (jobengine.packs; docs/packs.md) --
    packs_four_eyes: str = "auto"  # on | off | auto: on unless api_host is a loopback address
    packs_max_bytes: int = 16 * 1024 * 1024  # largest pack archive accepted (compressed)
    worker_packs: tuple[str, ...] = ()  # name@version (or @stable) of approved packs a worker loads
    packs_cache_dir: str = ""  # where workers unpack packs, by digest ("": ~/.cache/jobengine/packs)
    #: Where pack content lives: filesystem | s3 | database; "": filesystem on SQLite, database on PostgreSQL
    #: (s3 on either when packs_s3_bucket is set). See jobengine.packs.storage and docs/packs.md.
    packs_blob_store: str = ""
    packs_blob_dir: str = ""  # filesystem: the directory ("": beside the SQLite file, <database>.packs)
    packs_s3_bucket: str = ""  # s3: bucket, key prefix, endpoint ("": AWS) and region; credentials: AWS_* env
    packs_s3_prefix: str = ""
    packs_s3_endpoint: str = ""
    packs_s3_region: str = ""
    dashboard_refresh_seconds: float = 1.0  # how often the dashboard's live overview re-reads its figures
    dashboard_session_seconds: float = 43200.0  # a dashboard login lasts this long (ended sooner by logout / revoke)
    #: Keys that encrypt secrets at rest (jobengine.secretbox): the first encrypts, every one decrypts. Empty:
    #: SQLite keeps its own in <database>.secretkeys (made on first use); PostgreSQL needs them to store a secret.
    secret_keys: tuple[str, ...] = field(default=(), repr=False)
    # -- webhooks (jobengine.webhooks; checked by webhooks/config.py) --
    webhook_rate_limiter: str = "local"  # noop | local (one process) | redis (shared: webhook_redis_url)
    webhook_redis_url: str = ""
    webhook_rate_limit: int = 120  # deliveries per webhook_rate_window per endpoint (an endpoint may override)
    webhook_rate_window: float = 60.0
    #: The limiter counts each window this much longer, so that a receiver whose deliveries arrive with a
    #: latency varying by less than it never sees more than the limit in one window.
    webhook_rate_margin: float = 0.1
    webhook_timeout: float = 10.0  # seconds per attempt (connect + answer)
    webhook_retry_base: float = 5.0  # first retry delay; doubles per failed attempt, at most the max delay
    webhook_retry_max_delay: float = 3600.0
    webhook_retry_window: float = 3 * 86400.0  # a delivery is retried for this long, then given up
    webhook_retry_jitter: float = 0.2  # each delay is multiplied by a random factor in [1 - j, 1 + j]
    webhook_poll_interval: float = 1.0  # longest sleep of the dispatcher between passes
    webhook_concurrency: int = 10  # deliveries in flight per process
    webhook_secret_overlap: float = 86400.0  # after a rotation the previous secret still signs this long
    webhook_allow_hosts: tuple[str, ...] = ()  # host names / CIDRs exempt from the SSRF checks (dev, tests)
    inbound_max_body_bytes: int = 65536  # an inbound event's JSON body; larger ones get 413
    inbound_tolerance: float = 300.0  # a Standard Webhooks timestamp further than this from now is refused
    #: How long an inbound event's id (webhook-id, or the signature of a sha256= signed body) is remembered:
    #: the same id again within it is a replay, refused.
    inbound_replay_window: float = 86400.0
    # -- the queue transport: the ``queue:`` section (database | redis | nats), see jobengine.delivery.config --
    queue: QueueConfig = field(default_factory=QueueConfig)
    # -- flow control (jobengine.flow; docs/flow.md) --
    flow_limits: str = ""  # JSON (or a YAML mapping): {queue: {rate, burst, concurrency, hard_limit, ...}}
    flow_soft_limit: int = 0  # every queue's default soft / hard depth limit (0: none)
    flow_hard_limit: int = 0
    flow_retry_after: float = 5.0  # the Retry-After of a refused enqueue
    flow_cache_seconds: float = 0.5  # how long depth counts and stored limits are trusted
    shed_depth: int = 0  # saturated from this many runnable jobs in all, running jobs, p95 wait (0: off)
    shed_in_flight: int = 0
    shed_latency: float = 0.0
    shed_min_priority: int = 0  # while saturated, new jobs below this priority are refused (503)
    scale_target_seconds: float = 60.0  # the drain time the recommended worker count aims at

    def __post_init__(self) -> None:
        positive = ("lease_seconds", "poll_interval", "rescue_interval", "retention_interval", "liveness_interval")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be a positive number of seconds")
        if self.postgres_pool_size < 1:
            raise ConfigError("postgres_pool_size: must be at least 1")
        if self.worker_concurrency < 1:
            raise ConfigError("worker_concurrency: must be at least 1")
        if self.grace_period < 0:
            raise ConfigError("grace_period: must be >= 0 seconds")
        if not 0 <= self.worker_flush_spacing <= 10:
            raise ConfigError("worker_flush_spacing: must be between 0 and 10 seconds")
        if self.delete_after < self.stale_after:
            raise ConfigError("delete_after: must be >= stale_after")
        if self.heartbeat_interval and self.heartbeat_interval >= self.lease_seconds:
            raise ConfigError("heartbeat_interval: must be shorter than lease_seconds")
        if self.sqlite_synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigError("sqlite_synchronous: one of OFF, NORMAL, FULL, EXTRA")
        if self.sqlite_worker_synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigError("sqlite_worker_synchronous: one of OFF, NORMAL, FULL, EXTRA")
        scheduler = ("scheduler_poll_interval", "scheduler_lease_seconds", "scheduler_reconcile_interval")
        for name in scheduler:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be a positive number of seconds")
        if self.scheduler_misfire_grace <= self.scheduler_lease_seconds + self.scheduler_poll_interval:
            raise ConfigError(
                "scheduler_misfire_grace: must be longer than scheduler_lease_seconds + scheduler_poll_interval "
                "(else a leader fail-over would count on-time ticks as missed)"
            )
        if self.signature_cache_seconds < 0:
            raise ConfigError("signature_cache_seconds: must be >= 0 seconds")
        more_positive = (
            "sse_keepalive",
            "sse_poll_interval",
            "event_settle_grace",
            "idempotency_ttl",
            "claim_max_wait",
            "dashboard_refresh_seconds",
            "dashboard_session_seconds",
        )
        for name in more_positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be a positive number of seconds")
        if self.run_retention < 0:
            raise ConfigError("run_retention: must be >= 0 seconds (0 keeps runs forever)")
        if self.event_retention < 0 or self.api_key_cache_seconds < 0:
            raise ConfigError("event_retention: must be >= 0 seconds" if self.event_retention < 0
                              else "api_key_cache_seconds: must be >= 0 seconds")  # fmt: skip
        if not 0 <= self.api_port < 65536:
            raise ConfigError("api_port: must be a TCP port (0-65535; 0: any free port)")
        if self.api_max_body_bytes < 1024:
            raise ConfigError("api_max_body_bytes: must be at least 1024")
        if self.packs_four_eyes not in ("on", "off", "auto"):
            raise ConfigError("packs_four_eyes: one of on, off, auto")
        if self.packs_max_bytes < 1024:
            raise ConfigError("packs_max_bytes: must be at least 1024")
        if self.sse_buffer < 1:
            raise ConfigError("sse_buffer: must be at least 1")
        check_blob_settings(self)
        check_webhook_settings(self)
        check_flow_settings(self)

    @property
    def heartbeat_every(self) -> float:
        return self.heartbeat_interval or self.lease_seconds / 3

    @classmethod
    def load(cls, path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
        """YAML file (if given or ``./jobengine.yaml`` exists), then ``JOBENGINE_*`` overrides."""
        values: dict[str, Any] = {}
        candidate = Path(path) if path else Path("jobengine.yaml")
        if path and not candidate.exists():
            raise ConfigError(f"config: {candidate} does not exist")
        if candidate.exists():
            import yaml  # only when a file is read (docs/decisions/0023-lazy-imports.md)

            try:
                loaded = yaml.safe_load(candidate.read_text()) or {}
            except yaml.YAMLError as exc:
                raise ConfigError(f"config: {candidate} is not valid YAML: {exc}") from None
            if not isinstance(loaded, dict):
                raise ConfigError(f"config: {candidate} must hold a mapping")
            values.update(loaded)
        return cls.from_mapping(values, env if env is not None else os.environ)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Settings:
        known = {f.name: f for f in fields(cls)}
        merged: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                raise ConfigError(f"{key}: unknown setting (known: {', '.join(sorted(known))})")
            merged[key] = value
        for name in known:
            raw = (env or {}).get("JOBENGINE_" + name.upper())
            if raw is not None:
                merged[name] = raw
        base = cls()
        coerced: dict[str, Any] = {}
        if "queue" in merged or any(k.startswith("JOBENGINE_QUEUE_") for k in env or {}):
            coerced["queue"] = QueueConfig.load(merged.pop("queue", None), env)
        for key, value in merged.items():
            default = getattr(base, key)
            try:
                if isinstance(default, bool):
                    coerced[key] = _boolean(value)
                elif isinstance(default, tuple):
                    items = value.split(",") if isinstance(value, str) else value
                    coerced[key] = tuple(str(v).strip() for v in items if str(v).strip())
                elif isinstance(default, float):
                    coerced[key] = float(value)
                elif isinstance(default, int):
                    coerced[key] = int(value)
                else:
                    coerced[key] = json.dumps(value) if isinstance(value, dict | list) else str(value)
            except (TypeError, ValueError):
                raise ConfigError(f"{key}: {value!r} is not a valid {type(default).__name__}") from None
        return replace(base, **coerced)


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(text)
