"""The PostgreSQL migrations give exactly the schema in ``snapshots/postgres_schema.sql``.

Compared: every column (information_schema.columns), index (pg_indexes), constraint and table option of
the store's schema, normalised (schema name removed, sorted). A migration that changes the schema comes
with the new snapshot, so the change is reviewed as a diff. To accept a deliberate change:

    JOBENGINE_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/integration/postgres/test_schema.py
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import psycopg

from jobengine.backends.postgres import PostgresStore
from jobengine.backends.postgres.migrate import lock_key, migrations

SNAPSHOT = Path(__file__).parent.parent / "snapshots" / "postgres_schema.sql"
SQLITE_MIGRATIONS = Path(__file__).parents[3] / "src" / "jobengine" / "backends" / "sqlite" / "migrations"


async def schema_of(dsn: str, schema: str) -> str:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        lines: list[str] = []
        cur = await conn.execute(
            """SELECT table_name, column_name, data_type, is_nullable, column_default, collation_name, is_identity
               FROM information_schema.columns WHERE table_schema = %s ORDER BY table_name, ordinal_position""",
            (schema,),
        )
        for table, column, type_, nullable, default, collation, identity in await cur.fetchall():
            parts = [f"COLUMN {table}.{column} {type_}", "NULL" if nullable == "YES" else "NOT NULL"]
            if default is not None:
                parts.append(f"DEFAULT {default}")
            if collation is not None:
                parts.append(f"COLLATE {collation}")
            if identity == "YES":
                parts.append("IDENTITY")
            lines.append(" ".join(parts))
        cur = await conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = %s", (schema,))
        lines += [f"INDEX {r[0]}" for r in await cur.fetchall()]
        cur = await conn.execute(
            """SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k
               JOIN pg_class c ON c.oid = k.conrelid WHERE k.connamespace = %s::regnamespace""",
            (schema,),
        )
        lines += [f"CONSTRAINT {t}.{name} {definition}" for t, name, definition in await cur.fetchall()]
        cur = await conn.execute(
            """SELECT relname, reloptions FROM pg_class
               WHERE relnamespace = %s::regnamespace AND reloptions IS NOT NULL""",
            (schema,),
        )
        lines += [f"OPTIONS {t} {','.join(opts)}" for t, opts in await cur.fetchall()]
    normalised = sorted(
        re.sub(r"\s+", " ", line.replace(f'"{schema}".', "").replace(f"{schema}.", "")) for line in lines
    )
    return "\n".join(normalised) + "\n"


async def test_migrations_give_the_snapshot_schema(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn, schema="snapshot_check")
    try:
        assert await store.migrate() == [m.version for m in migrations()]
    finally:
        await store.close()
    actual = await schema_of(postgres_dsn, "snapshot_check")
    if os.environ.get("JOBENGINE_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(actual, encoding="utf-8")
    assert actual == SNAPSHOT.read_text(encoding="utf-8"), (
        "the migrations no longer give the schema in tests/integration/snapshots/postgres_schema.sql; "
        "if the change is deliberate, regenerate it (see this module's docstring) and commit both"
    )


def test_migration_versions_match_the_sqlite_backend() -> None:
    sqlite = sorted(int(p.name[:4]) for p in SQLITE_MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    assert [m.version for m in migrations()] == sqlite


async def test_migrate_is_idempotent_and_safe_to_run_concurrently(postgres_dsn: str) -> None:
    stores = [PostgresStore(postgres_dsn, schema="concurrent", pool_max=1) for _ in range(4)]
    try:
        applied = await asyncio.gather(*(s.migrate() for s in stores))
        assert sorted(applied, key=len) == [[], [], [], [m.version for m in migrations()]]
        assert await stores[0].migrate() == []
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            cur = await conn.execute("SELECT version FROM concurrent.jobengine_migrations ORDER BY version")
            assert [r[0] for r in await cur.fetchall()] == [m.version for m in migrations()]
    finally:
        for s in stores:
            await s.close()


async def test_a_current_schema_is_checked_without_the_migration_lock(postgres_dsn: str) -> None:
    """A process that starts on a current schema reads the recorded versions and goes on: it does not wait
    for the migration lock, which another migrator may hold for as long as its migrations take."""
    store = PostgresStore(postgres_dsn, schema="current")
    try:
        assert await store.migrate() == [m.version for m in migrations()]
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as holder:
            await holder.execute("SELECT pg_advisory_lock(%s)", (lock_key("migrate", "current"),))
            assert await asyncio.wait_for(store.migrate(), 10) == []
            # A version not recorded: the lock is waited for, and the versions read again under it (the
            # holder, a migrator, recorded it meanwhile).
            last = migrations()[-1]
            await holder.execute("DELETE FROM current.jobengine_migrations WHERE version = %s", (last.version,))
            waiting = asyncio.ensure_future(store.migrate())
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await holder.execute(
                "INSERT INTO current.jobengine_migrations (version, name) VALUES (%s, %s)", (last.version, last.name)
            )
            await holder.execute("SELECT pg_advisory_unlock(%s)", (lock_key("migrate", "current"),))
            assert await asyncio.wait_for(waiting, 10) == []
    finally:
        await store.drop_schema()
        await store.close()
