"""Opening the transports that the ``queue:`` settings name. The one module of ``delivery`` that names a
backend, and only when asked for it (the ``redis`` and ``nats`` extras are imported then, not before)."""

from __future__ import annotations

from collections.abc import Sequence

from jobengine.core.queue_config import QueueConfig
from jobengine.delivery.database import DatabaseTransport
from jobengine.errors import ConfigError
from jobengine.ports.store import Store
from jobengine.ports.transport import Transport, TransportOptions


def open_transport(
    config: QueueConfig, queue: str, options: TransportOptions, store: Store, job_queues: Sequence[str]
) -> Transport:
    """The transport of logical queue ``queue`` (planner / runner) of ``config.kind``. Raises ConfigError when
    the kind's extra is not installed."""
    if config.kind == "redis":
        try:
            from jobengine.backends.redis import RedisTransport
        except ImportError as exc:
            raise ConfigError(
                f"queue.kind: redis needs the redis extra: pip install 'jobengine[redis]' ({exc})"
            ) from None
        return RedisTransport(config.redis.url, queue, getattr(config.redis, queue), options)
    if config.kind == "nats":
        try:
            from jobengine.backends.nats import NatsTransport
        except ImportError as exc:
            raise ConfigError(f"queue.kind: nats needs the nats extra: pip install 'jobengine[nats]' ({exc})") from None
        return NatsTransport(
            config.nats.url, queue, getattr(config.nats, queue), options,
            max_ack_pending=config.nats.max_ack_pending, replicas=config.nats.replicas,
        )  # fmt: skip
    return DatabaseTransport(store, queue, job_queues, options)
