"""The code-quality gates run as tests, so `make test` and CI check them too.

Each gate runs its tool in a subprocess from the repository root with this interpreter, and shows the
tool's output when it fails. A tool that is not installed skips its test locally and fails it under CI.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tokenize
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.services import unavailable

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "jobengine"


def _need(module: str, hint: str) -> None:
    if importlib.util.find_spec(module) is None:
        unavailable(f"{hint} is not installed in this environment (pip install -e '.[dev]', or `make venv`)")


def _run(*args: str, timeout: float = 240) -> None:
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        command = " ".join(args)
        output = f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
        pytest.fail(f"`{command}` exited {proc.returncode}\n{output}", pytrace=False)


@pytest.mark.timeout(300)
def test_mypy_strict_on_src() -> None:
    _need("mypy", "mypy")
    _run(sys.executable, "-m", "mypy")  # strict, files = ["src"]: [tool.mypy] in pyproject.toml


def test_ruff_check() -> None:
    _need("ruff", "ruff")
    _run(sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "bench")


def test_ruff_format() -> None:
    _need("ruff", "ruff")
    _run(sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "src", "tests", "bench")


def test_import_layers() -> None:
    """The contracts in [tool.importlinter]: core, worker and ports never import a backend, and so on."""
    _need("importlinter", "import-linter")
    script = Path(sys.executable).parent / "lint-imports"
    found = str(script) if script.exists() else shutil.which("lint-imports")
    if found is None:
        unavailable("import-linter is installed but its `lint-imports` script is not on PATH")
    _run(found, "--no-cache", "--no-logo")


def import_cycles(package: str) -> list[list[str]]:
    """The modules of ``package`` that import each other in a circle, at import time or from inside a
    function (imports under ``TYPE_CHECKING`` left out): Tarjan's strongly connected components of grimp's
    graph, larger than one module."""
    import grimp

    graph = grimp.build_graph(
        package, include_external_packages=False, exclude_type_checking_imports=True, cache_dir=None
    )
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph.find_modules_directly_imported_by(module)):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycles() -> None:
    _need("grimp", "import-linter")
    assert import_cycles("jobengine") == []


def test_the_cycle_check_finds_a_function_level_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "circular"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circular import b\n")
    (pkg / "b.py").write_text("def f():\n    from circular import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from circular import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("circular") == [["circular.a", "circular.b"]]


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_imports(src: Path) -> set[str]:
    """``module -> other.module._name`` for every private name of one module that another uses, by
    ``from other.module import _name`` or as ``other_module._name`` after importing the module."""
    found = set()
    for path in sorted(src.rglob("*.py")):
        here = _module_name(path, src)
        modules: dict[str, str] = {}  # local name -> module it is bound to
        tree = ast.parse(path.read_text())
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = node.module if not node.level else ".".join(filter(None, (base, node.module)))
                for alias in node.names:
                    target = f"{module}.{alias.name}"
                    file = src / Path(*target.split("."))
                    if file.with_suffix(".py").exists() or (file / "__init__.py").exists():
                        modules[alias.asname or alias.name] = target
                    elif alias.name.startswith("_") and not alias.name.startswith("__") and module != here:
                        found.add(f"{here} -> {target}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        modules[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.add(f"{here} -> {modules[node.value.id]}.{node.attr}")
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports(ROOT / "src") == set(), "make the name public or move it to its one user"


def test_the_private_import_check_sees_both_forms(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_X = 1\n_Y = 2\nZ = 3\n")
    (pkg / "b.py").write_text("from pkg import a\nfrom pkg.a import _X, Z\n\nprint(a._Y, a.Z, _X, Z)\n")
    (pkg / "c.py").write_text("from . import a as m\nfrom .a import _Y\n\nprint(m._X, _Y)\n")
    expected = {"pkg.b -> pkg.a._X", "pkg.b -> pkg.a._Y", "pkg.c -> pkg.a._X", "pkg.c -> pkg.a._Y"}
    assert private_imports(tmp_path) == expected


def _copy_project(dest: Path) -> Path:
    """The files a build reads, without caches, egg-info or build/ (so builds never race in the checkout)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "*.db", "*.db-wal", "*.db-shm")
    shutil.copytree(ROOT / "src", dest / "src", ignore=ignore)
    for path in ROOT.iterdir():
        if path.is_file() and (
            path.name in ("pyproject.toml", "setup.cfg", "MANIFEST.in")
            or path.name.upper().startswith(("README", "LICEN", "COPYING", "NOTICE"))
        ):
            shutil.copy2(path, dest / path.name)
    return dest


@pytest.mark.timeout(300)
def test_wheel_and_sdist_carry_sql_and_py_typed(tmp_path: Path) -> None:
    """Every .sql file under src/jobengine and py.typed reach both the wheel and the sdist.

    The tests import an editable install, which reads src/ directly, so only a real build shows what a
    user gets. Built with this venv's setuptools (no build isolation, no network).
    """
    setuptools = importlib.util.find_spec("setuptools")
    if setuptools is None:
        unavailable("setuptools is not installed (`make venv` installs setuptools>=77)")
    from importlib.metadata import version

    major = int(version("setuptools").split(".")[0])
    if major < 77:
        unavailable(f"setuptools {version('setuptools')} is older than the build backend's >=77 (run `make venv`)")

    project = _copy_project(tmp_path / "project")
    out = tmp_path / "dist"
    script = (
        "import sys; from setuptools import build_meta as b; d = sys.argv[1]; "
        "print(b.build_sdist(d)); print(b.build_wheel(d))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(out)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=110,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"build failed:\n{proc.stdout}\n{proc.stderr}"

    expected = {"jobengine/py.typed"} | {
        f"jobengine/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.sql")
    }
    # The dashboard's templates and static files (issue 9), and the vendored Swagger UI of /docs.
    expected |= {
        f"jobengine/{p.relative_to(PACKAGE).as_posix()}"
        for folder in ("dashboard/templates", "dashboard/static", "http/static")
        for p in (PACKAGE / folder).iterdir()
        if p.is_file()
    }
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
    with tarfile.open(sdist) as tf:
        # sdist members look like jobengine-0.1.0/src/jobengine/...
        in_sdist = {name.split("/src/", 1)[1] for name in tf.getnames() if "/src/" in name}
    assert not expected - in_wheel, f"missing from the wheel: {sorted(expected - in_wheel)}"
    assert not expected - in_sdist, f"missing from the sdist: {sorted(expected - in_sdist)}"


# -- Comments say why: history and figures live in docs/decisions/, bench/results/ and commit bodies --------

#: An issue or a session number: history, which belongs in the commit body.
_HISTORY = re.compile(r"\b(issue|session)s? ?#?\d+", re.IGNORECASE)
#: A measurement (a before -> after time, a rate, an instruction count, a profiler's name): a decision's figure.
_FIGURES = re.compile(
    r"\d+(\.\d+)? ?(ms|µs|us|ns)\b.*(->|→)"
    r"|(->|→) ?~?\d+(\.\d+)? ?(ms|µs|us|ns)\b"
    r"|\bjobs/s\b"
    r"|\b(callgrind|timeit)\b"
    r"|\d[\d,.]* (more |fewer )?instructions\b"
    r"|\b\d+(\.\d+)?x (faster|slower|cheaper|dearer)\b"
    r"|[+-]\d+(\.\d+)?%",
    re.IGNORECASE,
)
#: A decision cited by a comment: ``docs/decisions/0003-postgres-lane-connection.md``.
_CITED = re.compile(r"docs/decisions/(\d{4}-[a-z0-9-]+\.md)")


def _python_comments(text: str) -> Iterator[tuple[int, str]]:
    """Every comment and every docstring (any string statement) of a Python source, with its line."""
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for offset, line in enumerate(node.value.value.splitlines()):
                yield node.lineno + offset, line


def _line_comments(text: str, marker: str) -> Iterator[tuple[int, str]]:
    """The part of each line after ``marker`` outside a quoted string (SQL ``--``, TOML ``#``)."""
    for number, line in enumerate(text.splitlines(), 1):
        quote = ""
        for i, char in enumerate(line):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif line.startswith(marker, i):
                yield number, line[i:]
                break


def comment_offences(root: Path) -> list[str]:
    """``path:line: text`` of every comment or docstring under ``root`` (src/jobengine, its migrations,
    pyproject.toml) that carries an issue or session number or a measurement, or cites a decision that does
    not exist."""
    sources: list[tuple[Path, Iterator[tuple[int, str]]]] = []
    for path in sorted((root / "src" / "jobengine").rglob("*.py")):
        sources.append((path, _python_comments(path.read_text())))
    for path in sorted((root / "src" / "jobengine").rglob("migrations/*.sql")):
        sources.append((path, _line_comments(path.read_text(), "--")))
    sources.append((root / "pyproject.toml", _line_comments((root / "pyproject.toml").read_text(), "#")))
    decisions = {p.name for p in (root / "docs" / "decisions").glob("*.md")}
    found = []
    for path, comments in sources:
        for number, text in comments:
            missing = [name for name in _CITED.findall(text) if name not in decisions]
            if _HISTORY.search(text) or _FIGURES.search(text) or missing:
                found.append(f"{path.relative_to(root)}:{number}: {text.strip()}")
    return found


def test_comments_carry_no_issue_session_or_figures() -> None:
    """Comments and docstrings say why; figures go in docs/decisions/ (cited by name), history in commits."""
    found = comment_offences(ROOT)
    assert not found, "move these to docs/decisions/ or the commit body (CONTRIBUTING.md):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "# -- flow control (issue 7, jobengine.flow) --",
        "# since session 6's faster ids",
        "# 41.1 -> 39.3 ms, the batch phase",
        "# at 200 jobs/s",
        "# 6,000 -> 4,700 instructions per id (callgrind)",
        "# keywords cost ~400 ns more per job (timeit)",
        "# parsed 11x faster",
        "# the batch phase +6%",
        "# see docs/decisions/9999-no-such-decision.md",
    ],
)
def test_the_comment_guard_catches(tmp_path: Path, text: str) -> None:
    (tmp_path / "src" / "jobengine").mkdir(parents=True)
    (tmp_path / "docs" / "decisions").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "src" / "jobengine" / "m.py").write_text(f'"""A module."""\n\n{text}\nX = 1\n')
    assert comment_offences(tmp_path) == [f"src/jobengine/m.py:3: {text}"]


def test_the_comment_guard_reads_docstrings_sql_and_toml_and_lets_the_why_pass(tmp_path: Path) -> None:
    package = tmp_path / "src" / "jobengine"
    (package / "migrations").mkdir(parents=True)
    (tmp_path / "docs" / "decisions").mkdir(parents=True)
    (tmp_path / "docs" / "decisions" / "0001-a.md").write_text("# 0001\n")
    (package / "m.py").write_text(
        '"""Why: one statement per batch (docs/decisions/0001-a.md); every 30 s, 5 ms at most."""\n\n'
        'def f() -> None:\n    """Measured 5 ms -> 4 ms."""\n\nHELP = "rate (jobs/s)"  # a string, not a comment\n'
    )
    (package / "migrations" / "0001_x.sql").write_text("-- issue 3: the jobs table\nSELECT '-- issue 4';\n")
    (tmp_path / "pyproject.toml").write_text('x = ["a#b"]  # fast (issue 8)\n')
    assert comment_offences(tmp_path) == [
        "src/jobengine/m.py:4: Measured 5 ms -> 4 ms.",
        "src/jobengine/migrations/0001_x.sql:1: -- issue 3: the jobs table",
        "pyproject.toml:1: # fast (issue 8)",
    ]


# -- capabilities are declared, not probed ------------------------------------------------------------------
#: Modules whose probes their own redesign removes (the engine's API, flow and scheduling facades); the list
#: only shrinks.
_PROBES_PENDING: set[str] = set()


def _port_protocols() -> set[str]:
    names = set()
    for path in (PACKAGE / "ports").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                (b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "") == "Protocol"
                for b in node.bases
            ):
                names.add(node.name)
    return names


def port_probes(root: Path, ports: set[str]) -> list[str]:
    """``isinstance(x, Port)`` / ``supports(x, Port)`` of a ports Protocol, as ``file:line``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "supports")
                and len(node.args) == 2
                and any(isinstance(n, ast.Name) and n.id in ports for n in ast.walk(node.args[1]))
            ):
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def test_no_store_is_probed_for_a_port() -> None:
    """A store declares what it offers in ``store.capabilities``; callers read it instead of probing."""
    ports = _port_protocols()
    assert {"OutboxStore", "TransactionalStore", "WatermarkStore", "PackStore"} <= ports
    probes = [p for p in port_probes(PACKAGE, ports) if p.rpartition(":")[0] not in _PROBES_PENDING]
    assert probes == [], "read store.capabilities instead of probing the store's class: " + ", ".join(probes)


def test_the_probe_guard_catches(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "if isinstance(store, OutboxStore):\n    pass\nok = isinstance(x, int)\nsupports(store, (A, FlowStore))\n"
    )
    assert port_probes(tmp_path, {"OutboxStore", "FlowStore"}) == ["m.py:1", "m.py:4"]


# -- a small facade ---------------------------------------------------------------------------------------
def test_the_engine_has_at_most_40_public_members() -> None:
    from jobengine.engine import Engine

    public = [n for n in dir(Engine) if not n.startswith("_")]
    assert len(public) <= 40, f"Engine has {len(public)} public members: {public}"
