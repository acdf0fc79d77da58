"""``jobengine worker --remote URL --key K --app module:attr``: the tasks of an Engine or an SDK TaskApp,
run by a worker that reaches the server over HTTP only (:mod:`jobengine.sdk`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobengine.cli.supervise import EarlySignals, Supervisor
from jobengine.errors import ConfigError
from jobengine.sdk.source import HttpWorkerSource
from jobengine.sdk.worker import RemoteWorker
from jobengine.services import Service, WorkerService
from jobengine.tasks import TaskRegistry


def load_tasks(target: str) -> TaskRegistry:
    """The task registry of ``module:attr``: an Engine, a TaskApp, or a function returning one."""
    import importlib
    import inspect
    import os
    import sys

    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"app: expected module:attribute (like myapp.jobs:app), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"app: cannot import module {module_name!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"app: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(getattr(obj, "tasks", None), TaskRegistry) and callable(obj) and not inspect.isclass(obj):
        obj = obj()
    registry = getattr(obj, "tasks", None)
    if not isinstance(registry, TaskRegistry):
        raise ConfigError(f"app: {target} is a {type(obj).__name__}; expected an Engine or a jobengine.sdk.TaskApp")
    return registry


class _StopClaims:
    """Stopped before the worker (services stop in reverse): ends a claim's long-poll at once."""

    name = "claims"

    def __init__(self, source: HttpWorkerSource) -> None:
        self.source = source

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self.source.interrupt()


async def run_remote(
    url: str, key: str | None, tasks: TaskRegistry, options: dict[str, Any], early: EarlySignals | None = None,
    before: Sequence[Service] = (),
) -> None:  # fmt: skip
    """Run a remote worker until a signal; ``before``: services started before it and stopped after it."""
    remote = RemoteWorker(url, key=key, tasks=tasks, **options)
    service = WorkerService(remote.worker)
    try:
        async with Supervisor(service, early) as supervisor:
            await supervisor.serve([*before, service, _StopClaims(remote.source)])
    finally:
        await remote.client.aclose()
