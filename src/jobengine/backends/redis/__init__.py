"""The Redis / Valkey queue transport (Streams with consumer groups). Needs the ``redis`` extra."""

from jobengine.backends.redis.transport import RedisTransport

__all__ = ["RedisTransport"]
