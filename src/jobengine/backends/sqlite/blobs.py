"""Pack content in the SQLite file (``packs_blob_store = database``): :mod:`jobengine.backends.sql.blobs`
through the store's own connection (one writer thread)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobengine.backends.sql.blobs import SqlBlobStore

if TYPE_CHECKING:
    from jobengine.backends.sqlite.store import SqliteStore


class SqliteBlobStore(SqlBlobStore):
    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store.db, store.path)
        self.store = store
