"""A pack command the server refuses prints one ``error:`` line naming the field at fault once, whether
the server's detail names it (a malformed request) or not (a value the engine refused)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobengine.cli.main import main
from jobengine.engine import Engine
from jobengine.http.server import ApiService
from jobengine.settings import Settings

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    settings = Settings(database=str(tmp_path / "jobs.db"), packs_cache_dir=str(tmp_path / "c"))
    async with Engine.from_settings(settings) as engine:
        _, key = await engine.keys.create("default", ["packs:read", "packs:write", "packs:approve"], "dev")
        api = ApiService(engine, engine.settings, host="127.0.0.1", port=0)
        await api.start()
        try:
            yield api.url, key
        finally:
            await api.stop()


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


async def test_a_refused_pack_command_names_the_field_once(
    served: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, key = served
    common = ("--url", url, "--key", key)
    # The query string is malformed: the server's detail starts with the field.
    code, err = await asyncio.to_thread(cli, capsys, "pack", "list", "x" * 201, *common)
    assert code == 2, err
    line = " ".join(err.split())
    assert line.startswith("error: q: String should have at most 200 characters (HTTP 422)"), line
    assert line.count("q:") == 1
    # A reason too long for the server's model, on an action.
    code, err = await asyncio.to_thread(cli, capsys, "pack", "reject", "scores@1.0.0", "--reason", "r" * 1001, *common)
    assert code == 2, err
    line = " ".join(err.split())
    assert line.startswith("error: reason: "), line
    assert line.count("reason:") == 1
