"""The command line imports a command's module only when that command runs, and its help lists every command
from the help stored beside its name, which must say what the command's own help says."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer.main

from jobengine.cli.lazy import LazyCommand
from jobengine.cli.main import COMMANDS, build_app, main

# What a command that needs none of them must not load: the packs' schema checks, the HTTP client, the
# scheduler's planner, FastAPI.
HEAVY = ("jobengine.cli.packs", "jsonschema", "httpx", "jobengine.scheduler", "fastapi")


def _loaded_after(argv: list[str]) -> set[str]:
    """The modules loaded by a fresh interpreter that ran ``jobengine *argv``."""
    code = (
        "import contextlib, io, json, sys\n"
        "from jobengine.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    main({argv!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_help_lists_every_command_without_importing_one() -> None:
    loaded = _loaded_after(["--help"])
    assert "jobengine.cli.main" in loaded  # the check sees what the command line loads
    command_modules = {c.target.partition(":")[0] for c in COMMANDS} - {"jobengine.cli.main"}
    assert sorted(command_modules & loaded) == []
    assert [m for m in HEAVY if m in loaded] == []


def test_a_command_loads_its_own_module_and_not_the_others(tmp_path: object) -> None:
    loaded = _loaded_after(["jobs", "list", "--db", "/nonexistent/dir/x.db"])
    assert "jobengine.cli.jobs" in loaded
    assert [m for m in HEAVY if m in loaded] == []
    assert "jobengine.cli.run" not in loaded
    assert "pydantic" not in loaded  # its options: text, left out, or a number default (--limit 50)


@pytest.mark.parametrize("spec", COMMANDS, ids=lambda c: c.name)
def test_the_stored_help_is_the_commands_own(spec: LazyCommand) -> None:
    command = spec.load()
    stored = typer.core.TyperCommand(name=spec.name, help=spec.help)
    assert command.name == spec.name
    for limit in (30, 45, 74, 200):
        assert stored.get_short_help_str(limit) == command.get_short_help_str(limit), limit


def test_the_help_lists_every_command_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.split("Commands:\n", 1)[1].splitlines() if line.startswith("  ")]
    assert listed == [c.name for c in COMMANDS]
    group = typer.main.get_command(build_app())
    assert isinstance(group, typer.core.TyperGroup)
    assert group.list_commands(None) == listed  # type: ignore[arg-type]


def test_options_left_out_or_given_as_text_need_no_pydantic() -> None:
    loaded = _loaded_after(["worker", "--app", "no_such_module_here:engine", "--db", "/nonexistent/dir/x.db"])
    assert "jobengine.cli.run" in loaded  # the worker's options were read
    assert "pydantic" not in loaded


def test_given_values_are_still_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--app", "x:y", "--concurrency", "0"]) == 2
    assert "Invalid value for '--concurrency'" in capsys.readouterr().err
    assert main(["worker", "--app", "x:y", "--lease", "soon"]) == 2
    assert "Invalid value for '--lease'" in capsys.readouterr().err
    assert main(["jobs", "list", "--limit", "0", "--db", "/nonexistent/dir/x.db"]) == 2
    assert "Invalid value for '--limit'" in capsys.readouterr().err


def test_an_unknown_command_suggests_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["job", "list"]) == 2
    assert "Did you mean 'jobs'?" in capsys.readouterr().err
