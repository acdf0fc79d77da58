"""The NATS JetStream queue transport (durable pull consumers). Needs the ``nats`` extra."""

from jobengine.backends.nats.transport import NatsTransport

__all__ = ["NatsTransport"]
