"""Run requests: run a versioned task over a set of input items, in full, incrementally from where the last
successful run of the same task and input source stopped, or marked as a simulation. Pure: the request
validates itself, and :func:`plan_items` says which items a run takes given the stream's cursor.

The items of a request are sorted and de-duplicated (:func:`item_key` is the order: numbers, then strings,
then any other JSON by its canonical text), so the same set of inputs is always the same request. A
stream (one task over one input source) has a cursor: the greatest item its last successful run reached.
An ``incremental`` run takes the items after the cursor, less those a segment of an earlier run of the
stream already did; it moves the cursor to the greatest item after the cursor only once all its segments
succeeded. A ``full`` run takes every item and moves the cursor the same way. A ``simulate`` run takes
every item, as a full run does (so it can be compared item by item with the last full run), and never
moves the cursor; its jobs see ``ctx.mode == "simulate"`` and must cause no effects. Usage::

    request = RunRequest(task="score", version="v3", mode=RunMode.INCREMENTAL, items=("a", "c", "b"),
                         source="accounts", run_id="nightly-2030-01-31")
    run = await engine.runs.start(request)       # the same request again returns the same run
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from jobengine.core import bounds, codec
from jobengine.core.models import Json, check_name
from jobengine.core.run_modes import RunMode as RunMode  # re-exported: a request names its mode
from jobengine.errors import InvalidSchedule

#: A run id a caller chooses, to make its request idempotent (the characters the HTTP paths take).
RUN_ID_RE: Final = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")
#: A task of a task pack, ``<pack>@<version, channel or sha256>:<task>`` (``jobengine.packs.jobs``).
PACK_TASK_RE: Final = re.compile(r"^([a-z][a-z0-9_-]{0,63})@[0-9A-Za-z.+\-]{1,64}:([A-Za-z0-9][A-Za-z0-9_-]{0,63})$")
MAX_ENVIRONMENT: Final = 100


class PriorityClass(StrEnum):
    """How urgent a run request is; its jobs get the priority :data:`PRIORITIES` maps it to."""

    NORMAL = "normal"
    HIGH = "high"
    EMERGENCY = "emergency"


#: The job priority of each class (a higher priority is claimed first).
PRIORITIES: Final = {PriorityClass.NORMAL: 0, PriorityClass.HIGH: 1_000, PriorityClass.EMERGENCY: 100_000}


def item_key(item: Json) -> tuple[int, float, str]:
    """The order of items and cursors: numbers, then strings, then other JSON by its canonical text."""
    if isinstance(item, int | float) and not isinstance(item, bool):
        return (0, float(item), "")
    if isinstance(item, str):
        return (1, 0.0, item)
    return (2, 0.0, codec.dumps(item, "items"))


def sorted_items(items: Iterable[Json]) -> tuple[Json, ...]:
    """``items`` sorted by :func:`item_key`, each once (equal JSON counts once)."""
    unique = {codec.dumps(i, "items"): i for i in items}
    return tuple(sorted(unique.values(), key=item_key))


def _enum(kind: type[StrEnum], value: Any, name: str) -> StrEnum:
    try:
        return kind(value)
    except ValueError:
        raise InvalidSchedule(name, f"{value!r} is not one of {', '.join(m.value for m in kind)}") from None


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What to run: ``task`` (at ``version``, an opaque label kept on the run and in each job's payload),
    ``mode``, a ``priority`` class, ``items`` (sorted and de-duplicated here), the input ``source`` they
    come from (the cursor belongs to task and source), ``environment`` (names to strings, handed to each
    job), ``run_id`` (optional: the same id with the same request makes one run; with a different
    request it is refused), ``segment_size`` items per job, and an optional ``queue`` and ``reason``.
    Raises :class:`~jobengine.errors.InvalidSchedule` naming the field."""

    task: str
    items: tuple[Json, ...] = ()
    version: str | None = None
    mode: RunMode = RunMode.FULL
    priority: PriorityClass = PriorityClass.NORMAL
    source: str = "default"
    environment: Mapping[str, str] = field(default_factory=dict)
    run_id: str | None = None
    segment_size: int = 100
    queue: str | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", _enum(RunMode, self.mode, "mode"))
        object.__setattr__(self, "priority", _enum(PriorityClass, self.priority, "priority"))
        check_name("task", self.task)
        check_name("source", self.source)
        if self.queue is not None:
            check_name("queue", self.queue)
        bounds.check_int("segment_size", self.segment_size, 1, bounds.MAX_ITEMS)
        if isinstance(self.items, str | bytes | Mapping) or not hasattr(self.items, "__len__"):
            raise InvalidSchedule("items", "must be a list of JSON values")
        if len(self.items) > bounds.MAX_ITEMS:
            raise InvalidSchedule("items", f"at most {bounds.MAX_ITEMS} items")
        bounds.check_json("items", list(self.items))
        object.__setattr__(self, "items", sorted_items(self.items))
        if self.version is not None:
            bounds.check_text("version", self.version, 200)
            if not self.version:
                raise InvalidSchedule("version", "must not be empty")
        if self.run_id is not None and (not isinstance(self.run_id, str) or not RUN_ID_RE.match(self.run_id)):
            raise InvalidSchedule("run_id", "must be 1-100 characters of letters, digits and _.:-")
        if self.reason is not None:
            bounds.check_text("reason", self.reason, 1000)
        env = self.environment
        if not isinstance(env, Mapping) or len(env) > MAX_ENVIRONMENT:
            raise InvalidSchedule("environment", f"must be an object of at most {MAX_ENVIRONMENT} names")
        for name, value in env.items():
            if not isinstance(name, str) or not 1 <= len(name) <= 200 or not isinstance(value, str):
                raise InvalidSchedule("environment", f"{name!r}: names and values must be strings")
            bounds.check_text(f"environment.{name}", value, 10_000)
        object.__setattr__(self, "environment", dict(sorted(env.items())))

    @property
    def stream(self) -> str:
        """Task and source: whose cursor this run reads and moves (a space never occurs in a name). A pack's
        task is named without its version (:func:`stream_task`): every version of it continues one stream."""
        return f"{stream_task(self.task)} {self.source}"

    @property
    def job_priority(self) -> int:
        """The priority of the run's jobs (:data:`PRIORITIES`)."""
        return PRIORITIES[self.priority]

    def to_json(self) -> dict[str, Json]:
        """The request as JSON; equal requests give equal JSON (what makes a run id idempotent)."""
        return {
            "task": self.task, "version": self.version, "mode": self.mode.value, "priority": self.priority.value,
            "source": self.source, "environment": dict(self.environment), "run_id": self.run_id,
            "segment_size": self.segment_size, "queue": self.queue, "reason": self.reason, "items": list(self.items),
        }  # fmt: skip

    def payload(self) -> dict[str, Json]:
        """What each job's payload carries besides its share of the items."""
        return {"mode": self.mode.value, "version": self.version, "environment": dict(self.environment)}


@dataclass(frozen=True, slots=True)
class ItemPlan:
    """Which items a run takes: ``todo`` (sorted), and how many it leaves out because they are at or before
    the cursor (``before_cursor``) or an earlier run's segment already did them (``done``). ``move_to``:
    where the run moves the cursor once it succeeded (None: it does not)."""

    todo: tuple[Json, ...]
    before_cursor: int
    done: int
    move_to: Json


def plan_items(request: RunRequest, cursor: Json, done: Iterable[Json]) -> ItemPlan:
    """The items ``request`` takes given its stream's ``cursor`` (None: no run succeeded yet) and the items
    earlier runs' succeeded segments did after it (``done``)."""
    items = request.items
    if request.mode is RunMode.FULL:
        return ItemPlan(items, 0, 0, items[-1] if items else None)
    if request.mode is RunMode.SIMULATE:
        return ItemPlan(items, 0, 0, None)
    after = items if cursor is None else tuple(i for i in items if item_key(i) > item_key(cursor))
    did = {codec.dumps(i, "items") for i in done}
    todo = tuple(i for i in after if codec.dumps(i, "items") not in did)
    move_to = after[-1] if after else None
    return ItemPlan(todo, len(items) - len(after), len(after) - len(todo), move_to)


def stream_task(task: str) -> str:
    """The task part of a stream: ``task``, or for a pack's task ``<pack>@*:<task>`` whatever version or
    channel it names, so a new version is compared with, and continues from, the runs of the one before."""
    m = PACK_TASK_RE.match(task)
    return task if m is None else f"{m.group(1)}@*:{m.group(2)}"


def later(value: Json, than: Json) -> bool:
    """Whether cursor ``value`` is past ``than`` (None: no cursor yet)."""
    return than is None or item_key(value) > item_key(than)


def request_of(data: Json) -> dict[str, Json]:
    """The run request kept in a run's ``trigger_data`` (empty for a run no request made)."""
    request = data.get("request") if isinstance(data, dict) else None
    return request if isinstance(request, dict) else {}
