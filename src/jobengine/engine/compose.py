"""The composition root: the one module that names backends.

Everything else receives a store, a transport or a blob store already built; this module turns the
``database`` setting into a store.
"""

from __future__ import annotations

from jobengine.errors import ConfigError
from jobengine.ports.store import Store
from jobengine.settings import Settings


def open_store(database: str, settings: Settings | None = None) -> Store:
    """Choose the backend a ``database`` setting names: ``memory`` (SQLite in a temporary file, gone when
    the store closes or the process ends), a SQLite path, ``sqlite:///path`` or a ``postgresql://`` DSN
    (imported only then, so SQLite users need no psycopg)."""
    if database == "memory":
        from jobengine.backends.sqlite.temporary import TemporarySqliteStore

        return TemporarySqliteStore(leader_lease_seconds=(settings or Settings()).scheduler_lease_seconds)
    if database.startswith(("postgres://", "postgresql://")):
        s = settings or Settings()
        try:
            from jobengine.backends.postgres import PostgresStore
        except ImportError as exc:
            raise ConfigError(
                f"database: PostgreSQL needs the postgres extra: pip install 'jobengine[postgres]' ({exc})"
            ) from None
        try:
            return PostgresStore(database, schema=s.postgres_schema, pool_max=s.postgres_pool_size)
        except ValueError as exc:
            raise ConfigError(f"postgres_schema: {exc}") from None
    path = database.removeprefix("sqlite:///").removeprefix("sqlite://")
    if not path:
        raise ConfigError("database: give a SQLite file path, 'memory', or a sqlite:/// URL")
    from jobengine.backends.sqlite import SqliteStore

    s = settings or Settings()
    return SqliteStore(
        path,
        synchronous=s.sqlite_synchronous,
        worker_synchronous=s.sqlite_worker_synchronous,
        leader_lease_seconds=s.scheduler_lease_seconds,
    )
