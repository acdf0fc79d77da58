"""Schema migrations: versioned SQL files, applied in order, recorded in ``jobengine_migrations``.

Files are ``migrations/NNNN_name.sql`` (the same numbers as the SQLite backend). Each runs in its own
transaction with ``search_path`` set to the store's schema, so the files never name the schema. Concurrent
migrators (several processes starting at once) serialize on a session advisory lock keyed by the schema; the
later ones find nothing left to apply.
"""

from __future__ import annotations

import hashlib

import psycopg

from jobengine.backends.sql.migrations import Migration, shipped


def migrations() -> list[Migration]:
    """The migrations shipped in the package, oldest first."""
    return shipped("jobengine.backends.postgres")


def lock_key(*parts: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``parts`` (the same in every process)."""
    digest = hashlib.blake2b("\x1f".join(("jobengine", *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


async def migrate(conn: psycopg.AsyncConnection[tuple[object, ...]], schema: str) -> list[int]:
    """Apply the pending migrations on ``conn`` (autocommit) into ``schema``; return the versions applied."""
    quoted = f'"{schema}"'
    if await _current(conn, quoted):
        return []
    key = lock_key("migrate", schema)
    await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}".encode())
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {quoted}.jobengine_migrations (
                version integer PRIMARY KEY,
                name text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())""".encode()
        )
        cur = await conn.execute(f"SELECT version FROM {quoted}.jobengine_migrations".encode())
        done = {int(str(r[0])) for r in await cur.fetchall()}
        applied = []
        for m in migrations():
            if m.version in done:
                continue
            async with conn.transaction():
                await conn.execute(f"SET LOCAL search_path TO {quoted}".encode())
                await conn.execute(m.sql.encode())
                await conn.execute(
                    f"INSERT INTO {quoted}.jobengine_migrations (version, name) VALUES (%s, %s)".encode(),
                    (m.version, m.name),
                )
            applied.append(m.version)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


async def _current(conn: psycopg.AsyncConnection[tuple[object, ...]], quoted: str) -> bool:
    """Whether every shipped migration is recorded already, read in one statement without the lock (every
    process that starts asks this, and once a schema is current the answer never changes: a migration's
    row commits with its changes, and rows are only ever added). False also when the schema or its
    migrations table does not exist yet; the caller then takes the lock and looks again."""
    try:
        cur = await conn.execute(f"SELECT version FROM {quoted}.jobengine_migrations".encode())
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        return False
    done = {int(str(r[0])) for r in await cur.fetchall()}
    return all(m.version in done for m in migrations())
