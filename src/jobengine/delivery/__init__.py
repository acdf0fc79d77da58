"""Delivering work through a queue transport (database, Redis, NATS): the outbox relay, the worker's source
over a broker, metrics and health; the configuration is :mod:`jobengine.core.queue_config`. See
``docs/brokers.md``."""
