"""Choose the webhook store for a Store (called by ``Engine.webhook_store``, the composition root)."""

from __future__ import annotations

from jobengine.errors import ConfigError
from jobengine.ports.store import Store
from jobengine.ports.webhooks import WebhookStore


def webhook_store_for(store: Store) -> WebhookStore:
    from jobengine.backends.memory import MemoryStore
    from jobengine.backends.sqlite import SqliteStore

    if isinstance(store, MemoryStore):
        from jobengine.backends.memory.webhooks import MemoryWebhookStore

        return MemoryWebhookStore(store)
    if isinstance(store, SqliteStore):
        from jobengine.backends.sqlite.webhooks import sqlite_webhook_store

        return sqlite_webhook_store(store)
    try:
        from jobengine.backends.postgres import PostgresStore
    except ImportError:  # no psycopg: it cannot be a PostgreSQL store
        PostgresStore = None  # type: ignore[assignment,misc]
    if PostgresStore is not None and isinstance(store, PostgresStore):
        from jobengine.backends.postgres.webhooks import postgres_webhook_store

        return postgres_webhook_store(store.dsn, store.schema)
    raise ConfigError(f"webhooks: the {type(store).__name__} store does not keep webhooks")
