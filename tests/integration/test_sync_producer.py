"""The sync producer as a user writes it: a script that enqueues with ``enqueue_sync`` and ends, run as its own
process on every backend. It says nothing on stderr at exit, whether it closes the engine (``with``) or never
does; a fresh SQLite file is migrated on first use; a PostgreSQL database nobody migrated is one line naming
``jobengine migrate``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobengine import Engine, Settings
from support.fleet import drop_fleet_streams, nats_yaml

ROOT = Path(__file__).resolve().parents[2]

PRODUCER = """
import sys
from jobengine import Engine, Settings
from jobengine.errors import StoreError

settings = Settings.load(sys.argv[1])
mode = sys.argv[2]
if mode == "with":
    with Engine.from_settings(settings) as engine:
        for n in range(3):
            print(engine.enqueue_sync("report", {"n": n}).id)
elif mode == "plain":  # never closed: the process just ends
    engine = Engine.from_settings(settings)
    for n in range(3):
        print(engine.enqueue_sync("report", {"n": n}).id)
else:  # "error": what the user is told
    engine = Engine.from_settings(settings)
    try:
        engine.enqueue_sync("report", {"n": 0})
    except StoreError as exc:
        print(exc)
"""


def produce(tmp_path: Path, config: str, mode: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "producer.py").write_text(PRODUCER)
    (tmp_path / "jobengine.yaml").write_text(config)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env = {k: v for k, v in env.items() if not k.startswith("JOBENGINE_")}
    return subprocess.run(
        [sys.executable, str(tmp_path / "producer.py"), str(tmp_path / "jobengine.yaml"), mode],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip


def stored(config: Path, ids: list[str]) -> list[str]:
    async def go() -> list[str]:
        async with Engine.from_settings(Settings.load(config)) as engine:
            return [j.task for j in await engine.get_jobs(ids)]

    return asyncio.run(go())


@pytest.fixture
def nats_name(unique_name: str) -> Iterator[str]:
    yield unique_name
    asyncio.run(drop_fleet_streams(unique_name))


def config_for(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"database: {tmp_path / 'jobs.db'}\n"
    dsn = request.getfixturevalue("postgres_dsn")
    if kind == "postgres":
        return f"database: {dsn}\n"
    if kind == "redis":
        url = request.getfixturevalue("redis_url")
        return f"database: {dsn}\nqueue:\n  kind: redis\n  redis:\n    url: {url}\n"
    url = request.getfixturevalue("nats_url")
    return f"database: {dsn}\n" + nats_yaml(request.getfixturevalue("nats_name")) + f"    url: {url}\n"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["with", "plain"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis", "nats"])
def test_a_sync_producer_exits_without_a_word_on_stderr(
    kind: str, mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    config = config_for(kind, tmp_path, request)
    if mode == "plain" and kind != "sqlite":  # a server's schema is migrated by a deployment step
        (tmp_path / "migrate.yaml").write_text(config)
        stored(tmp_path / "migrate.yaml", [])
    done = produce(tmp_path, config, mode)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    ids = done.stdout.split()
    assert len(ids) == 3
    assert stored(tmp_path / "jobengine.yaml", ids) == ["report"] * 3


@pytest.mark.slow
def test_a_postgres_database_nobody_migrated_is_one_line_naming_migrate(tmp_path: Path, postgres_dsn: str) -> None:
    done = produce(tmp_path, f"database: {postgres_dsn}\n", "error")
    assert done.returncode == 0, done.stderr
    message = done.stdout.strip()
    assert "\n" not in message and "run `jobengine migrate`" in message, message
    assert done.stderr == ""


@pytest.mark.slow
def test_a_fresh_sqlite_file_is_migrated_on_the_first_sync_call(tmp_path: Path) -> None:
    done = produce(tmp_path, f"database: {tmp_path / 'new.db'}\n", "plain")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == 3
