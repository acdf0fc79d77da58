"""Jobs that name a pack's task: ``<pack>@<version or channel>:<task>`` (``hello@1.2.0:greet``,
``hello@stable:greet``).

At enqueue (:func:`resolve_jobs`, called by ``Engine.enqueue_many``) the reference is resolved to an approved
version's digest, which the job keeps (``<pack>@<sha256>:<task>``), so a retry, a worker elsewhere or a later
deprecation runs exactly the code that was approved when the job was accepted. What is refused (InvalidJob
naming ``task`` or ``payload``) and which manifest defaults apply: docs/packs.md.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from jobengine.core.models import NewJob
from jobengine.core.schedules import JobTemplate, ScheduleSpec
from jobengine.errors import InvalidJob, InvalidSchedule, NotFound
from jobengine.packs.manifest import payload_errors
from jobengine.packs.registry import SHA256, PackRegistry
from jobengine.ports.packs import PackStatus, PackVersion

log = logging.getLogger("jobengine.packs")

TASK_REF = re.compile(r"^([a-z][a-z0-9_-]{0,63})@([0-9A-Za-z.+\-]{1,64}):([A-Za-z0-9][A-Za-z0-9_-]{0,63})$")


class TaskRef(NamedTuple):
    pack: str
    ref: str  # a version, a channel, or (once resolved) a sha256
    task: str


def parse_task(task: str) -> TaskRef | None:
    """The pack reference of a task name, or None for an ordinary task."""
    if "@" not in task:
        return None
    m = TASK_REF.match(task)
    if m is None:
        raise InvalidJob("task", f"a pack task is <pack>@<version>:<task> (like hello@1.2.0:greet), got {task!r}")
    return TaskRef(m.group(1), m.group(2), m.group(3))


def task_name(pack: str, sha256: str, task: str) -> str:
    """The task name a job keeps, and under which a worker registers the pack's task."""
    return f"{pack}@{sha256}:{task}"


@dataclass(frozen=True, slots=True)
class Resolved:
    task: str  # <pack>@<sha256>:<task>
    version: PackVersion
    spec: Mapping[str, Any]  # the task's entry in the manifest


async def resolve_task(
    registry: PackRegistry,
    task: str,
    cache: dict[tuple[str, str], PackVersion] | None = None,
    field: str = "task",
    *,
    pending: bool = False,
) -> Resolved | None:
    """The approved version a pack task name resolves to (None for an ordinary task). Raises InvalidJob
    naming ``field`` for an unknown or unapproved version or an unknown task. ``pending``: a version that
    awaits approval is accepted too (for a simulate run, whose jobs cause no effects)."""
    ref = parse_task(task)
    if ref is None:
        return None
    key = (ref.pack, ref.ref)
    cache = cache if cache is not None else {}
    if key not in cache:
        cache[key] = await _version(registry, ref, field)
    version = cache[key]
    label = f"{version.name}@{version.version}"
    if version.status is PackStatus.DEPRECATED:
        log.warning("pack %s is deprecated (%s); new jobs should use another version", label,
                    version.status_reason or "no reason given")  # fmt: skip
    elif version.status is not PackStatus.APPROVED and not (pending and version.status is PackStatus.PENDING):
        raise InvalidJob(field, f"pack {label} is {version.status.value}: only approved versions run")
    spec = version.manifest.get("tasks", {}).get(ref.task)
    if spec is None:
        known = ", ".join(sorted(version.manifest.get("tasks", {})))
        raise InvalidJob(field, f"pack {label} has no task {ref.task!r} (it has: {known})")
    return Resolved(task_name(version.name, version.sha256, ref.task), version, spec)


async def resolve_jobs(registry: PackRegistry, jobs: Sequence[NewJob]) -> list[NewJob]:
    out = []
    cache: dict[tuple[str, str], PackVersion] = {}
    for job in jobs:
        found = await resolve_task(registry, job.task, cache)
        if found is None:
            out.append(job)
            continue
        spec = found.spec
        schema = spec.get("payload_schema")
        if schema is not None:
            problems = payload_errors(schema, job.payload)
            if problems:
                label = f"{found.version.name}@{found.version.version}:{job.task.rpartition(':')[2]}"
                raise InvalidJob("payload", f"does not match {label}'s payload_schema: {'; '.join(problems)}")
        changes: dict[str, object] = {"task": found.task}
        if job.queue == "default":
            changes["queue"] = spec.get("queue", "default")
        if job.max_attempts == 3:
            changes["max_attempts"] = spec.get("max_attempts", 3)
        if job.timeout is None and spec.get("timeout") is not None:
            changes["timeout"] = spec["timeout"]
        out.append(dataclasses.replace(job, **changes))  # type: ignore[arg-type]
    return out


async def resolve_schedule(registry: PackRegistry, spec: ScheduleSpec) -> ScheduleSpec:
    """Pin a schedule's template that names a pack task to the approved version's digest (a channel is
    resolved once, here: the schedule keeps that digest until its template changes). InvalidSchedule
    naming ``template.task`` otherwise; the template's queue follows the manifest when left at default."""
    if not isinstance(spec.template, JobTemplate):
        return spec  # a graph template names no pack task (refused by its constructor)
    try:
        found = await resolve_task(registry, spec.template.task, field="template.task")
    except InvalidJob as exc:
        raise InvalidSchedule(exc.field, exc.message) from None
    if found is None:
        return spec
    template = dataclasses.replace(spec.template, task=found.task)
    if template.queue in (None, "default"):
        template = dataclasses.replace(template, queue=found.spec.get("queue", "default"))
    return dataclasses.replace(spec, template=template)


async def _version(registry: PackRegistry, ref: TaskRef, field: str) -> PackVersion:
    try:
        if SHA256.match(ref.ref):
            found = [v for v in await registry.store.pack_versions_by_digest(ref.ref) if v.name == ref.pack]
            if not found:
                raise NotFound("pack content", ref.ref)
            return found[0]
        return await registry.resolve(ref.pack, ref.ref)
    except NotFound:
        raise InvalidJob(field, f"no pack version {ref.pack}@{ref.ref}") from None
