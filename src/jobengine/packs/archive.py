"""Pack archives: a reproducible ``.tar.gz`` build and a guarded, streaming extraction.

:func:`build` gives the same bytes (and sha256) for the same tree on any machine at any time;
:func:`extract` trusts nothing in the archive: only regular files and directories, no name that escapes the
target, limits (:class:`Limits`) counted on the bytes actually read and inflated, and a refused archive
leaves nothing behind. The exact rules: docs/packs.md ("Reproducible build", "Guarded extraction").
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import shutil
import tarfile
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from jobengine.packs import manifest as manifest_mod
from jobengine.packs.errors import InvalidPack, UnsafeArchive

_CHUNK = 64 * 1024
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True, slots=True)
class Limits:
    """What an archive may cost. ``max_ratio`` applies once more than ``ratio_floor`` bytes expanded (a tiny
    file of zeros compresses well and is harmless)."""

    max_compressed: int = 16 * 1024 * 1024
    max_expanded: int = 64 * 1024 * 1024
    max_entries: int = 10_000
    max_ratio: float = 200.0
    ratio_floor: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Built:
    data: bytes
    sha256: str
    manifest: manifest_mod.Manifest
    files: int


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(root: str | Path) -> Built:
    """Pack the directory ``root`` (which holds ``jobengine-pack.yaml`` or ``.toml``). Raises InvalidPack naming
    the field or file at fault; the manifest is validated and every entry point's module must exist."""
    base = Path(root)
    if not base.is_dir():
        raise InvalidPack("directory", f"{root} is not a directory")
    files = sorted(_walk(base, base), key=lambda p: p.as_posix())
    names = [p.as_posix() for p in files]
    found = [n for n in manifest_mod.MANIFEST_NAMES if n in names]
    if len(found) != 1:
        raise InvalidPack(
            "manifest", f"the directory must hold exactly one of {', '.join(manifest_mod.MANIFEST_NAMES)}"
        )
    manifest = manifest_mod.loads((base / found[0]).read_bytes(), found[0])
    for task in manifest.tasks:
        for phase in task.phases:
            if module_path(set(names), phase.module) is None:
                raise InvalidPack(f"tasks.{task.name}.entry", f"module {phase.module!r} is not in the pack")
    raw = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel in files:
            data = (base / rel).read_bytes()
            info = tarfile.TarInfo(rel.as_posix())
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    data = raw.getvalue()
    return Built(data, digest_of(data), manifest, len(files))


def _walk(base: Path, folder: Path) -> Iterator[Path]:
    for entry in folder.iterdir():
        rel = entry.relative_to(base)
        if entry.is_symlink():
            raise InvalidPack("directory", f"{rel.as_posix()} is a symlink; packs hold regular files only")
        if entry.is_dir():
            if entry.name in _SKIP_DIRS or entry.name.startswith("."):
                continue
            yield from _walk(base, entry)
        elif entry.is_file():
            if entry.name.endswith(_SKIP_SUFFIXES) or entry.name == ".DS_Store":
                continue
            yield rel
        else:
            raise InvalidPack("directory", f"{rel.as_posix()} is not a regular file")


def module_path(names: set[str], module: str) -> str | None:
    """The file of ``module`` among the pack's member ``names`` (``a.b`` → ``a/b.py`` or ``a/b/__init__.py``)."""
    stem = module.replace(".", "/")
    for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
        if candidate in names:
            return candidate
    return None


class _Counted(io.RawIOBase):
    """A reader that counts what passes and raises UnsafeArchive past a limit (the checks run on real bytes)."""

    def __init__(self, inner: BinaryIO, check: _Budget, compressed: bool) -> None:
        self.inner = inner
        self.check = check
        self.compressed = compressed

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self.inner.read(min(len(buffer), _CHUNK))
        n = len(data)
        buffer[:n] = data
        self.check.add(n, self.compressed)
        return n


class _Budget:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.compressed = 0
        self.expanded = 0

    def add(self, n: int, compressed: bool) -> None:
        lim = self.limits
        if compressed:
            self.compressed += n
            if self.compressed > lim.max_compressed:
                raise UnsafeArchive(f"the archive is larger than {lim.max_compressed} bytes")
            return
        self.expanded += n
        if self.expanded > lim.max_expanded:
            raise UnsafeArchive(f"the archive expands to more than {lim.max_expanded} bytes")
        if self.expanded > lim.ratio_floor and self.expanded > lim.max_ratio * max(self.compressed, 1):
            raise UnsafeArchive(f"the archive expands more than {lim.max_ratio:g} to 1 (a compression bomb?)")


def check_member_name(name: str) -> str:
    """The normalized relative path of a member, or UnsafeArchive."""
    if not name or "\x00" in name or "\\" in name:
        raise UnsafeArchive(f"member {name!r}: bad name")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchive(f"member {name!r}: absolute paths are refused")
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"member {name!r}: '..' is refused")
    if not parts:
        raise UnsafeArchive(f"member {name!r}: empty path")
    return "/".join(parts)


def extract(data: BinaryIO, target: str | Path, limits: Limits | None = None) -> list[str]:
    """Extract the archive read from ``data`` into the new directory ``target`` (which must not exist);
    returns the member names. Raises UnsafeArchive (nothing written) or InvalidPack (not a tar.gz)."""
    dest = Path(target)
    tmp = dest.parent / f".{dest.name}.{uuid.uuid4().hex}.tmp"
    tmp.mkdir(parents=True)
    try:
        if data.seekable():
            # A first pass that writes nothing: a hostile archive is refused before a single file exists
            # (creating files is what costs: docs/decisions/0029-pack-verification-at-upload.md).
            start = data.tell()
            _extract_into(data, tmp, limits or Limits(), write=False)
            data.seek(start)
        names = _extract_into(data, tmp, limits or Limits(), write=True)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not dest.is_dir():  # another process may have renamed the same content in first: fine
                raise
            shutil.rmtree(tmp, ignore_errors=True)
        return names
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _extract_into(data: BinaryIO, root: Path, limits: Limits, *, write: bool) -> list[str]:
    budget = _Budget(limits)
    root_real = os.path.realpath(root)
    names: list[str] = []
    seen: set[str] = set()
    compressed = io.BufferedReader(_Counted(data, budget, compressed=True), _CHUNK)
    try:
        gz = gzip.GzipFile(fileobj=compressed, mode="rb")
        expanded = io.BufferedReader(_Counted(gz, budget, compressed=False), _CHUNK)  # type: ignore[arg-type]
        with tarfile.open(fileobj=expanded, mode="r|") as tar:
            for count, member in enumerate(tar, start=1):
                if count > limits.max_entries:
                    raise UnsafeArchive(f"the archive has more than {limits.max_entries} members")
                rel = check_member_name(member.name)
                if rel in seen:
                    raise UnsafeArchive(f"member {rel!r} appears twice")
                seen.add(rel)
                path = os.path.realpath(os.path.join(root_real, rel))
                if os.path.commonpath([root_real, path]) != root_real:
                    raise UnsafeArchive(f"member {member.name!r} resolves outside the extraction directory")
                if member.isdir():
                    if write:
                        os.makedirs(path, exist_ok=True)
                    continue
                if not member.isreg():
                    kind = "a link" if member.issym() or member.islnk() else "not a regular file (device, FIFO?)"
                    raise UnsafeArchive(f"member {member.name!r} is {kind}; only regular files are allowed")
                source = tar.extractfile(member)
                assert source is not None
                if write:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                    with os.fdopen(os.open(path, flags, 0o644), "wb") as out:
                        while chunk := source.read(_CHUNK):
                            out.write(chunk)
                else:
                    while source.read(_CHUNK):  # counted by the budget like the writing pass
                        pass
                names.append(rel)
            # Read to the end, so trailing garbage or a bomb after the last member is counted too.
            while expanded.read(_CHUNK):
                pass
    except (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InvalidPack("archive", f"not a valid .tar.gz: {exc}") from None
    return names


def read_manifest(root: Path) -> manifest_mod.Manifest:
    """The manifest of an extracted pack. Raises InvalidPack when there is none or it is invalid."""
    found = [n for n in manifest_mod.MANIFEST_NAMES if (root / n).is_file()]
    if len(found) != 1:
        raise InvalidPack("manifest", f"the pack must hold exactly one of {', '.join(manifest_mod.MANIFEST_NAMES)}")
    with contextlib.suppress(OSError):
        size = (root / found[0]).stat().st_size
        if size > manifest_mod.MAX_MANIFEST_BYTES:
            raise InvalidPack("manifest", f"larger than {manifest_mod.MAX_MANIFEST_BYTES} bytes")
    return manifest_mod.loads((root / found[0]).read_bytes(), found[0])
