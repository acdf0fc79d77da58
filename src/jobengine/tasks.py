"""Task definitions: named code a job runs, optionally as ordered phases.

A task is registered on an :class:`~jobengine.engine.Engine` (no global registry)::

    @engine.task(queue="mail", max_attempts=5)
    async def send_email(ctx: JobContext) -> dict:
        ...

    engine.add_task("etl", phases=[extract, transform, load])  # each phase: fn(ctx) -> result
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobengine.core.models import check_name
from jobengine.core.retry import RetryPolicy
from jobengine.errors import ConfigError

TaskFn = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class PhaseSpec:
    name: str
    fn: TaskFn
    is_async: bool


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A registered task. Without explicit phases it has one implicit phase that is not persisted unless
    the task reports progress or saves a checkpoint (so a plain task costs no extra writes)."""

    name: str
    phases: tuple[PhaseSpec, ...]
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    explicit_phases: bool = False
    #: For a task that takes named arguments: raises InvalidJob naming the field of a payload that cannot
    #: be them, so an enqueue by name (the HTTP API, another language) is refused before it is stored.
    check_payload: Callable[[Any], None] | None = None

    @property
    def phase_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.phases) if self.explicit_phases else ()


def phase(name: str, fn: TaskFn) -> PhaseSpec:
    """Name a phase explicitly: ``engine.add_task("etl", phases=[phase("extract", pull), ...])``."""
    return PhaseSpec(check_name("phase", name), fn, inspect.iscoroutinefunction(fn))


def make_spec(
    name: str,
    fn: TaskFn | None,
    phases: Sequence[TaskFn | PhaseSpec] | None,
    *,
    queue: str,
    priority: int,
    max_attempts: int,
    timeout: float | None,
    retry: RetryPolicy | None,
) -> TaskSpec:
    check_name("task", name)
    check_name("queue", queue)
    if (fn is None) == (not phases):
        raise ConfigError(f"task {name!r}: give either a function or a list of phases")
    if fn is not None:
        specs: tuple[PhaseSpec, ...] = (PhaseSpec("run", fn, inspect.iscoroutinefunction(fn)),)
    else:
        specs = tuple(p if isinstance(p, PhaseSpec) else phase(p.__name__, p) for p in phases or ())
        names = [p.name for p in specs]
        if len(set(names)) != len(names):
            raise ConfigError(f"task {name!r}: phase names must be unique, got {names}")
    if timeout is not None and timeout <= 0:
        raise ConfigError(f"task {name!r}: timeout must be positive")
    return TaskSpec(
        name=name,
        phases=specs,
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        timeout=timeout,
        retry=retry or RetryPolicy(),
        explicit_phases=fn is None,
    )


class TaskRegistry:
    def __init__(self) -> None:
        self._tasks: dict[str, TaskSpec] = {}

    def add(self, spec: TaskSpec) -> None:
        if spec.name in self._tasks:
            raise ConfigError(f"task {spec.name!r} is registered twice")
        self._tasks[spec.name] = spec

    def get(self, name: str) -> TaskSpec | None:
        return self._tasks.get(name)

    def phase_names(self, task: str) -> tuple[str, ...]:
        """The stored phases of ``task``'s jobs (none for a task with one implicit phase, or one not here)."""
        spec = self._tasks.get(task)
        return spec.phase_names if spec else ()

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def queues(self) -> list[str]:
        return sorted({t.queue for t in self._tasks.values()} | {"default"})

    def __iter__(self) -> Iterator[TaskSpec]:
        return iter(self._tasks.values())
