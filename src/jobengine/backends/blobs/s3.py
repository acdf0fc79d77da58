"""Content-addressed blobs in an S3-compatible object store (``packs_blob_store = s3``; extra ``s3``: boto3).

Key: ``<packs_s3_prefix>sha256/<the 64 hex digest>`` in ``packs_s3_bucket``. The endpoint
(``packs_s3_endpoint``, for MinIO, Ceph, R2, ...; empty: AWS) and region come from settings; credentials
from the usual AWS chain (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``,
``AWS_PROFILE``, an instance role), never from jobengine's settings. A custom endpoint is addressed
path-style (``endpoint/bucket/key``), which every S3-compatible server accepts.

boto3 is synchronous: every call runs in a thread (its client is thread-safe). ``put`` sends the MD5 of the
body (``Content-MD5``), so the server refuses bytes damaged on the way; a PUT of an existing key replaces
it with the same bytes (idempotent) — a HEAD first saves the upload when the digest is already there.
Errors other than "not found" become StoreError naming the bucket and key.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from typing import Any

from jobengine.errors import ConfigError, StoreError
from jobengine.ports.blobs import BlobHealth, check_digest

_MISSING = ("404", "NoSuchKey", "NotFound")


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


class S3BlobStore:
    kind = "s3"

    def __init__(self, bucket: str, *, prefix: str = "", endpoint: str = "", region: str = "") -> None:
        if not bucket:
            raise ConfigError("packs_s3_bucket: required when packs_blob_store is s3")
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ConfigError("packs_blob_store: s3 needs boto3 (pip install 'jobengine[s3]')") from None
        self.bucket = bucket
        self.prefix = prefix
        config = Config(s3={"addressing_style": "path"} if endpoint else {}, retries={"mode": "standard"})
        self._client: Any = boto3.session.Session().client(
            "s3", endpoint_url=endpoint or None, region_name=region or None, config=config
        )

    def key_of(self, sha256: str) -> str:
        return f"{self.prefix}sha256/{check_digest(sha256)}"

    async def _call(self, what: str, key: str, fn: Any, /, **kw: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return await asyncio.to_thread(fn, **kw)
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return None
            raise StoreError(f"packs_s3_bucket: {what} s3://{self.bucket}/{key} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"packs_s3_endpoint: {what} s3://{self.bucket}/{key} failed: {exc}") from exc

    async def put(self, sha256: str, data: bytes) -> None:
        key = self.key_of(sha256)
        if await self.exists(sha256):
            return
        md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        await self._call("writing", key, self._client.put_object, Bucket=self.bucket, Key=key, Body=bytes(data),
                         ContentMD5=md5, ContentType="application/gzip")  # fmt: skip

    async def get(self, sha256: str) -> bytes | None:
        key = self.key_of(sha256)

        def read(**kw: Any) -> bytes:
            body = self._client.get_object(**kw)["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

        found = await self._call("reading", key, read, Bucket=self.bucket, Key=key)
        return found if isinstance(found, bytes) else None

    async def exists(self, sha256: str) -> bool:
        key = self.key_of(sha256)
        return await self._call("looking up", key, self._client.head_object, Bucket=self.bucket, Key=key) is not None

    async def delete(self, sha256: str) -> None:
        key = self.key_of(sha256)
        await self._call("deleting", key, self._client.delete_object, Bucket=self.bucket, Key=key)

    async def health(self) -> BlobHealth:
        started = time.perf_counter()
        where = f"s3://{self.bucket}/{self.prefix}"
        try:
            async with asyncio.timeout(5):
                found = await self._call("checking", "", self._client.head_bucket, Bucket=self.bucket)
        except (StoreError, TimeoutError) as exc:
            return BlobHealth(self.kind, False, 1000 * (time.perf_counter() - started), str(exc) or "timeout")
        elapsed = 1000 * (time.perf_counter() - started)
        if found is None:
            return BlobHealth(self.kind, False, elapsed, f"{where}: no such bucket")
        return BlobHealth(self.kind, True, elapsed, where)
