"""Real services for the tests: probe them, skip locally, fail under CI, and give each test its own space.

The services are the machine's own, on 127.0.0.1 at their standard ports (``.ci/run`` starts any that is
down). Every helper here follows one failure policy, so that a missing service never turns a CI run green:

* service answers      -> the test runs;
* service absent       -> ``pytest.skip`` with a reason naming the service, host and port;
* absent and ``CI`` set -> ``pytest.fail`` with the same reason (``CI`` set to anything but
  ``""``, ``0``, ``false`` or ``no``).

Isolation, one space per test:

* PostgreSQL: a fresh database, created through the ``postgres`` maintenance database. When the test
  ends its connections are ended and new ones refused at once; the ``DROP DATABASE`` itself, which waits
  for a checkpoint, runs in a background thread so no test waits for it (drained at exit; a database left
  by a process that is gone is dropped by the next run).
* Redis: a database number of its own (1-15), claimed with a lock key in db 0 so that concurrent
  test runs on the same server never share one; flushed when the test ends (only that db).
* NATS: there is no per-test namespace in the server; tests use :func:`unique_name` for their
  stream / subject prefixes.

Usage from a conftest or a test::

    from support.services import require_service, postgres_database

    info = require_service("redis")          # skips (or fails under CI) when Redis is down
    with postgres_database() as dsn: ...     # a database of its own, dropped afterwards
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import os
import queue
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Literal, NoReturn

import pytest

ServiceName = Literal["postgres", "redis", "nats"]

HOST = "127.0.0.1"
DEFAULT_PORTS: dict[str, int] = {"postgres": 5432, "redis": 6379, "nats": 4222}
_TITLES: dict[str, str] = {"postgres": "PostgreSQL", "redis": "Redis", "nats": "NATS"}
_PROBE_TIMEOUT = 2.0


@dataclass(frozen=True)
class ServiceInfo:
    """Where a service that answered can be reached; ``url`` has no database / db number in it."""

    name: str
    host: str
    port: int
    url: str


def in_ci() -> bool:
    """True when the ``CI`` environment variable is set to a true-ish value."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> NoReturn:
    """Skip the current test with ``reason``; under CI, fail it instead."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: a missing service or tool fails the run)", pytrace=False)
    pytest.skip(reason)


def unique_name(prefix: str = "jet") -> str:
    """A short name no other test (or concurrent test run) uses: for schemas, streams, key prefixes."""
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:10]}"


async def drop_nats_streams(url: str, streams: Iterable[str]) -> None:
    """Delete the JetStream streams a test made: the server outlives the test run. A stream never made (the
    test ended first) or a server gone meanwhile is passed over: a cleanup must not hide the test's outcome."""
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for stream in streams:
            with contextlib.suppress(Exception):
                await js.delete_stream(stream)
    finally:
        await nc.close()


# --- probes -------------------------------------------------------------------------------------------


def _probe_postgres(sock: socket.socket) -> bool:
    # SSLRequest: any PostgreSQL answers with a single 'S' or 'N' before authentication.
    sock.sendall((8).to_bytes(4, "big") + (80877103).to_bytes(4, "big"))
    return sock.recv(1) in (b"S", b"N")


def _probe_redis(sock: socket.socket) -> bool:
    sock.sendall(b"*1\r\n$4\r\nPING\r\n")
    return sock.recv(64).startswith(b"+PONG")


def _probe_nats(sock: socket.socket) -> bool:
    return sock.recv(4) == b"INFO"


_PROBES = {"postgres": _probe_postgres, "redis": _probe_redis, "nats": _probe_nats}


def service_answers(name: str, host: str = HOST, port: int | None = None) -> bool:
    """True when ``name`` accepts a TCP connection at host:port and speaks its protocol's greeting."""
    port = DEFAULT_PORTS[name] if port is None else port
    try:
        with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT) as sock:
            sock.settimeout(_PROBE_TIMEOUT)
            return _PROBES[name](sock)
    except OSError:
        return False


def require_service(name: ServiceName, host: str = HOST, port: int | None = None) -> ServiceInfo:
    """Return where ``name`` is reachable; skip the test when it is not (fail under CI).

    ``name`` is ``"postgres"``, ``"redis"`` or ``"nats"``; ``port`` defaults to the standard one.
    """
    if name not in DEFAULT_PORTS:
        raise ValueError(f"unknown service {name!r}; expected one of {sorted(DEFAULT_PORTS)}")
    port = DEFAULT_PORTS[name] if port is None else port
    if not service_answers(name, host, port):
        unavailable(f"{_TITLES[name]} not reachable on {host}:{port}")
    scheme = {"postgres": "postgresql", "redis": "redis", "nats": "nats"}[name]
    return ServiceInfo(name=name, host=host, port=port, url=f"{scheme}://{host}:{port}")


# --- PostgreSQL -----------------------------------------------------------------------------------------


def postgres_admin_dsn(info: ServiceInfo) -> str:
    """A DSN for the ``postgres`` maintenance database as a role that may create databases.

    Trust auth is expected; the roles tried are ``postgres``, then the current OS user.
    """
    psycopg = _import_psycopg()
    tried: list[str] = []
    for user in dict.fromkeys(["postgres", getpass.getuser()]):
        dsn = f"postgresql://{user}@{info.host}:{info.port}/postgres"
        try:
            with psycopg.connect(dsn, connect_timeout=5) as conn:
                row = conn.execute(
                    "SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user"
                ).fetchone()
        except psycopg.Error as exc:
            tried.append(f"{user}: {str(exc).strip()}")
            continue
        if row is not None and row[0]:
            return dsn
        tried.append(f"{user}: may not create databases")
    unavailable(f"PostgreSQL on {info.host}:{info.port}: no role may create a test database ({'; '.join(tried)})")


@contextlib.contextmanager
def postgres_database(info: ServiceInfo | None = None) -> Iterator[str]:
    """Create a uniquely named database, yield its DSN, drop it (closing stray connections) afterwards."""
    info = require_service("postgres") if info is None else info
    psycopg = _import_psycopg()
    from psycopg import sql

    admin = postgres_admin_dsn(info)
    name = unique_name("jobengine_test")
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    for attempt in range(5):
        try:
            with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
                conn.execute(create)
            break
        except psycopg.errors.ObjectInUse:
            # Another session is connected to template1 at this instant; it lets go quickly.
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    try:
        yield admin.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        _Dropper.get(admin).drop(name)


class _Dropper:
    """Drops the test databases of this process in a background thread, one after another.

    ``DROP DATABASE`` waits for a checkpoint, which takes seconds while other tests write; a test that
    waited for it would spend more time in its teardown than in its body. The databases it drops no longer
    take connections (``postgres_database`` refused them), so dropping them later changes nothing a test sees.
    Several threads drop at once: drops that wait together are served by one checkpoint.
    """

    THREADS = 4

    _instances: dict[str, _Dropper] = {}
    _lock = threading.Lock()

    def __init__(self, admin: str) -> None:
        self._admin = admin
        self._names: queue.Queue[str | None] = queue.Queue()
        for orphan in self._orphans():
            self._names.put(orphan)
        self._threads = [
            threading.Thread(target=self._run, name="drop-test-databases", daemon=True) for _ in range(self.THREADS)
        ]
        for thread in self._threads:
            thread.start()
        atexit.register(self._drain)

    @classmethod
    def get(cls, admin: str) -> _Dropper:
        with cls._lock:
            if admin not in cls._instances:
                cls._instances[admin] = cls(admin)
            return cls._instances[admin]

    def drop(self, name: str) -> None:
        self._names.put(name)

    def _run(self) -> None:
        psycopg = _import_psycopg()
        from psycopg import sql

        while (name := self._names.get()) is not None:
            with (
                contextlib.suppress(psycopg.Error),
                psycopg.connect(self._admin, autocommit=True, connect_timeout=10) as conn,
            ):
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def _orphans(self) -> list[str]:
        """Test databases whose creating process is gone (killed before its drops ran)."""
        psycopg = _import_psycopg()
        try:
            with psycopg.connect(self._admin, autocommit=True, connect_timeout=10) as conn:
                names = [
                    r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'jobengine_test_%'")
                ]
        except psycopg.Error:
            return []
        orphans = []
        for name in names:
            match = re.fullmatch(r"jobengine_test_(\d+)_[0-9a-f]+", name)
            if match and not _alive(int(match.group(1))):
                orphans.append(name)
        return orphans

    def _drain(self) -> None:
        for _ in self._threads:
            self._names.put(None)
        deadline = time.monotonic() + 300
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _import_psycopg() -> ModuleType:
    """The psycopg module; skips (fails under CI) when the postgres extra is not installed."""
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[postgres]', or `make venv`)")
    return psycopg


# --- Redis (a tiny RESP client, so the fixtures need no redis package) ------------------------------------

RespValue = None | int | str | bytes | list["RespValue"]


class RedisError(Exception):
    """An error reply from Redis."""


class RespConnection:
    """A minimal blocking Redis client: ``command("SET", "k", "v")``. For fixtures and probes only."""

    def __init__(self, host: str = HOST, port: int = 6379, db: int = 0, timeout: float = 5.0) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._file = self._sock.makefile("rb")
        if db:
            self.command("SELECT", str(db))

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def __enter__(self) -> RespConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def command(self, *args: str | bytes | int) -> RespValue:
        parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        out = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        self._sock.sendall(out)
        return self._read()

    def _read(self) -> RespValue:
        line = self._file.readline()
        if not line:
            raise ConnectionError("Redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self._file.read(size + 2)
            return data[:-2]
        if kind == b"*":
            count = int(rest)
            return None if count < 0 else [self._read() for _ in range(count)]
        raise RedisError(f"unexpected reply {line!r}")


_REDIS_LOCK = "jobengine-tests:db-lock:{}"
_REDIS_LOCK_TTL = 900  # seconds; longer than any test's timeout, short enough to recover from a crash
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"


def _holder_is_dead(value: bytes) -> bool:
    # Lock values are "<pid>:<token>"; a holder whose process is gone (killed test run) left it behind.
    pid = value.split(b":", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@contextlib.contextmanager
def redis_database(info: ServiceInfo | None = None, wait: float = 30.0) -> Iterator[str]:
    """Claim a Redis db number (1-15) for this test alone, yield ``redis://host:port/N``, flush it after.

    Only the claimed db is flushed, at claim time (leftovers of a crashed run) and at the end.
    Fails after ``wait`` seconds if every db stays claimed.
    """
    info = require_service("redis") if info is None else info
    token = f"{os.getpid()}:{uuid.uuid4().hex}"
    deadline = time.monotonic() + wait
    with RespConnection(info.host, info.port) as admin:
        claimed = None
        while claimed is None:
            for db in range(1, 16):
                key = _REDIS_LOCK.format(db)
                if admin.command("SET", key, token, "NX", "EX", _REDIS_LOCK_TTL) == "OK":
                    claimed = db
                    break
                holder = admin.command("GET", key)
                if isinstance(holder, bytes) and _holder_is_dead(holder):
                    # A killed run's lock: release it (only if unchanged); the next sweep may claim it.
                    admin.command("EVAL", _RELEASE, 1, key, holder)
            if claimed is None:
                if time.monotonic() > deadline:
                    pytest.fail(f"Redis on {info.host}:{info.port}: all test dbs 1-15 stayed claimed for {wait}s")
                time.sleep(0.1)
        lock = _REDIS_LOCK.format(claimed)
        try:
            with RespConnection(info.host, info.port, db=claimed) as conn:
                conn.command("FLUSHDB")
            yield f"{info.url}/{claimed}"
        finally:
            with RespConnection(info.host, info.port, db=claimed) as conn:
                conn.command("FLUSHDB")
            admin.command("EVAL", _RELEASE, 1, lock, token)
