"""The code-quality gates run as tests, so `make test` and CI check them too.

Each gate runs its tool in a subprocess from the repository root with this interpreter, and shows the
tool's output when it fails. A tool that is not installed skips its test locally and fails it under CI.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tarfile
import zipfile
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


@pytest.mark.timeout(120)
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
    # The dashboard's templates and static files (issue 9).
    expected |= {
        f"jobengine/{p.relative_to(PACKAGE).as_posix()}"
        for folder in ("dashboard/templates", "dashboard/static")
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
