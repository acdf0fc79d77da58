"""The composition root: the one module that names backends.

Everything else receives a store, a transport or a blob store already built; this module turns the
``database`` setting into a store and the ``webhook_rate_limiter`` setting into a rate limiter.
"""

from __future__ import annotations

from functools import partial

from jobengine.errors import ConfigError
from jobengine.ports.ratelimit import RateLimiter
from jobengine.ports.store import Store
from jobengine.settings import POSTGRES_SCHEMES, Settings, in_state_dir, prepare_state_dir
from jobengine.webhooks.limiter import LIMITERS, LocalLimiter, NoopLimiter


def open_store(database: str, settings: Settings | None = None) -> Store:
    """Choose the backend a ``database`` setting names: ``memory`` (SQLite in a temporary file, gone when
    the store closes or the process ends), a SQLite path, ``sqlite:///path`` or a ``postgresql://`` DSN
    (imported only then, so SQLite users need no psycopg). A SQLite file in ``state_dir`` makes that
    directory, with its ``.gitignore``, when the store first opens it."""
    if database == "memory":
        from jobengine.backends.sqlite.temporary import TemporarySqliteStore

        return TemporarySqliteStore(leader_lease_seconds=(settings or Settings()).scheduler_lease_seconds)
    if database.startswith(POSTGRES_SCHEMES):
        s = settings or Settings()
        try:
            from jobengine.backends.postgres import PostgresStore
        except ImportError as exc:
            raise ConfigError(
                f"database: PostgreSQL needs the postgres extra: pip install 'jobengine[postgres]' ({exc})"
            ) from None
        try:
            return PostgresStore(
                database,
                direct_dsn=s.database_direct or None,
                schema=s.postgres_schema,
                pool_max=s.postgres_pool_size,
            )
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
        prepare=partial(prepare_state_dir, s) if in_state_dir(s, path) else None,
    )


def open_rate_limiter(kind: str, redis_url: str, prefix: str = "jobengine:ratelimit:") -> RateLimiter:
    """The limiter a ``webhook_rate_limiter`` setting names. ``redis`` needs ``redis_url`` (and the redis
    extra); whether the server answers is checked by ``check()`` at start-up."""
    if kind == "noop":
        return NoopLimiter()
    if kind == "local":
        return LocalLimiter()
    if kind == "redis":
        if not redis_url:
            raise ConfigError("webhook_redis_url: the redis rate limiter needs a Redis URL (redis://host:6379/0)")
        try:
            from jobengine.backends.redis.ratelimit import RedisLimiter
        except ImportError as exc:
            raise ConfigError(f"webhook_rate_limiter: redis needs the redis extra: pip install 'jobengine[redis]' "
                              f"({exc})") from None  # fmt: skip
        return RedisLimiter(redis_url, prefix)
    raise ConfigError(f"webhook_rate_limiter: {kind!r} is not one of {', '.join(LIMITERS)}")
