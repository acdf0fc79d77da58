-- 0009_pack_blob_store: pack content may live outside the database (packs_blob_store = filesystem | s3), so a
-- version row no longer references pack_blobs, which stays as the `database` blob store's table. The registry
-- writes the blob before the version row (docs/packs.md). SQLite has its own 0009.

ALTER TABLE pack_versions DROP CONSTRAINT pack_versions_sha256_fkey;
