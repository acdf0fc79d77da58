"""Shared by every tier: service fixtures (PostgreSQL, Redis, NATS) and the ``service`` marker.

A test that needs a service either asks for its fixture (``postgres_dsn``, ``redis_url``, ``nats_url``)
or carries ``@pytest.mark.service("redis")``. Either way a missing service skips the test locally and
fails it when ``CI`` is set; see ``tests/support/services.py`` for the policy and the isolation rules.
Tests that use a service fixture get the ``service`` marker automatically, so ``-m "not service"``
runs everything that needs no server.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Make ``support`` importable whatever pytest's import mode or the presence of tests/__init__.py.
_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

from support.services import (  # noqa: E402
    postgres_database,
    redis_database,
    require_service,
    unique_name,
)

# pytest-xdist hands its workers COLUMNS=80 (the terminal it started from); the CLI reads it, as it should,
# and would wrap and cut the lines the tests match. Every test sees the environment of a plain pipe.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

_SERVICE_FIXTURES = {"postgres_dsn": "postgres", "redis_url": "redis", "nats_url": "nats"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture, service in _SERVICE_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.service(service))
    # The multi-process acceptance tests (up to a minute each, mostly waiting) go first, so that under
    # pytest-xdist they overlap the thousand quick ones instead of running alone at the end. Stable sort:
    # the order within each group stays the collection order.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers("service"):
        for name in marker.args:
            require_service(name)


@pytest.fixture
def postgres_dsn() -> Iterator[str]:
    """DSN of a fresh database for this test alone (postgresql://postgres@127.0.0.1:5432/<name>)."""
    with postgres_database() as dsn:
        yield dsn


@pytest.fixture
def redis_url() -> Iterator[str]:
    """``redis://127.0.0.1:6379/<N>``: a db number claimed for this test alone, flushed afterwards."""
    with redis_database() as url:
        yield url


@pytest.fixture
def nats_url() -> str:
    """``nats://127.0.0.1:4222``; the server is shared, so name streams and subjects with ``unique_name``."""
    return require_service("nats").url


@pytest.fixture(name="unique_name")
def unique_name_fixture() -> str:
    """A name no other test uses, e.g. ``jet_1234_0af3...``: a stream, schema or key prefix."""
    return unique_name()
