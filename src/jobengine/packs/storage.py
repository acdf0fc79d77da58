"""Which blob store keeps pack content: the ``packs_blob_*`` / ``packs_s3_*`` settings (checked by Settings).

- ``filesystem``: files under ``packs_blob_dir`` (default: beside the SQLite file, ``<database>.packs``).
  The default on SQLite: the data stays in the data directory, and the database file stays small.
- ``database``: the store's ``pack_blobs`` table. The default on PostgreSQL: a directory is not shared
  between hosts, and the database is the one thing every host of a PostgreSQL deployment shares.
- ``s3``: an S3-compatible bucket (``packs_s3_bucket``, optional ``packs_s3_prefix``, ``packs_s3_endpoint``,
  ``packs_s3_region``; credentials from the AWS environment). Chosen by default when a bucket is set.

The backends themselves are in :mod:`jobengine.backends.blobs`; each store chooses its own
(``store.blob_store(settings)``, through ``choose_blob_store``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobengine.errors import ConfigError

if TYPE_CHECKING:
    from jobengine.settings import Settings

KINDS = ("filesystem", "s3", "database")


def check_blob_settings(s: Settings) -> None:
    if s.packs_blob_store not in ("", *KINDS):
        raise ConfigError(f"packs_blob_store: one of {', '.join(KINDS)} (or empty: the store's default), "
                          f"not {s.packs_blob_store!r}")  # fmt: skip
    if s.packs_blob_store == "s3" and not s.packs_s3_bucket:
        raise ConfigError("packs_s3_bucket: required when packs_blob_store is s3")
    if s.packs_s3_prefix.startswith("/"):
        raise ConfigError("packs_s3_prefix: a key prefix, without a leading '/'")
    if s.packs_s3_endpoint and not s.packs_s3_endpoint.startswith(("http://", "https://")):
        raise ConfigError("packs_s3_endpoint: an http:// or https:// URL")


def blob_store_kind(s: Settings, store_kind: str) -> str:
    """The blob store to use with a store of ``store_kind`` (memory, sqlite, postgres)."""
    if s.packs_blob_store:
        return s.packs_blob_store
    if s.packs_s3_bucket:
        return "s3"
    return "filesystem" if store_kind == "sqlite" else "database"
