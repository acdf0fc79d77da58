"""``Engine.enqueue``, ``enqueue_sync`` and the SDK's ``ApiClient.enqueue`` take the job options by name,
typed: a misspelt option is a mypy error where it is written, and a TypeError naming it (and the method
called) at run time."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from jobengine.engine import Engine
from jobengine.http.schemas import JobIn
from jobengine.sdk import ApiClient
from jobengine.settings import Settings
from support.services import unavailable

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("method", [Engine.enqueue, Engine.enqueue_sync])
def test_enqueue_takes_every_option_of_new_job_by_name(method: object) -> None:
    params = inspect.signature(method).parameters  # type: ignore[arg-type]
    assert not [p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD], params
    options = [name for name, p in inspect.signature(Engine.new_job).parameters.items() if p.kind is p.KEYWORD_ONLY]
    for name in options:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].annotation == inspect.signature(Engine.new_job).parameters[name].annotation, name


def test_the_sdk_clients_enqueue_takes_the_apis_job_fields_by_name() -> None:
    params = inspect.signature(ApiClient.enqueue).parameters
    assert not [p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD], params
    options = {name for name, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert options == set(JobIn.model_fields) - {"task", "payload"}


async def test_a_misspelt_option_is_a_type_error_naming_it() -> None:
    async with Engine.from_settings(Settings(database="memory")) as engine:
        with pytest.raises(TypeError, match=r"enqueue\(\) got an unexpected keyword argument 'prority'"):
            await engine.enqueue("t", prority=5)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"enqueue_sync\(\) got an unexpected keyword argument 'prority'"):
            engine.enqueue_sync("t", prority=5)  # type: ignore[call-arg]
        job = await engine.enqueue("t", priority=5, queue="q")
        assert (job.priority, job.queue) == (5, "q")
        assert sum((await engine.count_jobs()).values()) == 1


@pytest.mark.timeout(300)
def test_mypy_reports_a_misspelt_option(tmp_path: Path) -> None:
    try:
        import mypy  # noqa: F401
    except ImportError:
        unavailable("mypy is not installed in this environment (pip install -e '.[dev]', or `make venv`)")
    snippet = tmp_path / "use_engine.py"
    snippet.write_text(
        "from jobengine.engine import Engine\n"
        "from jobengine.sdk import ApiClient\n\n\n"
        "async def use(engine: Engine, api: ApiClient) -> None:\n"
        '    await engine.enqueue("t", prority=5)\n'
        '    engine.enqueue_sync("t", prority=5)\n'
        '    await api.enqueue("t", prority=5)\n'
        '    await engine.enqueue("t", {"n": 1}, priority=5, queue="q", delay=1.5, depends_on=["a"])\n'
        '    await api.enqueue("t", {"n": 1}, priority=5, queue="q", delay=1.5, depends_on=["a"])\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"),
         str(snippet)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    errors = [line for line in proc.stdout.splitlines() if ": error: " in line]
    assert [line.split(":")[1] for line in errors] == ["6", "7", "8"], proc.stdout + proc.stderr
    assert all('Unexpected keyword argument "prority"' in line for line in errors), proc.stdout
