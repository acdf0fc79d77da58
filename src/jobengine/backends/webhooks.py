"""The keys that seal webhook secrets at rest (:mod:`jobengine.secretbox`), for the stores that build their
webhook store (``store.webhook_store(settings)``):

- ``secret_keys`` when set, on any SQL store;
- else SQLite: the key file beside the database, ``<database>.secretkeys`` (made with a new key on first use,
  owner-only, like ``jobengine up``'s dev key), so a copy of the database file alone reveals no secret;
- else PostgreSQL: no key. Storing a secret then raises ConfigError naming ``secret_keys``: the database
  is usually shared and backed up apart from the servers, so the key must come from their configuration.
  Secrets written in clear before sealing existed are still read (and sealed once a key is set).
"""

from __future__ import annotations

from pathlib import Path

from jobengine.secretbox import SETTING, SecretBox, read_key_file
from jobengine.settings import Settings

KEY_FILE_SUFFIX = ".secretkeys"


def key_file(database_path: str) -> Path:
    return Path(database_path + KEY_FILE_SUFFIX)


def secret_box(settings: Settings, database_path: str | None = None) -> SecretBox:
    """``secret_keys`` when set; else the key file beside ``database_path`` (a SQLite file); else no key."""
    if settings.secret_keys or database_path is None:
        return SecretBox(settings.secret_keys, source=SETTING)
    path = key_file(database_path)
    return SecretBox(lambda: read_key_file(path), source=f"the key file {path}")
