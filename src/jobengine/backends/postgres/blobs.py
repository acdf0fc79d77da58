"""Pack content in PostgreSQL (``packs_blob_store = database``, the default there unless S3 is configured):
:mod:`jobengine.backends.sql.blobs` on the store's pool, shared by every host that shares the database."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobengine.backends.sql.blobs import SqlBlobStore

if TYPE_CHECKING:
    from jobengine.backends.postgres.store import PostgresStore


class PostgresBlobStore(SqlBlobStore):
    def __init__(self, store: PostgresStore) -> None:
        super().__init__(store.db, f"schema {store.schema}")
        self.store = store
