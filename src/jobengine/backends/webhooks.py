"""Choose the webhook store for a Store (called by ``Engine.webhook_store``, the composition root), with the
keys that seal its secrets at rest (:mod:`jobengine.secretbox`):

- ``secret_keys`` when set, on any SQL store;
- else SQLite: the key file beside the database, ``<database>.secretkeys`` (made with a new key on first use,
  owner-only, like ``jobengine up``'s dev key), so a copy of the database file alone reveals no secret;
- else PostgreSQL: no key. Storing a secret then raises ConfigError naming ``secret_keys``: the database
  is usually shared and backed up apart from the servers, so the key must come from their configuration.
  Secrets written in clear before sealing existed are still read (and sealed once a key is set).
"""

from __future__ import annotations

from pathlib import Path

from jobengine.errors import ConfigError
from jobengine.ports.store import Store
from jobengine.ports.webhooks import WebhookStore
from jobengine.secretbox import SETTING, SecretBox, read_key_file
from jobengine.settings import Settings

KEY_FILE_SUFFIX = ".secretkeys"


def key_file(database_path: str) -> Path:
    return Path(database_path + KEY_FILE_SUFFIX)


def webhook_store_for(store: Store, settings: Settings | None = None) -> WebhookStore:
    from jobengine.backends.sql.webhooks import SqlWebhookStore
    from jobengine.backends.sqlite import SqliteStore

    s = settings or Settings()
    if isinstance(store, SqliteStore):
        if s.secret_keys:
            box = SecretBox(s.secret_keys)
        else:
            path = key_file(store.path)
            box = SecretBox(lambda: read_key_file(path), source=f"the key file {path}")
        return SqlWebhookStore(store.db, box)
    try:
        from jobengine.backends.postgres import PostgresStore
    except ImportError:  # no psycopg: it cannot be a PostgreSQL store
        PostgresStore = None  # type: ignore[assignment,misc]
    if PostgresStore is not None and isinstance(store, PostgresStore):
        return SqlWebhookStore(store.db, SecretBox(s.secret_keys, source=SETTING))
    raise ConfigError(f"webhooks: the {type(store).__name__} store does not keep webhooks")
