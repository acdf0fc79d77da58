"""The commands and settings of the deploy files (deploy/), read the way systemd and compose read them.

The network test bed (support/netbed.py) starts its processes from these, so what the bed proves holds for
the files an operator installs, and tests/unit/test_deploy.py checks the three files name the same
commands. Usage::

    files = DeployFiles.read()
    files.systemd["worker"]   # ['worker', '--app', '${JOBENGINE_APP}'] (after the `jobengine` program)
    files.command("worker", {"JOBENGINE_APP": "tests.support.netbed_app:app"})
    files.environment         # the JOBENGINE_* variables of deploy/jobengine.env

Failure policy: a file missing, or a unit or compose service without its command, raises ``AssertionError``
naming the file and what is missing.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROGRAM = "jobengine"
#: Each role's systemd unit; the migration runs before the API (its ExecStartPre).
UNITS = {
    "api": "jobengine-api.service",
    "scheduler": "jobengine-scheduler.service",
    "worker": "jobengine-worker@.service",
}
#: The compose services of the roles (named after them).
ROLES = ("migrate", "api", "scheduler", "worker")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def read_env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines (systemd's EnvironmentFile and compose's env_file agree on this subset)."""
    env: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep and name.isidentifier(), f"{path.name}:{number}: not NAME=value: {line!r}"
        env[name] = value.strip().strip('"')
    return env


def read_unit(path: Path) -> dict[str, list[str]]:
    """The ``[Service]`` keys of a systemd unit, each with its values in order (keys may repeat)."""
    assert path.exists(), f"missing {path}"
    section, keys = "", dict[str, list[str]]()
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            keys.setdefault(key.strip(), []).append(value.strip())
    return keys


def _after_program(argv: list[str], where: str) -> list[str]:
    assert argv and Path(argv[0]).name == PROGRAM, f"{where}: the command does not run {PROGRAM}: {argv}"
    return argv[1:]


@dataclass(frozen=True)
class DeployFiles:
    """Each role's arguments to ``jobengine`` in the systemd units, the compose file and the image."""

    systemd: dict[str, list[str]]
    compose: dict[str, list[str]]
    entrypoint: list[str]
    user: str
    environment: dict[str, str]
    environment_files: dict[str, list[str]]

    @classmethod
    def read(cls, deploy: Path = DEPLOY) -> DeployFiles:
        systemd, env_files = {}, {}
        for role, unit in UNITS.items():
            keys = read_unit(deploy / "systemd" / unit)
            assert keys.get("ExecStart"), f"{unit}: no ExecStart"
            systemd[role] = _after_program(shlex.split(keys["ExecStart"][-1]), unit)
            env_files[role] = keys.get("EnvironmentFile", [])
            for pre in keys.get("ExecStartPre", []):
                argv = _after_program(shlex.split(pre.lstrip("-")), unit)
                systemd[argv[0]] = argv
        compose_file = yaml.safe_load((deploy / "compose.yaml").read_text())
        services: dict[str, Any] = compose_file["services"]
        compose = {}
        for role in ROLES:
            assert role in services, f"compose.yaml: no service {role}"
            command = services[role].get("command")
            assert isinstance(command, list), f"compose.yaml: service {role} has no command list"
            compose[role] = [str(part) for part in command]
        entrypoint, user = _image(deploy / "Containerfile")
        return cls(systemd, compose, entrypoint, user, read_env_file(deploy / "jobengine.env"), env_files)

    def command(self, role: str, env: dict[str, str]) -> list[str]:
        """The systemd unit's arguments to ``jobengine`` for ``role`` with ``${NAME}`` taken from ``env``
        (as systemd expands them from the EnvironmentFile)."""
        return [_VARIABLE.sub(lambda m: env[m.group(1)], part) for part in self.systemd[role]]


def _image(path: Path) -> tuple[list[str], str]:
    """The image's ENTRYPOINT (exec form) and the last USER."""
    import json

    assert path.exists(), f"missing {path}"
    entrypoint: list[str] = []
    user = "root"
    for line in path.read_text().splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "ENTRYPOINT":
            entrypoint = [str(part) for part in json.loads(rest)]
        elif word == "USER":
            user = rest.strip()
    return entrypoint, user
