"""The ``queue:`` section of ``jobengine.yaml``: which transport delivers work (``kind``: database, redis,
nats), and how. Keys are camelCase, each optional with the default :class:`QueueConfig` shows; a logical
queue block (``planner`` / ``runner``) given in part keeps the defaults of the keys it leaves out. Every key,
its meaning, its environment override and examples are in docs/configuration.md ("The queue: section"),
rendered by :mod:`jobengine.settings_doc` from these classes and ``QUEUE_DOCS``.

A bad value raises :class:`ConfigError` naming its path (``queue.nats.runner.stream: ...``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final, TypeVar

from jobengine.core.redis_url import FORM as SENTINEL_FORM
from jobengine.core.redis_url import is_sentinel_url, parse_sentinel_url
from jobengine.errors import ConfigError

KINDS: Final = ("database", "redis", "nats")
QUEUES: Final = ("planner", "runner")

_NATS_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}$")  # stream and consumer names: no dots, spaces, wildcards
_NATS_SUBJECT = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")  # literal subjects only

_REDIS_SCHEMES: Final = ("redis://", "rediss://", "unix://", "redis+sentinel://")

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class NatsQueue:
    stream: str
    subject: str
    durable_consumer: str
    dead_letter_stream: str
    dead_letter_subject: str

    def __post_init__(self) -> None:
        for name in ("stream", "durable_consumer", "dead_letter_stream"):
            if not _NATS_NAME.match(getattr(self, name)):
                raise ConfigError(f"{camel_key(name)}: letters, digits, - and _ only (got {getattr(self, name)!r})")
        for name in ("subject", "dead_letter_subject"):
            if not _NATS_SUBJECT.match(getattr(self, name)):
                raise ConfigError(
                    f"{camel_key(name)}: a literal subject like scheduler.runner (got {getattr(self, name)!r})"
                )
        if self.subject == self.dead_letter_subject or self.stream == self.dead_letter_stream:
            raise ConfigError("deadLetterStream: the dead-letter stream and subject must differ from the queue's")


@dataclass(frozen=True, slots=True)
class RedisQueue:
    stream: str
    consumer_group: str
    dead_letter_stream: str
    idempotency_key_prefix: str

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, str) or not value or len(value) > 200:
                raise ConfigError(f"{camel_key(f.name)}: a non-empty key name of at most 200 characters")
        if self.stream == self.dead_letter_stream:
            raise ConfigError("deadLetterStream: must differ from the queue's stream")


def nats_servers(url: str) -> list[str]:
    """The server URLs of a ``nats.url`` (one, or several comma-separated), in the order given."""
    return [u.strip() for u in url.split(",") if u.strip()]


def _nats_queue(name: str, stream: str) -> NatsQueue:
    return NatsQueue(stream, f"scheduler.{name}", f"scheduler-{name}s", f"{stream}_DEAD", f"scheduler.{name}.dead")


def _redis_queue(name: str) -> RedisQueue:
    return RedisQueue(f"scheduler:{name}", f"scheduler-{name}s", f"scheduler:{name}:dead", f"scheduler:{name}:idemp:")


@dataclass(frozen=True, slots=True)
class NatsConfig:
    #: One server, or a cluster's servers comma-separated: the client connects to one and fails over to another.
    url: str = "nats://127.0.0.1:4222"
    planner: NatsQueue = field(default_factory=lambda: _nats_queue("planner", "SCHEDULER_PLANNER"))
    runner: NatsQueue = field(default_factory=lambda: _nats_queue("runner", "SCHEDULER_RUNNER"))
    #: Deliveries a consumer lets be in flight at once (JetStream's MaxAckPending).
    max_ack_pending: int = 20_000
    #: Copies JetStream keeps of each stream (and its consumers) on different servers of a cluster (1 to 5).
    replicas: int = 1

    @property
    def servers(self) -> list[str]:
        return nats_servers(self.url)


@dataclass(frozen=True, slots=True)
class RedisConfig:
    url: str = "redis://127.0.0.1:6379/0"
    planner: RedisQueue = field(default_factory=lambda: _redis_queue("planner"))
    runner: RedisQueue = field(default_factory=lambda: _redis_queue("runner"))

    def __post_init__(self) -> None:
        if is_sentinel_url(self.url):
            parse_sentinel_url(self.url, "url")


@dataclass(frozen=True, slots=True)
class QueueConfig:
    kind: str = "database"
    dead_letter_enabled: bool = True
    max_delivery_attempts: int = 5
    idempotency_window: float = 120.0
    sweep_after: float = 300.0
    nats: NatsConfig = field(default_factory=NatsConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"kind: one of {', '.join(KINDS)} (got {self.kind!r})")
        if not isinstance(self.max_delivery_attempts, int) or not 1 <= self.max_delivery_attempts <= 1000:
            raise ConfigError("maxDeliveryAttempts: an integer from 1 to 1000")
        if self.idempotency_window <= 0 or self.sweep_after <= 0:
            raise ConfigError("idempotencyWindow, sweepAfter: must be positive numbers of seconds")
        if self.nats.max_ack_pending < 1:
            raise ConfigError("nats.maxAckPending: must be at least 1")
        if self.kind == "redis" and not self.redis.url.lower().startswith(_REDIS_SCHEMES):
            raise ConfigError(
                f"redis.url: a redis://, rediss://, unix:// or {SENTINEL_FORM} URL (got {self.redis.url!r})"
            )
        if not 1 <= self.nats.replicas <= 5:
            raise ConfigError("nats.replicas: an integer from 1 to 5 (JetStream's limit)")
        if not self.nats.servers:
            raise ConfigError("nats.url: one server URL, or several comma-separated")

    @property
    def broker(self) -> bool:
        """True for the transports that deliver messages (redis, nats): jobs then go through the outbox."""
        return self.kind != "database"

    @classmethod
    def load(cls, value: object, env: Mapping[str, str] | None = None) -> QueueConfig:
        """From the ``queue:`` mapping of the YAML file (or a QueueConfig, or None), then ``env``."""
        if isinstance(value, QueueConfig):
            config = value
        elif value is None:
            config = cls()
        elif isinstance(value, Mapping):
            config = _parse(value)
        else:
            raise ConfigError(f"queue: expected a mapping, got {value!r}")
        return _apply_env(config, env or {})


# -- parsing -------------------------------------------------------------------------------------------


def camel_key(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _bool(path: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value.strip().lower() in ("true", "yes", "on", "1")
    raise ConfigError(f"{path}: expected true or false, got {value!r}")


def _coerce(path: str, default: object, value: object) -> object:
    try:
        if isinstance(default, bool):
            return _bool(path, value)
        if isinstance(default, int):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)  # type: ignore[call-overload]
        if isinstance(default, float):
            if isinstance(value, bool):
                raise ValueError
            return float(value)  # type: ignore[arg-type]
        if isinstance(default, str):
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise ValueError
            return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: {value!r} is not a valid {type(default).__name__}") from None
    raise AssertionError(path)


def _section(cls: type[C], base: C, values: Mapping[str, Any], path: str, nested: Mapping[str, Any]) -> C:
    """``base`` with ``values`` (camelCase keys) applied; keys in ``nested`` are parsed by their own function."""
    known = {camel_key(f.name): f.name for f in fields(cls)}  # type: ignore[arg-type]
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"{path}.{key}: unknown setting (known: {', '.join(sorted(known))})")
        name = known[key]
        if key in nested:
            changes[name] = nested[key](getattr(base, name), value, f"{path}.{key}")
        else:
            changes[name] = _coerce(f"{path}.{key}", getattr(base, name), value)
    try:
        return replace(base, **changes)  # type: ignore[type-var]
    except ConfigError as exc:
        raise ConfigError(f"{path}.{exc}") from None


def _mapping(path: str, value: object) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}: expected a mapping, got {value!r}")
    return value


def _nats_block(base: NatsQueue, value: object, path: str) -> NatsQueue:
    return _section(NatsQueue, base, _mapping(path, value), path, {})


def _redis_block(base: RedisQueue, value: object, path: str) -> RedisQueue:
    return _section(RedisQueue, base, _mapping(path, value), path, {})


def _nats(base: NatsConfig, value: object, path: str) -> NatsConfig:
    return _section(NatsConfig, base, _mapping(path, value), path, {"planner": _nats_block, "runner": _nats_block})


def _redis(base: RedisConfig, value: object, path: str) -> RedisConfig:
    values = dict(_mapping(path, value))
    # The original system's top-level keys name the planner's dead-letter stream and idempotency prefix.
    planner = dict(_mapping(f"{path}.planner", values.pop("planner", None)))
    for key in ("deadLetterStream", "idempotencyKeyPrefix"):
        if key in values:
            planner.setdefault(key, values.pop(key))
    if planner:
        values["planner"] = planner
    return _section(RedisConfig, base, values, path, {"planner": _redis_block, "runner": _redis_block})


def _parse(values: Mapping[str, Any]) -> QueueConfig:
    return _section(QueueConfig, QueueConfig(), values, "queue", {"nats": _nats, "redis": _redis})


#: The environment variables that override a key of the section, by the path of that key.
ENV_OVERRIDES: Final = {
    "JOBENGINE_QUEUE_KIND": ("kind",),
    "JOBENGINE_QUEUE_DEAD_LETTER_ENABLED": ("deadLetterEnabled",),
    "JOBENGINE_QUEUE_MAX_DELIVERY_ATTEMPTS": ("maxDeliveryAttempts",),
    "JOBENGINE_QUEUE_REDIS_URL": ("redis", "url"),
    "JOBENGINE_QUEUE_NATS_URL": ("nats", "url"),
    "JOBENGINE_QUEUE_NATS_REPLICAS": ("nats", "replicas"),
}


def _apply_env(config: QueueConfig, env: Mapping[str, str]) -> QueueConfig:
    for var, path in ENV_OVERRIDES.items():
        raw = env.get(var)
        if raw is None:
            continue
        if len(path) == 1:
            config = _section(QueueConfig, config, {path[0]: raw}, "queue", {})
        elif path[0] == "redis":
            config = replace(config, redis=_section(RedisConfig, config.redis, {path[1]: raw}, "queue.redis", {}))
        else:
            config = replace(config, nats=_section(NatsConfig, config.nats, {path[1]: raw}, "queue.nats", {}))
    return config
