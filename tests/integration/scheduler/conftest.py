"""An engine with a manual clock on every backend (SQLite, PostgreSQL), for the scheduler's tests.

Tests drive time by hand (``clock.set`` / ``clock.advance``) and call the scheduler's passes themselves
(``engine.scheduler.fire_due_schedules()``), so each case is exact and takes milliseconds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from jobengine.core.clock import ManualClock
from jobengine.engine import Engine
from jobengine.settings import Settings

T0 = 1_700_000_000.0  # a multiple of 10, 20, 50 and 100: interval ticks fall on round offsets from it


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The PostgreSQL runs need the service (skip locally without it, fail under CI)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "postgres" in callspec.params.values():
            item.add_marker(pytest.mark.service("postgres"))


@pytest.fixture(scope="session")
def scheduler_pg_dsn() -> Iterator[str]:
    """One database for these tests; each takes a schema of its own in it (a schema costs ~0.05 s, a
    database ~0.5 s)."""
    from support.services import postgres_database

    with postgres_database() as dsn:
        yield dsn


def settings_for(kind: str, request: pytest.FixtureRequest, tmp_path: Path, **values: object) -> Settings:
    """Settings on a fresh database of ``kind``: sqlite (a file) or postgres (a schema)."""
    if kind == "sqlite":
        return Settings(database=str(tmp_path / "scheduler.db"), **values)  # type: ignore[arg-type]
    from support.services import unique_name

    dsn = request.getfixturevalue("scheduler_pg_dsn")
    return replace(Settings(database=dsn, **values), postgres_schema=unique_name("sched"))  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", "postgres"])
async def engine(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> AsyncIterator[Engine]:
    settings = settings_for(request.param, request, tmp_path, scheduler_misfire_grace=15.0)
    async with Engine.from_settings(settings, clock) as e:
        yield e
