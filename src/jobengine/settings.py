"""Settings: read once at the edge (CLI) from ``jobengine.yaml`` and ``JOBENGINE_*``, then passed down frozen.

Environment overrides use the field name upper-cased: ``JOBENGINE_DATABASE=/data/jobs.db``,
``JOBENGINE_WORKER_CONCURRENCY=20``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from jobengine.core.flow.config import parse_flow_limits
from jobengine.core.flow.pressure import ShedPolicy
from jobengine.core.queue_config import QueueConfig
from jobengine.core.redis_url import is_sentinel_url, parse_sentinel_url
from jobengine.errors import ConfigError

_T = TypeVar("_T")


def setting(default: _T, doc: str) -> _T:
    """A field with its default and the meaning ``settings_doc`` renders into docs/configuration.md."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting, with its meaning in ``metadata["doc"]``: ``python -m jobengine.settings_doc`` renders them
    into docs/configuration.md, and a test holds that file equal to its output. Frozen: change one with
    ``dataclasses.replace``. Usage::

        settings = Settings(database="postgresql://localhost/jobs", worker_concurrency=20)
        settings = Settings.load("jobengine.yaml")     # the file, then JOBENGINE_* variables
    """

    # -- storage --
    state_dir: str = setting(
        ".jobengine",
        "the directory of local state: the default SQLite database and what lives beside it (the dev key "
        "of `jobengine up`, pack content, worker locks, the secret key file) and the pack cache; made on "
        "first use with a `.gitignore` of `*` inside, so none of it reaches git",
    )
    database: str = setting(
        "",
        "a SQLite file path (`./jobs.db`), `sqlite:///path`, `postgresql://...`, or `memory`: SQLite in a "
        "temporary file, gone when the process ends; empty: `jobengine.db` in `state_dir`",
    )
    database_direct: str = setting(
        "",
        "PostgreSQL behind a pooler in transaction mode (PgBouncer): `database` names the pooler, this the "
        "server (`postgresql://...`), for what needs a session of its own (LISTEN, advisory-lock "
        "leadership, worker liveness, migrations); the pooled connections then prepare no statement. "
        "Empty: everything uses `database`",
    )
    sqlite_synchronous: str = setting(
        "FULL",
        "SQLite's durability for enqueues and operator actions: `FULL` survives power loss, `NORMAL` "
        "survives process crashes and is faster (`OFF`, `EXTRA` also accepted)",
    )
    #: Never more than sqlite_synchronous; see backends/sqlite/store.py.
    sqlite_worker_synchronous: str = setting(
        "NORMAL",
        "the level of a worker's own transitions (claim, heartbeat, complete, fail, release): NORMAL "
        "loses no acknowledged job on power loss, only worker progress, which is redone",
    )
    postgres_schema: str = setting(
        "jobengine", "the schema that holds jobengine's tables in a `postgresql://` database"
    )
    postgres_pool_size: int = setting(
        10,
        "PostgreSQL: pooled sessions per process and event loop (plus one for that loop's calls in "
        "sequence, and the notifier's)",
    )
    # -- logging (the command line's; a library user configures logging as usual) --
    log_level: str = setting("info", "`debug`, `info` (a line per job start and end), `warning`, `error` or `critical`")
    log_format: str = setting(
        "text", "`text`, or `json`: one object per line with time, level, logger, message and the job's fields"
    )
    # -- workers --
    worker_concurrency: int = setting(50, "jobs in flight per worker process")
    worker_queues: tuple[str, ...] = setting(
        (), "queues a worker claims from; empty: every queue of the registered tasks"
    )
    lease_seconds: float = setting(30.0, "a job whose worker stops heartbeating for this long runs again elsewhere")
    heartbeat_interval: float = setting(
        0.0, "how often leases are extended and progress saved; 0: a third of the lease"
    )
    poll_interval: float = setting(1.0, "the longest an idle worker sleeps without a notification")
    rescue_interval: float = setting(5.0, "how often expired leases are swept")
    #: The liveness their store holds for them: jobengine.ports.workers.
    liveness_interval: float = setting(
        0.5,
        "how often a worker looks for workers whose process is gone; their running jobs run again at "
        "once instead of after their lease",
    )
    refuse_unknown_tasks: bool = setting(
        False,
        "refuse an enqueue whose task no live worker runs and this process does not know (422 naming "
        "the task); off: such a job waits, and says why",
    )
    tracing: bool = setting(
        False,
        "OpenTelemetry spans for each enqueue, job run and HTTP request, joined into one trace through the "
        "job and the `traceparent` header (needs the `otel` extra and a tracer provider; docs/tracing.md)",
    )
    fetch_batch: int = setting(0, "jobs a worker claims per fetch; 0: up to its free slots and prefetch")
    #: WorkerOptions.prefetch.
    worker_prefetch: int = setting(
        500,
        "jobs a worker claims beyond its free slots, started as slots free up: at most this many, and only "
        "those it expects to start within 50 ms by how long its recent jobs ran (none for long jobs); one "
        "not started within a second goes back to the queue. 0: claim only free slots",
    )
    grace_period: float = setting(30.0, "how long a stopping worker (SIGTERM) waits for its running jobs")
    #: WorkerOptions.flush_spacing.
    worker_flush_spacing: float = setting(
        0.05,
        "a worker reports finished jobs at most once per this many seconds: fewer commits, a job's "
        "outcome stored up to this much later (a job others depend on is stored at once); 0: at once",
    )
    worker_metrics_port: int = setting(
        0,
        "`jobengine worker` serves Prometheus metrics of its jobs on this port, at `/metrics`, without a "
        "key (counts and durations by queue and task; [scrape config](workers.md#metrics)); 0: none",
    )
    worker_metrics_host: str = setting(
        "0.0.0.0", "the address the worker's metrics listen on (`0.0.0.0`: every interface, for a Prometheus elsewhere)"
    )
    # -- retention --
    retention_interval: float = setting(60.0, "how often finished jobs are marked stale and deleted")
    stale_after: float = setting(7 * 86400.0, "seconds after it finished that a job becomes `stale`")
    delete_after: float = setting(
        30 * 86400.0, "seconds after it finished that a stale job is deleted (at least `stale_after`)"
    )
    # -- the scheduler (jobengine scheduler / up) --
    scheduler_poll_interval: float = setting(
        1.0, "longest sleep between scheduler passes; how soon a new schedule is seen"
    )
    scheduler_lease_seconds: float = setting(
        5.0, "the SQLite scheduler leader's lease (PostgreSQL uses an advisory lock)"
    )
    #: Longer than a leader fail-over (the lease plus a poll), so a fail-over loses no tick.
    scheduler_misfire_grace: float = setting(
        15.0,
        "a tick seen later than this after its time counts as missed (misfire policy); sooner, it "
        "fires as on time. Longer than `scheduler_lease_seconds` + `scheduler_poll_interval`",
    )
    scheduler_reconcile_interval: float = setting(10.0, "how often scheduler runs are checked against their jobs")
    signature_cache_seconds: float = setting(
        2.0, "a failure signature marked non-retryable in another process applies within this time"
    )
    event_retention: float = setting(
        0.0, "seconds events are kept (0: forever); an SSE client resuming from older gets `reset`"
    )
    run_retention: float = setting(30 * 86400.0, "seconds ended runs and tick records are kept (0: forever)")
    # -- the HTTP API (jobengine serve / up) --
    api_host: str = setting(
        "127.0.0.1", "where the API listens (not a loopback address: refused while no API key exists)"
    )
    api_port: int = setting(8080, "the API's TCP port (0: any free port)")
    api_max_body_bytes: int = setting(1_048_576, "larger request bodies get 413")
    api_key_cache_seconds: float = setting(5.0, "an API key revoked in another process is refused within this time")
    idempotency_ttl: float = setting(86400.0, "how long a POST's first answer is replayed for its Idempotency-Key")
    sse_keepalive: float = setting(15.0, "seconds between keep-alive comments on an idle event stream")
    sse_buffer: int = setting(1000, "events buffered per stream; a client that stops reading is dropped past it")
    sse_poll_interval: float = setting(1.0, "an idle stream looks for other processes' events this often")
    #: See jobengine.feed.
    event_settle_grace: float = setting(
        5.0,
        "PostgreSQL: a hole in the event ids younger than this may be a transaction still open; SSE "
        "streams and the webhook fan-out wait for it to fill, and after this take it for a rollback",
    )
    claim_max_wait: float = setting(30.0, "the longest long-poll of a remote worker's claim")
    # -- task packs (jobengine.packs; docs/packs.md) --
    packs_four_eyes: str = setting(
        "auto",
        "`on`, `off` or `auto` (on unless `api_host` is a loopback address): an uploader cannot approve their own pack",
    )
    packs_max_bytes: int = setting(16 * 1024 * 1024, "largest pack archive accepted (compressed)")
    worker_packs: tuple[str, ...] = setting((), "`name@version` (or `name@stable`) of approved packs a worker loads")
    packs_cache_dir: str = setting("", "where workers unpack packs, by digest (empty: `pack-cache` in `state_dir`)")
    #: See blob_store_kind below and docs/packs.md.
    packs_blob_store: str = setting(
        "",
        "where pack content lives: `filesystem`, `s3` or `database`; empty: filesystem on SQLite, "
        "database on PostgreSQL (s3 on either when `packs_s3_bucket` is set)",
    )
    packs_blob_dir: str = setting(
        "", "filesystem blob store: the directory (empty: beside the SQLite file, `<database>.packs`)"
    )
    packs_s3_bucket: str = setting(
        "",
        "s3 blob store: the bucket (`pip install 'jobengine[s3]'`; credentials from the usual AWS_* "
        "environment or profile)",
    )
    packs_s3_prefix: str = setting("", "s3 blob store: the key prefix")
    packs_s3_endpoint: str = setting("", "s3 blob store: an S3-compatible endpoint (empty: AWS)")
    packs_s3_region: str = setting("", "s3 blob store: the region")
    # -- the dashboard and secrets at rest --
    dashboard_refresh_seconds: float = setting(1.0, "how often the dashboard's live overview re-reads its figures")
    dashboard_session_seconds: float = setting(
        43200.0, "a dashboard login lasts this long (ended sooner by logout or revoking its key)"
    )
    #: jobengine.secretbox.
    secret_keys: tuple[str, ...] = field(
        default=(),
        repr=False,
        metadata={
            "doc": "keys (`jobengine secrets generate-key`) that encrypt webhook and inbound hook secrets at "
            "rest: the first encrypts, every one decrypts. Empty: SQLite keeps its own in "
            "`<database>.secretkeys` (made on first use); PostgreSQL needs them to store a secret. Rotate: "
            "put a new key first, run `jobengine secrets rotate`, then drop the old one"
        },
    )
    # -- webhooks (jobengine.webhooks; checked by webhooks/config.py) --
    webhook_rate_limiter: str = setting(
        "local", "`noop`, `local` (one process) or `redis` (shared by every process: `webhook_redis_url`)"
    )
    webhook_redis_url: str = setting("", "the Redis of the `redis` rate limiter")
    webhook_rate_limit: int = setting(
        120, "deliveries per `webhook_rate_window` per endpoint (an endpoint may override)"
    )
    webhook_rate_window: float = setting(60.0, "the rate limit's window, in seconds")
    webhook_rate_margin: float = setting(
        0.1,
        "the limiter counts each window this much longer, so that a receiver whose deliveries arrive "
        "with a latency varying by less than it never sees more than the limit in one window",
    )
    webhook_timeout: float = setting(10.0, "seconds per delivery attempt (connect + answer)")
    webhook_retry_base: float = setting(
        5.0, "first retry delay; doubles per failed attempt, at most `webhook_retry_max_delay`"
    )
    webhook_retry_max_delay: float = setting(3600.0, "the longest delay between retries")
    webhook_retry_window: float = setting(3 * 86400.0, "a delivery is retried for this long, then given up")
    webhook_retry_jitter: float = setting(0.2, "each delay is multiplied by a random factor in [1 - j, 1 + j]")
    webhook_poll_interval: float = setting(1.0, "longest sleep of the webhook dispatcher between passes")
    webhook_concurrency: int = setting(10, "deliveries in flight per process")
    webhook_secret_overlap: float = setting(
        86400.0, "after a rotation the previous signing secret still signs this long"
    )
    webhook_allow_hosts: tuple[str, ...] = setting(
        (), "host names / CIDRs exempt from the SSRF checks (development, tests: `localhost`)"
    )
    inbound_max_body_bytes: int = setting(65536, "an inbound event's JSON body; larger ones get 413")
    inbound_tolerance: float = setting(300.0, "a Standard Webhooks timestamp further than this from now is refused")
    inbound_replay_window: float = setting(
        86400.0,
        "how long an inbound event's id (webhook-id, or the signature of a `sha256=` signed body) is "
        "remembered: the same id again within it is a replay, refused (409)",
    )
    # -- the queue transport: the ``queue:`` section, see jobengine.core.queue_config --
    queue: QueueConfig = field(
        default_factory=QueueConfig,
        metadata={
            "doc": "which transport delivers work (`database`, `redis`, `nats`) and how: [below](#the-queue-section)"
        },
    )
    # -- flow control (jobengine.core.flow; docs/flow.md) --
    flow_limits: str = setting("", "JSON (or a YAML mapping): `{queue: {rate, burst, concurrency, hard_limit, ...}}`")
    flow_soft_limit: int = setting(
        0, "every queue's default soft depth limit: past it enqueues are accepted with a pressure warning (0: none)"
    )
    flow_hard_limit: int = setting(
        0, "every queue's default hard depth limit: a batch that would pass it is refused with 429 (0: none)"
    )
    flow_retry_after: float = setting(5.0, "the Retry-After of a refused enqueue")
    flow_cache_seconds: float = setting(0.5, "how long depth counts and stored limits are trusted")
    shed_depth: int = setting(0, "load shedding: saturated from this many runnable jobs in all (0: off)")
    shed_in_flight: int = setting(0, "load shedding: saturated from this many running jobs (0: off)")
    shed_latency: float = setting(0.0, "load shedding: saturated from this p95 wait before start, in seconds (0: off)")
    shed_min_priority: int = setting(0, "while saturated, new jobs below this priority are refused (503)")
    scale_target_seconds: float = setting(60.0, "the drain time the recommended worker count aims at")

    def __post_init__(self) -> None:
        if not self.state_dir.strip():
            raise ConfigError("state_dir: give a directory (the default is .jobengine)")
        if not self.database:  # resolved once, so every reader of `database` sees the file it names
            object.__setattr__(self, "database", str(Path(self.state_dir) / DATABASE_FILE))
        _refuse(self, _not_positive, _POSITIVE, "lease_seconds", "poll_interval", "rescue_interval",
                "retention_interval", "liveness_interval", "scheduler_poll_interval", "scheduler_lease_seconds",
                "scheduler_reconcile_interval", "sse_keepalive", "sse_poll_interval", "event_settle_grace",
                "idempotency_ttl", "claim_max_wait", "dashboard_refresh_seconds", "dashboard_session_seconds",
                "webhook_rate_window", "webhook_timeout", "webhook_retry_base", "webhook_retry_max_delay",
                "webhook_retry_window", "webhook_poll_interval", "inbound_tolerance", "flow_retry_after",
                "scale_target_seconds")  # fmt: skip
        _refuse(self, _negative, "must be >= 0 seconds", "grace_period", "signature_cache_seconds", "event_retention",
                "api_key_cache_seconds", "webhook_secret_overlap", "shed_latency", "flow_cache_seconds")  # fmt: skip
        _refuse(self, lambda v: v < 0, "must be >= 0", "worker_prefetch", "fetch_batch")
        _refuse(self, lambda v: v < 1, "must be at least 1", "postgres_pool_size", "worker_concurrency", "sse_buffer",
                "webhook_rate_limit", "webhook_concurrency")  # fmt: skip
        _refuse(self, lambda v: v < 1024, "must be at least 1024", "api_max_body_bytes", "packs_max_bytes",
                "inbound_max_body_bytes")  # fmt: skip
        _refuse(self, lambda v: v.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"),
                "one of OFF, NORMAL, FULL, EXTRA", "sqlite_synchronous", "sqlite_worker_synchronous")  # fmt: skip
        if not 0 <= self.worker_flush_spacing <= 10:
            raise ConfigError("worker_flush_spacing: must be between 0 and 10 seconds")
        if self.delete_after < self.stale_after:
            raise ConfigError("delete_after: must be >= stale_after")
        if self.heartbeat_interval and self.heartbeat_interval >= self.lease_seconds:
            raise ConfigError("heartbeat_interval: must be shorter than lease_seconds")
        if self.scheduler_misfire_grace <= self.scheduler_lease_seconds + self.scheduler_poll_interval:
            raise ConfigError(
                "scheduler_misfire_grace: must be longer than scheduler_lease_seconds + scheduler_poll_interval "
                "(else a leader fail-over would count on-time ticks as missed)"
            )
        if self.run_retention < 0:
            raise ConfigError("run_retention: must be >= 0 seconds (0 keeps runs forever)")
        if not 0 <= self.api_port < 65536:
            raise ConfigError("api_port: must be a TCP port (0-65535; 0: any free port)")
        if not 0 <= self.worker_metrics_port < 65536:
            raise ConfigError("worker_metrics_port: must be a TCP port (1-65535; 0: no metrics)")
        if self.packs_four_eyes not in ("on", "off", "auto"):
            raise ConfigError("packs_four_eyes: one of on, off, auto")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ConfigError(f"log_level: one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"log_format: one of {', '.join(LOG_FORMATS)}, not {self.log_format!r}")
        if self.database_direct and not (
            self.database.startswith(POSTGRES_SCHEMES) and self.database_direct.startswith(POSTGRES_SCHEMES)
        ):
            raise ConfigError("database_direct: a postgresql:// URL, and only with a postgresql:// database")
        _check_blobs(self)
        _check_webhooks(self)
        _refuse(self, _negative, "must be >= 0 (0: off)", "flow_soft_limit", "flow_hard_limit", "shed_depth",
                "shed_in_flight")  # fmt: skip
        if self.flow_soft_limit and self.flow_hard_limit and self.flow_soft_limit > self.flow_hard_limit:
            raise ConfigError("flow_soft_limit: must not be above flow_hard_limit")
        parse_flow_limits(self.flow_limits)

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
        # Built anew rather than replaced on the defaults: an unset `database` then follows `state_dir`.
        return cls(**coerced)


#: The SQLite file of the default database, in ``state_dir``.
DATABASE_FILE = "jobengine.db"
#: What ``state_dir/.gitignore`` holds: everything in the directory is ignored, itself included.
STATE_DIR_GITIGNORE = "# Made by jobengine: local state (database, keys, caches) that no repository should hold.\n*\n"


def prepare_state_dir(s: Settings) -> Path:
    """``state_dir``, made if it is missing, with a ``.gitignore`` of ``*`` inside (as pytest does for its
    cache) so that a database, a dev key or a cache made in a project never shows in its ``git status``."""
    path = Path(s.state_dir).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    ignore = path / ".gitignore"
    if not ignore.exists():
        ignore.write_text(STATE_DIR_GITIGNORE)
    return path


def in_state_dir(s: Settings, file: str | Path) -> bool:
    """Whether ``file`` lies directly in ``state_dir`` (so opening it should make the directory first)."""
    return Path(file).expanduser().absolute().parent == Path(s.state_dir).expanduser().absolute()


#: The URL schemes of a PostgreSQL ``database``.
POSTGRES_SCHEMES = ("postgres://", "postgresql://")
BLOB_STORES = ("filesystem", "s3", "database")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("text", "json")


def blob_store_kind(s: Settings, store_kind: str) -> str:
    """The blob store that keeps pack content beside a store of ``store_kind`` (sqlite, postgres).

    - ``filesystem``: files under ``packs_blob_dir`` (default: beside the SQLite file, ``<database>.packs``).
      The default on SQLite: the data stays in the data directory, and the database file stays small.
    - ``database``: the store's ``pack_blobs`` table. The default on PostgreSQL: a directory is not shared
      between hosts, and the database is the one thing every host of a PostgreSQL deployment shares.
    - ``s3``: an S3-compatible bucket (``packs_s3_bucket``, optional ``packs_s3_prefix``,
      ``packs_s3_endpoint``, ``packs_s3_region``; credentials from the AWS environment). Chosen by default
      when a bucket is set.
    """
    if s.packs_blob_store:
        return s.packs_blob_store
    if s.packs_s3_bucket:
        return "s3"
    return "filesystem" if store_kind == "sqlite" else "database"


def shed_policy(s: Settings) -> ShedPolicy:
    """The load-shedding policy the flow settings describe."""
    return ShedPolicy(s.shed_depth, s.shed_in_flight, s.shed_latency, s.shed_min_priority, s.flow_retry_after)


def _check_blobs(s: Settings) -> None:
    if s.packs_blob_store not in ("", *BLOB_STORES):
        raise ConfigError(f"packs_blob_store: one of {', '.join(BLOB_STORES)} (or empty: the store's default), "
                          f"not {s.packs_blob_store!r}")  # fmt: skip
    if s.packs_blob_store == "s3" and not s.packs_s3_bucket:
        raise ConfigError("packs_s3_bucket: required when packs_blob_store is s3")
    if s.packs_s3_prefix.startswith("/"):
        raise ConfigError("packs_s3_prefix: a key prefix, without a leading '/'")
    if s.packs_s3_endpoint and not s.packs_s3_endpoint.startswith(("http://", "https://")):
        raise ConfigError("packs_s3_endpoint: an http:// or https:// URL")


def _check_webhooks(s: Settings) -> None:
    if s.webhook_rate_limiter not in ("noop", "local", "redis"):
        raise ConfigError("webhook_rate_limiter: one of noop, local, redis")
    if s.webhook_rate_limiter == "redis" and not s.webhook_redis_url:
        raise ConfigError("webhook_redis_url: the redis rate limiter needs a Redis URL (redis://host:6379/0)")
    if is_sentinel_url(s.webhook_redis_url):
        parse_sentinel_url(s.webhook_redis_url, "webhook_redis_url")
    if not 0 <= s.webhook_retry_jitter < 1:
        raise ConfigError("webhook_retry_jitter: must be from 0 to below 1 (a fraction of the delay)")
    if not 0 <= s.webhook_rate_margin <= 10:
        raise ConfigError("webhook_rate_margin: must be from 0 to 10 seconds")
    # A signed timestamp is accepted from tolerance before to tolerance after its time: its id must be
    # remembered at least that long, or a replay late in that span would pass.
    if s.inbound_replay_window < 2 * s.inbound_tolerance:
        raise ConfigError("inbound_replay_window: must be at least twice inbound_tolerance")
    if s.secret_keys:
        from jobengine.secretbox import SecretBox

        SecretBox(s.secret_keys)  # a malformed key fails here, naming the setting
    if s.webhook_allow_hosts:  # only then are the webhook values loaded: most processes never send a webhook
        from jobengine.core.webhooks.addresses import AddressPolicy

        try:
            AddressPolicy.from_entries(s.webhook_allow_hosts)
        except ValueError as exc:
            raise ConfigError(f"webhook_allow_hosts: {exc}") from None


_POSITIVE = "must be a positive number of seconds"


def _not_positive(value: Any) -> bool:
    return bool(value <= 0)


def _negative(value: Any) -> bool:
    return bool(value < 0)


def _refuse(s: Settings, bad: Callable[[Any], bool], rule: str, *names: str) -> None:
    """ConfigError ``name: rule`` for the first of ``names`` whose value is ``bad``."""
    for name in names:
        if bad(getattr(s, name)):
            raise ConfigError(f"{name}: {rule}")


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(text)
