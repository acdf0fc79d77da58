"""The pack manifest, ``jobengine-pack.yaml`` (or ``jobengine-pack.toml``) at the root of a pack::

    name: hello                      # [a-z][a-z0-9_-]*, at most 64 characters
    version: 1.2.0                   # semantic version
    description: Greets people.
    min_engine_version: 0.1.0        # optional: refuse to load on an older engine
    requires: ["orjson>=3.9"]        # optional: packages that must already be installed on the worker
    tasks:
      greet:                         # task name: [A-Za-z0-9][A-Za-z0-9_-]*, at most 64 characters
        entry: hello.tasks:greet     # module:function, module relative to the pack root
        queue: default               # optional defaults of jobs of this task
        max_attempts: 3
        timeout: 30
        payload_schema: {type: object, required: [who]}   # optional JSON Schema of the payload
      etl:
        phases:                      # or ordered phases instead of one entry
          - {name: extract, entry: hello.etl:extract}
          - {name: load, entry: hello.etl:load}

Parsing is strict: unknown keys, wrong types and malformed values raise :class:`InvalidPack` naming the
field (``tasks.greet.entry``). Pure: no I/O besides what the caller hands in.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from packaging.requirements import InvalidRequirement, Requirement

from jobengine.core.models import check_name
from jobengine.errors import InvalidJob
from jobengine.packs import semver
from jobengine.packs.errors import InvalidPack

MANIFEST_NAMES = ("jobengine-pack.yaml", "jobengine-pack.toml")
MAX_MANIFEST_BYTES = 256 * 1024
PACK_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
ENTRY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):([A-Za-z_][A-Za-z0-9_]*)$")

_TOP = {"name", "version", "description", "min_engine_version", "requires", "tasks"}
_TASK = {"entry", "phases", "queue", "priority", "max_attempts", "timeout", "payload_schema", "description"}


@dataclass(frozen=True, slots=True)
class PhaseEntry:
    name: str
    entry: str  # module:function

    @property
    def module(self) -> str:
        return self.entry.partition(":")[0]

    @property
    def function(self) -> str:
        return self.entry.partition(":")[2]


@dataclass(frozen=True, slots=True)
class TaskDef:
    name: str
    phases: tuple[PhaseEntry, ...]
    explicit_phases: bool = False
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    payload_schema: Mapping[str, Any] | bool | None = None
    description: str = ""


@dataclass(frozen=True, slots=True)
class Manifest:
    name: str
    version: str
    description: str = ""
    min_engine_version: str | None = None
    requires: tuple[str, ...] = ()
    tasks: tuple[TaskDef, ...] = field(default_factory=tuple)

    def task(self, name: str) -> TaskDef | None:
        return next((t for t in self.tasks if t.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "min_engine_version": self.min_engine_version,
            "requires": list(self.requires),
            "tasks": {
                t.name: {
                    **(
                        {"phases": [{"name": p.name, "entry": p.entry} for p in t.phases]}
                        if t.explicit_phases
                        else {"entry": t.phases[0].entry}
                    ),
                    "queue": t.queue,
                    "priority": t.priority,
                    "max_attempts": t.max_attempts,
                    "timeout": t.timeout,
                    "payload_schema": t.payload_schema,
                    "description": t.description,
                }
                for t in self.tasks
            },
        }


def loads(text: bytes, filename: str) -> Manifest:
    """Parse the manifest file ``filename`` (``.yaml`` or ``.toml``). Raises InvalidPack naming the field."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise InvalidPack("manifest", f"{filename} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        decoded = text.decode("utf-8")
        data: object = tomllib.loads(decoded) if filename.endswith(".toml") else yaml.safe_load(decoded)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise InvalidPack("manifest", f"{filename} cannot be parsed: {exc}") from None
    return from_mapping(data)


def from_mapping(data: object) -> Manifest:
    """Validate a parsed manifest. Raises InvalidPack naming the first field at fault."""
    if not isinstance(data, dict):
        raise InvalidPack("manifest", "must be a mapping of name, version, tasks, ...")
    _no_unknown(data, _TOP, "")
    name = data.get("name")
    if not isinstance(name, str) or not PACK_NAME.match(name):
        raise InvalidPack(
            "name", f"must be 1-64 characters of a-z, 0-9, _ and -, starting with a letter (got {name!r})"
        )
    version = data.get("version")
    try:
        semver.parse(version)
    except ValueError as exc:
        raise InvalidPack("version", str(exc)) from None
    assert isinstance(version, str)
    description = _string(data.get("description", ""), "description", 2000)
    min_engine = data.get("min_engine_version")
    if min_engine is not None:
        try:
            semver.parse(min_engine)
        except ValueError as exc:
            raise InvalidPack("min_engine_version", str(exc)) from None
    requires = data.get("requires", [])
    if not isinstance(requires, list):
        raise InvalidPack("requires", "must be a list of requirements like 'orjson>=3.9'")
    for i, req in enumerate(requires):
        if not isinstance(req, str):
            raise InvalidPack(f"requires[{i}]", f"must be a string, got {req!r}")
        try:
            parsed = Requirement(req)
        except InvalidRequirement as exc:
            raise InvalidPack(f"requires[{i}]", f"not a requirement: {exc}") from None
        if parsed.url:
            raise InvalidPack(f"requires[{i}]", "must name a package, not a URL (workers install nothing)")
    tasks = data.get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        raise InvalidPack("tasks", "must be a mapping of at least one task name to its definition")
    defs = tuple(_task(str(k), v) for k, v in tasks.items())
    return Manifest(name, version, description, min_engine, tuple(requires), defs)


def _task(name: str, data: object) -> TaskDef:
    where = f"tasks.{name}"
    if not TASK_NAME.match(name):
        raise InvalidPack(where, "a task name must be 1-64 characters of letters, digits, _ and -")
    if not isinstance(data, dict):
        raise InvalidPack(where, "must be a mapping with entry (or phases)")
    _no_unknown(data, _TASK, where)
    if ("entry" in data) == ("phases" in data):
        raise InvalidPack(where, "give either entry or phases")
    if "entry" in data:
        phases: tuple[PhaseEntry, ...] = (PhaseEntry("run", _entry(data["entry"], f"{where}.entry")),)
    else:
        raw = data["phases"]
        if not isinstance(raw, list) or not raw:
            raise InvalidPack(f"{where}.phases", "must be a non-empty list of {name, entry}")
        out = []
        for i, p in enumerate(raw):
            at = f"{where}.phases[{i}]"
            if not isinstance(p, dict) or set(p) != {"name", "entry"}:
                raise InvalidPack(at, "must be a mapping of exactly name and entry")
            pname = p["name"]
            if not isinstance(pname, str) or not TASK_NAME.match(pname):
                raise InvalidPack(f"{at}.name", f"must be 1-64 letters, digits, _ and - (got {pname!r})")
            out.append(PhaseEntry(pname, _entry(p["entry"], f"{at}.entry")))
        if len({p.name for p in out}) != len(out):
            raise InvalidPack(f"{where}.phases", "phase names must be unique")
        phases = tuple(out)
    queue = data.get("queue", "default")
    try:
        check_name("queue", queue)
    except InvalidJob as exc:
        raise InvalidPack(f"{where}.queue", exc.message) from None
    priority = _int(data.get("priority", 0), f"{where}.priority", -1000, 1000)
    attempts = _int(data.get("max_attempts", 3), f"{where}.max_attempts", 1, 1000)
    timeout = data.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0):
        raise InvalidPack(f"{where}.timeout", f"must be a positive number of seconds, got {timeout!r}")
    schema = data.get("payload_schema")
    if schema is not None:
        check_schema(schema, f"{where}.payload_schema")
    return TaskDef(
        name=name,
        phases=phases,
        explicit_phases="phases" in data,
        queue=queue,
        priority=priority,
        max_attempts=attempts,
        timeout=float(timeout) if timeout is not None else None,
        payload_schema=schema,
        description=_string(data.get("description", ""), f"{where}.description", 2000),
    )


def check_schema(schema: object, where: str) -> None:
    """Raise InvalidPack unless ``schema`` is a well-formed JSON Schema (draft 2020-12 unless it says)."""
    if not isinstance(schema, dict | bool):
        raise InvalidPack(where, "must be a JSON Schema (an object)")
    try:
        cls = validator_for(schema, default=Draft202012Validator)
        cls.check_schema(cast(Any, schema))
    except SchemaError as exc:
        path = ".".join(str(p) for p in exc.path)
        raise InvalidPack(where + (f".{path}" if path else ""), f"not a valid JSON Schema: {exc.message}") from None


def payload_errors(schema: Mapping[str, Any] | bool, payload: object) -> list[str]:
    """What is wrong with ``payload`` under ``schema`` (empty when it is valid)."""
    cls = validator_for(schema, default=Draft202012Validator)
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in cls(cast(Any, schema)).iter_errors(cast(Any, payload))
    ][:5]


def _entry(value: object, where: str) -> str:
    if not isinstance(value, str) or not ENTRY.match(value):
        raise InvalidPack(where, f"must be module:function (like hello.tasks:greet), got {value!r}")
    return value


def _int(value: object, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidPack(where, f"must be an integer from {low} to {high}, got {value!r}")
    return value


def _string(value: object, where: str, limit: int) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise InvalidPack(where, f"must be a string of at most {limit} characters")
    return value


def _no_unknown(data: Mapping[Any, Any], known: set[str], where: str) -> None:
    for key in data:
        if key not in known:
            field_name = f"{where}.{key}" if where else str(key)
            raise InvalidPack(field_name, f"unknown field (known: {', '.join(sorted(known))})")
