"""The contract suite runs every test once per Store backend, through the ``store`` fixture.

A backend is one entry in :data:`BACKENDS`: a factory that takes the pytest request (so it can ask for
``tmp_path``, ``postgres_dsn`` or any other fixture it needs) and returns an async context manager that
yields a migrated, empty store and closes it afterwards. Adding PostgreSQL is one more entry, e.g.::

    @asynccontextmanager
    async def postgres_store(request):
        store = PostgresStore(request.getfixturevalue("postgres_dsn"))
        ...

Run one backend alone with ``-k sqlite`` / ``-k postgres`` / ``-k pgbouncer`` (PostgreSQL behind a PgBouncer in
transaction mode, with ``direct_dsn`` for its sessions; it skips without Debian's ``pgbouncer``, and fails
under CI). ``database: memory`` is SQLite in a temporary
file, so the SQLite runs cover it; the reference of the parity test is not a backend (``oracle.py``). A test
of what only some stores can do is marked ``@pytest.mark.capability("shared")`` (a field of
:class:`~jobengine.ports.store.Capabilities`): it is skipped on the stores that do not declare it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import MappingProxyType

import pytest

from jobengine.backends.sqlite import SqliteStore
from jobengine.core.clock import ManualClock
from jobengine.ports.store import Store

from .helpers import T0

StoreFactory = Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[Store]]


@asynccontextmanager
async def sqlite_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    tmp_path = request.getfixturevalue("tmp_path")
    store = SqliteStore(str(tmp_path / "jobengine.db"))
    await store.migrate()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture(scope="session")
def postgres_contract_dsn() -> Iterator[str]:
    """One database for the whole contract run; each test takes a schema of its own in it (creating a
    database costs ~0.5 s, a schema and its migration ~0.05 s)."""
    from support.services import postgres_database

    with postgres_database() as dsn:
        yield dsn


@asynccontextmanager
async def postgres_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    dsn = request.getfixturevalue("postgres_contract_dsn")  # skips (fails under CI) without PostgreSQL
    from jobengine.backends.postgres import PostgresStore
    from support.services import unique_name

    store = PostgresStore(dsn, schema=unique_name("contract"), pool_max=4)
    await store.migrate()
    try:
        yield store
    finally:
        await store.drop_schema()
        await store.close()


@pytest.fixture(scope="session")
def pgbouncer_contract_dsn(postgres_contract_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The contract database through a PgBouncer in transaction mode (one for the whole run)."""
    from support.pgbouncer import pgbouncer

    with pgbouncer(postgres_contract_dsn, tmp_path_factory.mktemp("pgbouncer")) as bouncer:
        yield bouncer.dsn


@asynccontextmanager
async def pgbouncer_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """PostgreSQL behind PgBouncer in transaction mode, sessions direct (the ``database_direct`` setting)."""
    direct = request.getfixturevalue("postgres_contract_dsn")
    pooled = request.getfixturevalue("pgbouncer_contract_dsn")
    from jobengine.backends.postgres import PostgresStore
    from support.services import unique_name

    store = PostgresStore(pooled, direct_dsn=direct, schema=unique_name("contract"), pool_max=4)
    await store.migrate()
    try:
        yield store
    finally:
        await store.drop_schema()
        await store.close()


BACKENDS: Mapping[str, StoreFactory] = MappingProxyType(
    {"sqlite": sqlite_store, "postgres": postgres_store, "pgbouncer": pgbouncer_store}
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "capability(name): run only on the stores whose capabilities declare ``name`` (skip the rest)"
    )


#: The modules run through PgBouncer too: the calls of a claim's path and those that hold a session (leases,
#: notifications, liveness locks, flow counts); the other modules' SQL is no different through a pooler.
POOLED = frozenset(
    {"test_insert", "test_fetch", "test_lease", "test_fail", "test_workers", "test_notifier",
     "test_finished_notifier", "test_flow"}
)  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """PostgreSQL runs of the suite need the service (skip locally without it, fail under CI); PgBouncer
    runs only the :data:`POOLED` modules."""
    unpooled = [
        i for i in items
        if getattr(getattr(i, "callspec", None), "params", {}).get("store") == "pgbouncer"
        and i.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py") not in POOLED
    ]  # fmt: skip
    if unpooled:
        config.hook.pytest_deselected(items=unpooled)
        gone = {id(i) for i in unpooled}
        items[:] = [i for i in items if id(i) not in gone]
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and any(v in ("postgres", "pgbouncer") for v in callspec.params.values()):
            item.add_marker(pytest.mark.service("postgres"))


@pytest.fixture(params=list(BACKENDS))
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    async with BACKENDS[request.param](request) as backend:
        for marker in request.node.iter_markers("capability"):
            (name,) = marker.args
            if not getattr(backend.capabilities, name):
                pytest.skip(f"the {request.param} store does not declare {name}")
        yield backend


@pytest.fixture
def clock() -> ManualClock:
    """The time every store call is given; tests move it explicitly."""
    return ManualClock(T0)
