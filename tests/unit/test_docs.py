"""The docs cannot drift from the code: the layer picture names exactly the packages that exist, the import
contracts it describes are the ones import-linter checks, and every file a doc points to exists.

See CONTRIBUTING.md ("Docs"): docs/architecture.md stays a map (at most 300 lines), concept docs explain the
present, numbers live in docs/decisions/ and bench/results/.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "jobengine"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 300


def _picture() -> str:
    """The fenced block under ``## Layers`` in docs/architecture.md."""
    text = ARCHITECTURE.read_text()
    match = re.search(r"^## Layers\n```\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert match, "docs/architecture.md has no ``## Layers`` section opening with a fenced picture"
    return match.group(1)


def _packages(folder: Path) -> set[str]:
    return {p.parent.name for p in folder.glob("*/__init__.py")}


def test_the_layer_picture_names_every_package_and_only_those() -> None:
    named = set(re.findall(r"\b([a-z_]+)/", _picture()))
    existing = _packages(PACKAGE)
    assert not existing - named, f"packages missing from the picture in docs/architecture.md: {existing - named}"
    assert not named - existing, f"the picture names packages that do not exist: {named - existing}"


def test_the_layer_picture_names_every_backend_and_only_those() -> None:
    match = re.search(r"backends/\s*\(([^)]*)\)", _picture())
    assert match, "the picture lists the backends as `backends/ (a · b · ...)`"
    named = {name.strip() for name in match.group(1).split("·")}
    existing = _packages(PACKAGE / "backends")
    assert named == existing, f"backends in the picture {sorted(named)} != in src {sorted(existing)}"


def test_the_modules_in_the_picture_exist() -> None:
    for name in re.findall(r"\b([a-z_*]+)\.py\b", _picture()):
        assert list(PACKAGE.rglob(f"{name}.py")), f"the picture names {name}.py, which src/jobengine lacks"


def test_every_import_contract_is_listed_under_the_picture() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    text = ARCHITECTURE.read_text()
    missing = [c["name"] for c in contracts if f'"{c["name"]}"' not in text]
    assert not missing, f"import-linter contracts not listed in docs/architecture.md: {missing}"


def test_the_architecture_page_stays_a_map() -> None:
    lines = len(ARCHITECTURE.read_text().splitlines())
    assert lines <= MAX_LINES, f"docs/architecture.md has {lines} lines (at most {MAX_LINES}: move detail elsewhere)"


def _docs() -> list[Path]:
    names = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "bench/README.md"]
    found = [ROOT / n for n in names if (ROOT / n).exists()]
    for folder in ("docs", "docs/decisions", "bench/results"):
        found += sorted((ROOT / folder).glob("*.md"))
    return found


#: A relative Markdown link ``[text](target)``, or a repository path to a Markdown file in backquotes.
_LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)#\s]+)")
_PATH = re.compile(r"`((?:docs|bench)/[A-Za-z0-9_./-]+\.md)`")


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_doc_points_to_exists(doc: Path) -> None:
    text = doc.read_text()
    missing = [t for t in _LINK.findall(text) if not (doc.parent / t).exists()]
    missing += [t for t in _PATH.findall(text) if not (ROOT / t).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} points to files that do not exist: {missing}"


def test_no_doc_section_is_named_after_an_issue_or_a_session() -> None:
    headings = [
        f"{doc.relative_to(ROOT)}: {line}"
        for doc in sorted((ROOT / "docs").rglob("*.md"))
        for line in doc.read_text().splitlines()
        if line.startswith("#") and re.search(r"\b(issue|session)s? ?#?\d", line, re.IGNORECASE)
    ]
    assert not headings, "name sections after what they explain:\n" + "\n".join(headings)


def test_every_decision_is_in_the_index() -> None:
    index = (ROOT / "docs" / "decisions" / "README.md").read_text()
    decisions = sorted(p.name for p in (ROOT / "docs" / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert decisions, "docs/decisions/ holds no decision"
    assert not [d for d in decisions if f"]({d})" not in index], "decisions missing from docs/decisions/README.md"
    numbers = [d[:4] for d in decisions]
    assert numbers == [f"{i:04d}" for i in range(1, len(numbers) + 1)], "decision numbers must run 0001, 0002, ..."


def _layers_contract() -> list[str]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    return list(layers["layers"])


def test_the_layer_picture_is_the_layers_contract() -> None:
    """Each line of the picture, left of its ``──`` note, is one layer of the contract in the same order
    and with the same separators (``x/`` or ``x.py`` for the module ``x``)."""
    drawn = []
    for line in _picture().splitlines():
        left = re.sub(r"\([^)]*\)", "", line.split("──")[0])  # the backends' list is not a layer
        drawn.append(" ".join(re.sub(r"\b([a-z_]+)(/|\.py)(?=\s|$)", r"\1", left).split()))
    assert [d for d in drawn if d] == [" ".join(layer.split()) for layer in _layers_contract()]
