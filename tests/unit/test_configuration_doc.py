"""docs/configuration.md cannot drift from the settings: every field is listed with its environment variable,
the committed page is exactly what the generator renders, and every ``queue:`` example in it parses."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from jobengine.core.queue_config import QueueConfig
from jobengine.settings import Settings
from jobengine.settings_doc import REGENERATE, env_var, render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), re.MULTILINE | re.DOTALL)


def _queue_yaml() -> list[str]:
    return [b for b in _blocks("yaml") if b.startswith("queue:")]


def _queue_env() -> list[str]:
    return [b for b in _blocks("sh") if "JOBENGINE_QUEUE_" in b]


@pytest.mark.parametrize("name", [f.name for f in fields(Settings) if f.name != "queue"])
def test_every_setting_is_listed_with_its_environment_variable(name: str) -> None:
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"docs/configuration.md lists `{name}` {len(rows)} times; run: {REGENERATE}"
    assert f"`{env_var(name)}`" in rows[0], f"`{name}`'s row lacks {env_var(name)}; run: {REGENERATE}"


def test_the_queue_section_is_listed_with_its_environment_variables() -> None:
    text = PAGE.read_text()
    assert "| `queue` |" in text and "## The `queue:` section" in text
    for var in ("JOBENGINE_QUEUE_KIND", "JOBENGINE_QUEUE_REDIS_URL", "JOBENGINE_QUEUE_NATS_URL"):
        assert var in text


def test_the_committed_page_is_what_the_generator_renders() -> None:
    assert PAGE.read_text() == render(), f"docs/configuration.md is out of date; regenerate it: {REGENERATE}"


def test_the_generator_runs_as_a_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "jobengine.settings_doc"], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout == render()


def test_there_is_a_queue_example_per_transport_in_yaml_and_in_the_environment() -> None:
    kinds = [QueueConfig.load(yaml.safe_load(block)["queue"]).kind for block in _queue_yaml()]
    assert sorted(kinds) == ["database", "nats", "redis"]
    env_kinds = [re.search(r"JOBENGINE_QUEUE_KIND=(\w+)", b) for b in _queue_env()]
    assert sorted(m.group(1) for m in env_kinds if m) == ["database", "nats", "redis"]


@pytest.mark.parametrize("index", range(3))
def test_each_yaml_example_parses_into_what_it_says(index: int, tmp_path: Path) -> None:
    block = _queue_yaml()[index]
    written = yaml.safe_load(block)["queue"]
    config = tmp_path / "jobengine.yaml"
    config.write_text(block)
    queue = Settings.load(config, env={}).queue
    assert queue.kind == written["kind"]
    transport = written.get(queue.kind)
    if queue.kind == "redis":
        assert queue.redis.url == transport["url"]
        assert queue.redis.planner.dead_letter_stream == transport["deadLetterStream"]
        assert queue.redis.planner.idempotency_key_prefix == transport["idempotencyKeyPrefix"]
        assert queue.redis.runner.stream == transport["runner"]["stream"]
    elif queue.kind == "nats":
        assert queue.nats.url == transport["url"]
        assert queue.nats.planner.dead_letter_subject == transport["planner"]["deadLetterSubject"]
        assert queue.nats.runner.durable_consumer == transport["runner"]["durableConsumer"]


@pytest.mark.parametrize("index", range(3))
def test_each_environment_example_parses_into_what_it_says(index: int) -> None:
    pairs = re.findall(r"^export (JOBENGINE_QUEUE_\w+)=(\S+)$", _queue_env()[index], re.MULTILINE)
    env = dict(pairs)
    assert env, "an environment example sets JOBENGINE_QUEUE_* variables"
    queue = Settings.from_mapping({}, env).queue
    assert queue.kind == env["JOBENGINE_QUEUE_KIND"]
    if queue.kind == "redis":
        assert queue.redis.url == env["JOBENGINE_QUEUE_REDIS_URL"]
    if queue.kind == "nats":
        assert queue.nats.url == env["JOBENGINE_QUEUE_NATS_URL"]
    if "JOBENGINE_QUEUE_MAX_DELIVERY_ATTEMPTS" in env:
        assert queue.max_delivery_attempts == int(env["JOBENGINE_QUEUE_MAX_DELIVERY_ATTEMPTS"])


def test_the_general_examples_parse() -> None:
    yaml_block, *_ = [b for b in _blocks("yaml") if not b.startswith("queue:")]
    settings = Settings.from_mapping(yaml.safe_load(yaml_block), env={})
    env = dict(re.findall(r"^export (JOBENGINE_\w+)=(\S+)$", _blocks("sh")[0], re.MULTILINE))
    assert Settings.from_mapping({}, env) == settings
    assert settings.worker_queues == ("mail", "reports")
