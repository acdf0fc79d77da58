"""Delivering work through a queue transport (database, Redis, NATS): configuration, the outbox relay, the
worker's source over a broker, metrics and health. See ``docs/brokers.md``."""
