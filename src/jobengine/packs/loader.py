"""Workers that run approved packs: download by digest, verify, unpack into a cache keyed by digest, check the
requirements, import the entry points and register the tasks.

``load_packs(tasks, fetcher, ["hello@1.2.0", "etl@stable"], cache_dir)`` registers every task of each pack
under ``<pack>@<sha256>:<task>`` (the name jobs keep, see :mod:`jobengine.packs.jobs`). Failure policy: any
problem (content that does not hash to its digest, an unsafe archive, a missing requirement: nothing is
installed) refuses to load, naming the pack, before a worker would claim a job it cannot run. Pack code is
imported as the package ``_jobengine_pack_<digest prefix>``, so two versions never collide in
``sys.modules``. The steps: docs/packs.md ("Workers").
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.metadata
import io
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from packaging.requirements import Requirement

from jobengine.errors import ConfigError, NotFound
from jobengine.packs import archive, semver
from jobengine.packs.errors import InvalidPack, MissingRequirement
from jobengine.packs.jobs import task_name
from jobengine.packs.manifest import Manifest, TaskDef
from jobengine.packs.registry import PackIntegrityError, PackRegistry
from jobengine.ports.packs import PackStatus, PackVersion
from jobengine.tasks import PhaseSpec, TaskRegistry, make_spec
from jobengine.version import __version__


@dataclass(frozen=True, slots=True)
class Resolved:
    name: str
    version: str
    sha256: str


class PackFetcher(Protocol):
    async def resolve(self, name: str, ref: str) -> Resolved:
        """The approved (or deprecated) version ``ref`` (a version or channel) names. Raises otherwise."""
        ...

    async def fetch(self, sha256: str) -> bytes:
        """The content of this digest (the loader verifies it)."""
        ...


class RegistryFetcher:
    """Reads the registry in the worker's own database (``jobengine worker --packs``). ``pending``: versions
    awaiting approval load too, for a worker that runs simulations of them (only a simulate run names a
    pending version's digest; an enqueue or a full run refuses it)."""

    def __init__(self, registry: PackRegistry, *, pending: bool = False) -> None:
        self.registry = registry
        self.pending = pending

    async def resolve(self, name: str, ref: str) -> Resolved:
        version = await self.registry.resolve(name, ref)
        await self._content(version)  # refuses a version that may not run (and checks its bytes)
        return Resolved(version.name, version.version, version.sha256)

    async def fetch(self, sha256: str) -> bytes:
        return await self._content(await self.registry.by_digest(sha256))

    async def _content(self, version: PackVersion) -> bytes:
        if self.pending and version.status is PackStatus.PENDING:
            return await self.registry.content(version)
        return await self.registry.runnable(version)


class HttpFetcher:
    """Reads the registry over the HTTP API (``jobengine worker --remote URL --packs``; scope packs:read).
    ``pending``: versions awaiting approval load too, as with :class:`RegistryFetcher` (the key needs
    packs:simulate as well: the server refuses their content otherwise)."""

    def __init__(self, client: Any, *, pending: bool = False) -> None:  # an httpx.AsyncClient, base_url and key
        self.client = client
        self.pending = pending

    async def resolve(self, name: str, ref: str) -> Resolved:
        body = _checked(await self.client.get(f"/api/v1/packs/{name}/versions/{ref}"), f"{name}@{ref}").json()
        runs = ("approved", "deprecated", "pending_approval") if self.pending else ("approved", "deprecated")
        if body["status"] not in runs:
            raise ConfigError(f"packs: {name}@{body['version']} is {body['status']}: only approved versions run")
        return Resolved(body["name"], body["version"], body["sha256"])

    async def fetch(self, sha256: str) -> bytes:
        r = _checked(await self.client.get(f"/api/v1/packs/-/blobs/{sha256}"), f"content {sha256}")
        return bytes(r.content)


def _checked(r: Any, what: str) -> Any:
    if r.status_code == 404:
        raise NotFound("pack", what)
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail")
        except ValueError:
            detail = None
        raise ConfigError(f"packs: {what}: the server answered {r.status_code}: {detail or r.reason_phrase}")
    return r


def parse_refs(refs: Sequence[str] | str) -> list[tuple[str, str]]:
    """``"a@1.0.0,b@stable"`` → ``[("a", "1.0.0"), ("b", "stable")]``; ConfigError naming ``packs``."""
    items = refs.split(",") if isinstance(refs, str) else list(refs)
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        name, sep, ref = item.partition("@")
        if not sep or not name or not ref:
            raise ConfigError(f"packs: expected name@version (like hello@1.2.0 or hello@stable), got {item!r}")
        out.append((name, ref))
    return out


@dataclass(frozen=True, slots=True)
class LoadedPack:
    name: str
    version: str
    sha256: str
    path: Path
    tasks: tuple[str, ...]


async def load_packs(
    tasks: TaskRegistry,
    fetcher: PackFetcher,
    refs: Sequence[str] | str,
    cache_dir: str | Path,
    limits: archive.Limits | None = None,
) -> list[LoadedPack]:
    loaded = []
    for name, ref in parse_refs(refs):
        found = await fetcher.resolve(name, ref)
        path = await ensure_unpacked(fetcher, found.sha256, Path(cache_dir), limits)
        manifest = archive.read_manifest(path)
        label = f"{found.name}@{found.version}"
        if (manifest.name, manifest.version) != (found.name, found.version):
            raise PackIntegrityError(f"{label}: the content's manifest names {manifest.name}@{manifest.version}")
        check_requirements(manifest, label)
        names = register(tasks, manifest, found.sha256, path)
        loaded.append(LoadedPack(found.name, found.version, found.sha256, path, names))
    return loaded


async def ensure_unpacked(
    fetcher: PackFetcher, sha256: str, cache_dir: Path, limits: archive.Limits | None = None
) -> Path:
    """The directory holding the verified content of ``sha256`` (downloaded and unpacked if not cached)."""
    path = cache_dir / sha256
    if path.is_dir():
        return path
    data = await fetcher.fetch(sha256)
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise PackIntegrityError(f"pack content {sha256}: the bytes received hash to {actual}; refusing to run it")
    await asyncio.to_thread(_unpack, data, cache_dir, path, limits)
    return path


def _unpack(data: bytes, cache_dir: Path, path: Path, limits: archive.Limits | None) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    archive.extract(io.BytesIO(data), path, limits)


def check_requirements(manifest: Manifest, label: str) -> None:
    minimum = manifest.min_engine_version
    if minimum is not None and semver.parse(__version__) < semver.parse(minimum):
        raise MissingRequirement(f"packs: {label} needs jobengine >= {minimum}; this is {__version__}")
    for text in manifest.requires:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            installed = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            raise MissingRequirement(
                f"packs: {label} requires {text}, which is not installed (workers install nothing: install it first)"
            ) from None
        if req.specifier and not req.specifier.contains(installed, prereleases=True):
            raise MissingRequirement(f"packs: {label} requires {text}; version {installed} is installed")


def register(tasks: TaskRegistry, manifest: Manifest, sha256: str, path: Path) -> tuple[str, ...]:
    package = f"_jobengine_pack_{sha256[:24]}"
    if package not in sys.modules:
        module = types.ModuleType(package)
        module.__path__ = [str(path)]
        module.__package__ = package
        sys.modules[package] = module
    names = []
    for task in manifest.tasks:
        name = task_name(manifest.name, sha256, task.name)
        if tasks.get(name) is not None:
            names.append(name)
            continue
        fns = [_import(package, task, p.module, p.function) for p in task.phases]
        if task.explicit_phases:
            phases: list[PhaseSpec] | None = [
                PhaseSpec(p.name, fn, asyncio.iscoroutinefunction(fn)) for p, fn in zip(task.phases, fns, strict=True)
            ]
            fn = None
        else:
            phases, fn = None, fns[0]
        tasks.add(make_spec(name, fn, phases, queue=task.queue, priority=task.priority,
                            max_attempts=task.max_attempts, timeout=task.timeout, retry=None))  # fmt: skip
        names.append(name)
    return tuple(names)


def _import(package: str, task: TaskDef, module: str, function: str) -> Any:
    where = f"tasks.{task.name}.entry"
    try:
        mod = importlib.import_module(f"{package}.{module}")
    except Exception as exc:
        raise InvalidPack(where, f"importing {module} failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(mod, function, None)
    if not callable(fn):
        raise InvalidPack(where, f"{module} has no callable {function!r}")
    return fn
