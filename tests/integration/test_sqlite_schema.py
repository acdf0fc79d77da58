"""The SQLite migrations give exactly the schema in ``snapshots/sqlite_schema.sql``.

A migration that changes the schema must come with the new snapshot, so the change is reviewed as a
diff. To accept a deliberate change, regenerate the snapshot and commit it with the migration:

    JOBENGINE_UPDATE_SNAPSHOTS=1 .venv/bin/pytest tests/integration/test_sqlite_schema.py
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

from jobengine.backends.sqlite import SqliteStore
from jobengine.backends.sqlite.migrate import load_migrations

SNAPSHOT = Path(__file__).parent / "snapshots" / "sqlite_schema.sql"


def schema_of(path: Path) -> str:
    """Every CREATE statement SQLite keeps, without comments, whitespace-normalised and sorted, one per line."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall()
    finally:
        conn.close()
    # Comments go first: once lines are joined, a "--" comment would swallow the rest of its statement.
    statements = sorted(re.sub(r"\s+", " ", re.sub(r"--[^\n]*", "", sql)).strip() + ";" for (sql,) in rows)
    return "\n".join(statements) + "\n"


async def test_migrations_give_the_snapshot_schema(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "schema.db"))
    try:
        assert await store.migrate() == [m.version for m in load_migrations()]
    finally:
        await store.close()
    actual = schema_of(tmp_path / "schema.db")
    if os.environ.get("JOBENGINE_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(actual, encoding="utf-8")
    expected = SNAPSHOT.read_text(encoding="utf-8")
    assert actual == expected, (
        "the migrations no longer give the schema in tests/integration/snapshots/sqlite_schema.sql; "
        "if the change is deliberate, regenerate it (see this module's docstring) and commit both"
    )
