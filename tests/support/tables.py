"""Every table's row count, read straight from an engine's database (SQLite file or PostgreSQL schema):
what a read-only operation must leave unchanged."""

from __future__ import annotations

import sqlite3

import psycopg

from jobengine.settings import Settings


async def table_counts(settings: Settings) -> dict[str, int]:
    """The row count of every table of the store ``settings`` names."""
    if settings.database.startswith("postgres"):
        schema = settings.postgres_schema
        async with await psycopg.AsyncConnection.connect(settings.database) as conn:
            sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            names = [n for (n,) in await (await conn.execute(sql, (schema,))).fetchall()]
            counts: dict[str, int] = {}
            for name in names:
                row = await (await conn.execute(f'SELECT count(*) FROM "{schema}"."{name}"')).fetchone()
                assert row is not None
                counts[name] = row[0]
            return counts
    with sqlite3.connect(settings.database) as conn:
        names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()]
        return {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
