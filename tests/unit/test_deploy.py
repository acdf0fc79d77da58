"""The deploy files (deploy/) agree: the systemd units, the compose file and the image run the same
``jobengine`` commands for each role, from the same settings file, as a user that is not root; and those
commands and settings are ones this version of the command line accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobengine.cli.main import main
from jobengine.settings import Settings
from support.deploy import DEPLOY, DeployFiles, read_env_file, read_unit


@pytest.fixture(scope="module")
def files() -> DeployFiles:
    return DeployFiles.read()


def test_every_role_runs_the_same_command_under_systemd_and_compose(files: DeployFiles) -> None:
    assert set(files.systemd) == {"migrate", "api", "scheduler", "worker"}
    assert files.compose == files.systemd
    # The image's entrypoint is the program the units run; the compose command is its arguments.
    assert files.entrypoint == ["jobengine"]


def test_the_roles_are_the_commands_of_the_command_line(files: DeployFiles, capsys: pytest.CaptureFixture[str]) -> None:
    for role, argv in files.systemd.items():
        # Every option a unit passes is one the command knows: an unknown one fails the parse before --help.
        assert main([*files.command(role, files.environment), "--help"]) == 0, f"{role}: {argv}"
        assert f"Usage: jobengine {argv[0]}" in capsys.readouterr().out


def test_one_settings_file_feeds_every_process(files: DeployFiles) -> None:
    for role, paths in files.environment_files.items():
        assert paths[0] == "/etc/jobengine/jobengine.env", role
    compose = (DEPLOY / "compose.yaml").read_text()
    assert "env_file: jobengine.env" in compose
    # Every variable a command names is in the file; every JOBENGINE_* there is a setting or the app.
    for argv in files.systemd.values():
        for part in argv:
            if part.startswith("${"):
                assert part[2:-1] in files.environment, part
    known = {f"JOBENGINE_{name.upper()}" for name in Settings.__dataclass_fields__} | {
        "JOBENGINE_APP",
        "JOBENGINE_QUEUE_KIND",
    }
    assert set(files.environment) <= known, set(files.environment) - known
    Settings.load(None, files.environment)  # valid values: a bad one raises ConfigError naming it


def test_no_role_runs_as_root(files: DeployFiles) -> None:
    assert files.user.split(":")[0] not in ("", "root", "0")
    for unit in ("jobengine-api.service", "jobengine-scheduler.service", "jobengine-worker@.service"):
        assert read_unit(DEPLOY / "systemd" / unit)["User"] == ["jobengine"], unit


def test_the_parsers_name_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "bad.env"
    bad.write_text("JOBENGINE_DATABASE\n")
    with pytest.raises(AssertionError, match=r"bad.env:1: not NAME=value"):
        read_env_file(bad)
    (tmp_path / "systemd").mkdir()
    (tmp_path / "systemd" / "jobengine-api.service").write_text("[Service]\nUser=jobengine\n")
    with pytest.raises(AssertionError, match=r"jobengine-api\.service: no ExecStart"):
        DeployFiles.read(tmp_path)
