"""Blob stores for pack content (:class:`~jobengine.ports.blobs.BlobStore`) and the choice among them.

:func:`blob_store_for` is called by ``Engine.packs`` (the composition root); the rules for the default are
in :func:`jobengine.settings.blob_store_kind`. The ``database`` backends live beside their store
(``backends/{sqlite,postgres}/blobs.py``); ``filesystem`` and ``s3`` here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jobengine.errors import ConfigError
from jobengine.ports.blobs import BlobStore
from jobengine.settings import blob_store_kind

if TYPE_CHECKING:
    from jobengine.settings import Settings


def blob_store_for(store: object, settings: Settings) -> BlobStore:
    """The blob store ``settings`` choose for ``store`` (ConfigError when the combination cannot work)."""
    from jobengine.backends.sqlite import SqliteStore

    postgres = _postgres_store()
    if isinstance(store, SqliteStore):
        store_kind = "sqlite"
    elif postgres is not None and isinstance(store, postgres):
        store_kind = "postgres"
    else:
        raise ConfigError(f"packs: the {type(store).__name__} store does not keep task packs")
    kind = blob_store_kind(settings, store_kind)
    if kind == "database":
        return _database_blobs(store)
    primary = _external(kind, store, store_kind, settings)
    from jobengine.backends.blobs.fallback import WithLegacyRows

    return WithLegacyRows(primary, _database_blobs(store))  # content uploaded before 0009 is in pack_blobs


def _external(kind: str, store: object, store_kind: str, settings: Settings) -> BlobStore:
    from jobengine.backends.sqlite import SqliteStore

    if kind == "s3":
        from jobengine.backends.blobs.s3 import S3BlobStore

        return S3BlobStore(settings.packs_s3_bucket, prefix=settings.packs_s3_prefix,
                           endpoint=settings.packs_s3_endpoint, region=settings.packs_s3_region)  # fmt: skip
    from jobengine.backends.blobs.filesystem import FilesystemBlobStore

    if settings.packs_blob_dir:
        return FilesystemBlobStore(Path(settings.packs_blob_dir).expanduser())
    if isinstance(store, SqliteStore):
        return FilesystemBlobStore(Path(store.path + ".packs"))
    raise ConfigError(f"packs_blob_dir: required for the filesystem blob store with the {store_kind} store")


def _database_blobs(store: object) -> BlobStore:
    from jobengine.backends.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        from jobengine.backends.sqlite.blobs import SqliteBlobStore

        return SqliteBlobStore(store)
    from jobengine.backends.postgres.blobs import PostgresBlobStore

    return PostgresBlobStore(store)  # type: ignore[arg-type]  # isinstance-checked above


def _postgres_store() -> type | None:
    try:
        from jobengine.backends.postgres import PostgresStore
    except ImportError:  # no psycopg: it cannot be a PostgreSQL store
        return None
    return PostgresStore
