"""Settings: YAML file, then ``JOBENGINE_*`` overrides, then CLI flags; every bad value names its setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobengine.cli.common import load_settings
from jobengine.errors import ConfigError
from jobengine.settings import Settings, in_state_dir, prepare_state_dir


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    return path


def test_defaults_without_file_or_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings.load(env={})
    assert settings == Settings()
    assert settings.database == ".jobengine/jobengine.db"  # in state_dir
    assert settings.heartbeat_every == settings.lease_seconds / 3


def test_yaml_values_are_coerced_to_the_field_types(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "database: /data/jobs.db\nworker_concurrency: 4\nlease_seconds: 12\nworker_queues: [mail, media]\n"
        "heartbeat_interval: 2.5\n",
    )
    settings = Settings.load(path, env={})
    assert settings.database == "/data/jobs.db"
    assert settings.worker_concurrency == 4
    assert settings.lease_seconds == 12.0 and isinstance(settings.lease_seconds, float)
    assert settings.worker_queues == ("mail", "media")
    assert settings.heartbeat_every == 2.5


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "database: from-file.db\nworker_concurrency: 4\n")
    env = {
        "JOBENGINE_DATABASE": "from-env.db",
        "JOBENGINE_WORKER_QUEUES": "a,b",
        "JOBENGINE_GRACE_PERIOD": "0",
        "OTHER_VARIABLE": "ignored",
    }
    settings = Settings.load(path, env=env)
    assert settings.database == "from-env.db"
    assert settings.worker_concurrency == 4  # not overridden
    assert settings.worker_queues == ("a", "b")
    assert settings.grace_period == 0.0


def test_the_working_directorys_jobengine_yaml_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "jobengine.yaml").write_text("retention_interval: 5\n")
    monkeypatch.chdir(tmp_path)
    assert Settings.load(env={}).retention_interval == 5.0


def test_an_empty_file_means_defaults(tmp_path: Path) -> None:
    assert Settings.load(write(tmp_path, ""), env={}) == Settings()


@pytest.mark.parametrize(
    ("yaml_text", "env", "message"),
    [
        ("worker_concurrency: many\n", {}, "worker_concurrency: 'many' is not a valid int"),
        ("", {"JOBENGINE_LEASE_SECONDS": "soon"}, "lease_seconds: 'soon' is not a valid float"),
        ("lease_seconds:\n", {}, "lease_seconds: None is not a valid float"),
        ("colour: blue\n", {}, "colour: unknown setting"),
        ("lease_seconds: 0\n", {}, "lease_seconds: must be a positive number of seconds"),
        ("worker_concurrency: 0\n", {}, "worker_concurrency: must be at least 1"),
        ("grace_period: -1\n", {}, "grace_period: must be >= 0 seconds"),
        ("", {"JOBENGINE_WORKER_FLUSH_SPACING": "-0.1"}, "worker_flush_spacing: must be between 0 and 10 seconds"),
        ("worker_flush_spacing: 60\n", {}, "worker_flush_spacing: must be between 0 and 10 seconds"),
        ("stale_after: 10\ndelete_after: 5\n", {}, "delete_after: must be >= stale_after"),
        ("lease_seconds: 3\nheartbeat_interval: 3\n", {}, "heartbeat_interval: must be shorter than lease_seconds"),
        ("sqlite_synchronous: sometimes\n", {}, "sqlite_synchronous: one of OFF, NORMAL, FULL, EXTRA"),
        ("sqlite_worker_synchronous: lazy\n", {}, "sqlite_worker_synchronous: one of OFF, NORMAL, FULL, EXTRA"),
        ("", {"JOBENGINE_WORKER_METRICS_PORT": "70000"}, "worker_metrics_port: must be a TCP port"),
        ("database_direct: postgresql://db/jobs\n", {}, "database_direct: a postgresql:// URL, and only with"),
        (
            "database: postgresql://bouncer/jobs\n",
            {"JOBENGINE_DATABASE_DIRECT": "db:5432"},
            "database_direct: a postgresql:// URL",
        ),
        ("- a list\n", {}, "must hold a mapping"),
        ("database: [unclosed\n", {}, "is not valid YAML"),
    ],
)
def test_bad_values_are_refused_naming_the_setting(
    tmp_path: Path, yaml_text: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.load(write(tmp_path, yaml_text), env=env)
    assert message in str(info.value)


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config: .*missing.yaml does not exist"):
        Settings.load(tmp_path / "missing.yaml", env={})


def test_cli_flags_apply_on_top_of_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "database: file.db\nworker_concurrency: 4\n")
    monkeypatch.setenv("JOBENGINE_WORKER_CONCURRENCY", "6")
    monkeypatch.setenv("JOBENGINE_GRACE_PERIOD", "7")
    settings = load_settings(path, database="flag.db", worker_concurrency=None)
    assert settings.database == "flag.db"  # the flag wins
    assert settings.worker_concurrency == 6  # no flag given: the environment's value stays
    assert settings.grace_period == 7.0
    with pytest.raises(ConfigError, match="worker_concurrency: must be at least 1"):
        load_settings(path, worker_concurrency=0)


def test_the_default_database_follows_the_state_directory(tmp_path: Path) -> None:
    assert Settings.load(env={"JOBENGINE_STATE_DIR": "/srv/state"}).database == "/srv/state/jobengine.db"
    given = Settings.load(env={"JOBENGINE_STATE_DIR": "/srv/state", "JOBENGINE_DATABASE": "jobs.db"})
    assert (given.state_dir, given.database) == ("/srv/state", "jobs.db")  # an explicit database stays where it is
    assert Settings(state_dir=str(tmp_path)).database == str(tmp_path / "jobengine.db")
    with pytest.raises(ConfigError, match="state_dir: give a directory"):
        Settings(state_dir=" ")


def test_the_state_directory_is_made_with_a_gitignore_of_everything(tmp_path: Path) -> None:
    settings = Settings(state_dir=str(tmp_path / "state"))
    assert in_state_dir(settings, settings.database)
    assert not in_state_dir(settings, tmp_path / "jobs.db")
    made = prepare_state_dir(settings)
    assert made == tmp_path / "state"
    assert (made / ".gitignore").read_text().splitlines()[-1] == "*"
    (made / ".gitignore").write_text("mine\n")
    prepare_state_dir(settings)  # a second time: the user's file is kept
    assert (made / ".gitignore").read_text() == "mine\n"
