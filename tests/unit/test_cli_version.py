"""``jobengine --version`` prints the package's version and exits 0, before any command runs."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from jobengine.cli.main import main


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"jobengine {version('jobengine')}"


def test_version_wins_over_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version", "workers", "--db", "/nonexistent/dir/x.db"]) == 0
    assert capsys.readouterr().out.startswith("jobengine ")
