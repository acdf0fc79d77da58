"""PostgreSQL integration tests: every test gets a fresh database (``postgres_dsn``) and a migrated store.

Without a reachable PostgreSQL these tests skip locally and fail under CI (see tests/support/services.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobengine.backends.postgres import PostgresStore


@pytest.fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(postgres_dsn, pool_max=4)
    await s.migrate()
    try:
        yield s
    finally:
        await s.close()
