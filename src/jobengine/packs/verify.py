"""What the registry checks before a version may wait for approval (run on upload, never executes pack code).

1. The archive extracts safely within :class:`~jobengine.packs.archive.Limits` (into a temporary directory
   that is removed afterwards); 2. it holds one valid manifest; 3. every entry point's module is in the pack
   and defines the function at top level (read with :mod:`ast`: the server never imports uploaded code);
   4. payload schemas are valid JSON Schema (checked by the manifest parser).

:func:`inspect` returns the manifest and ``None`` when all hold, or the manifest (when one could be read)
and the reason it is invalid.
"""

from __future__ import annotations

import ast
import io
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from jobengine.packs import archive
from jobengine.packs.errors import InvalidPack, UnsafeArchive
from jobengine.packs.manifest import Manifest

#: One parse at a time in the process: CPython 3.11 builds the tree with an interpreter-wide recursion count,
#: which two threads parsing at once (uploads inspected in the default executor) can leave unbalanced, and
#: the parse then fails with SystemError "AST constructor recursion depth mismatch".
_PARSE = threading.Lock()


@dataclass(frozen=True, slots=True)
class Inspection:
    manifest: Manifest | None
    problem: str | None  # None: valid
    field: str | None = None


def inspect(data: bytes, limits: archive.Limits) -> Inspection:
    with tempfile.TemporaryDirectory(prefix="jobengine-pack-") as tmp:
        root = Path(tmp) / "pack"
        try:
            names = set(archive.extract(io.BytesIO(data), root, limits))
        except UnsafeArchive as exc:
            return Inspection(None, exc.message, exc.field)
        except InvalidPack as exc:
            return Inspection(None, exc.message, exc.field)
        try:
            manifest = archive.read_manifest(root)
        except InvalidPack as exc:
            return Inspection(None, exc.message, exc.field)
        for task in manifest.tasks:
            for phase in task.phases:
                where = f"tasks.{task.name}.entry"
                path = archive.module_path(names, phase.module)
                if path is None:
                    return Inspection(manifest, f"module {phase.module!r} is not in the pack", where)
                source = (root / path).read_bytes()
                try:
                    with _PARSE:
                        tree = ast.parse(source, filename=path)
                except (SyntaxError, ValueError) as exc:
                    return Inspection(manifest, f"{path} does not parse: {exc}", where)
                if phase.function not in _top_level_names(tree):
                    return Inspection(manifest, f"{path} defines no {phase.function!r} at top level", where)
        return Inspection(manifest, None)


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names
