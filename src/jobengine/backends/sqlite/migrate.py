"""Versioned schema migrations, shipped as package data (``migrations/NNNN_name.sql``).

Each applied version is recorded in ``jobengine_migrations``. The whole run happens in one
``BEGIN IMMEDIATE`` transaction (SQLite DDL is transactional), so two processes migrating at once
serialise on the write lock: the second finds the versions recorded and applies nothing, and a failing
migration leaves the schema as it was. Version numbers are shared with the PostgreSQL backend.
"""

from __future__ import annotations

import sqlite3
import time

from jobengine.backends.sql.migrations import Migration, shipped
from jobengine.errors import StoreError

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS jobengine_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at REAL NOT NULL
)
"""


def load_migrations() -> list[Migration]:
    """Every migration shipped in the package, by version. Raises StoreError on a duplicate version."""
    return shipped("jobengine.backends.sqlite")


def split_statements(sql: str) -> list[str]:
    """Split a migration script into statements.

    ``Connection.executescript`` would be simpler but always COMMITs first, which would break the one
    transaction the migration must run in. ``sqlite3.complete_statement`` knows about string literals and
    ``CREATE TRIGGER ... BEGIN ... END`` bodies, so splitting on it is safe where splitting on ``;`` is not.
    """
    statements: list[str] = []
    buffer: list[str] = []
    for line in sql.splitlines(keepends=True):
        buffer.append(line)
        text = "".join(buffer)
        if sqlite3.complete_statement(text):
            if _has_code(text):
                statements.append(text.strip())
            buffer.clear()
    if _has_code("".join(buffer)):
        raise StoreError("sqlite: a migration ends with an incomplete statement")
    return statements


def _has_code(text: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in text.splitlines())


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobengine_migrations'"
    ).fetchone()
    if exists is None:
        return set()
    return {int(v) for (v,) in conn.execute("SELECT version FROM jobengine_migrations")}


def apply_migrations(conn: sqlite3.Connection, migrations: list[Migration]) -> list[int]:
    """Apply the migrations not yet recorded; the caller holds the write transaction. Returns versions."""
    conn.execute(_CREATE_TABLE)
    done = applied_versions(conn)
    applied: list[int] = []
    for migration in migrations:
        if migration.version in done:
            continue
        for statement in split_statements(migration.sql):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO jobengine_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.name, time.time()),
        )
        applied.append(migration.version)
    return applied
