"""Blob stores for pack content (:class:`~jobengine.ports.blobs.BlobStore`) and the choice among them.

Each store builds its own (``store.blob_store(settings)``) through :func:`choose_blob_store`, giving what
only it knows: its kind, its own ``pack_blobs`` table and where its files go by default. The rules for
the default are in :func:`jobengine.settings.blob_store_kind`. The ``database`` backend is
``backends/sql/blobs.py``, for both SQL stores; ``filesystem`` and ``s3`` here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from jobengine.errors import ConfigError
from jobengine.ports.blobs import BlobStore
from jobengine.settings import blob_store_kind

if TYPE_CHECKING:
    from jobengine.settings import Settings


def choose_blob_store(
    settings: Settings,
    store_kind: str,
    database: Callable[[], BlobStore],
    *,
    beside: Path | None = None,
    legacy_rows: bool = True,
) -> BlobStore:
    """The blob store ``settings`` choose for a store of ``store_kind`` (sqlite, postgres);
    ConfigError when the combination cannot work. ``database``: the store's own blob table; ``beside``:
    the default directory of the filesystem blob store (none: ``packs_blob_dir`` is required);
    ``legacy_rows``: content may also be in the store's table, from before external blob stores."""
    kind = blob_store_kind(settings, store_kind)
    if kind == "database":
        return database()
    primary = _external(kind, store_kind, settings, beside)
    if not legacy_rows:
        return primary
    from jobengine.backends.blobs.fallback import WithLegacyRows

    return WithLegacyRows(primary, database())


def _external(kind: str, store_kind: str, settings: Settings, beside: Path | None) -> BlobStore:
    if kind == "s3":
        from jobengine.backends.blobs.s3 import S3BlobStore

        return S3BlobStore(settings.packs_s3_bucket, prefix=settings.packs_s3_prefix,
                           endpoint=settings.packs_s3_endpoint, region=settings.packs_s3_region)  # fmt: skip
    from jobengine.backends.blobs.filesystem import FilesystemBlobStore

    if settings.packs_blob_dir:
        return FilesystemBlobStore(Path(settings.packs_blob_dir).expanduser())
    if beside is not None:
        return FilesystemBlobStore(beside)
    raise ConfigError(f"packs_blob_dir: required for the filesystem blob store with the {store_kind} store")
