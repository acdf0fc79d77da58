"""The ``queue:`` settings: the original system's YAML parses as written, defaults fill the rest, bad values
name their path, and ``JOBENGINE_QUEUE_*`` overrides apply."""

from __future__ import annotations

import pytest
import yaml

from jobengine.core.queue_config import QueueConfig
from jobengine.errors import ConfigError
from jobengine.settings import Settings

ORIGINAL = """
queue:
  kind: nats            # database | redis | nats
  deadLetterEnabled: true
  maxDeliveryAttempts: 5
  nats:
    url: "nats://127.0.0.1:4222"
    planner: {stream: SCHEDULER_PLANNER, subject: scheduler.planner, durableConsumer: scheduler-planners, deadLetterStream: SCHEDULER_PLANNER_DEAD, deadLetterSubject: scheduler.planner.dead}
    runner:  {stream: SCHEDULER_RUNNER, subject: scheduler.runner, durableConsumer: scheduler-runners}
  redis:
    url: "redis://127.0.0.1:6379/0"
    deadLetterStream: "scheduler:planner:dead"
    idempotencyKeyPrefix: "scheduler:planner:idemp:"
"""  # noqa: E501 - as users write it


def test_the_original_systems_yaml_parses_as_written() -> None:
    settings = Settings.from_mapping(yaml.safe_load(ORIGINAL), env={})
    q = settings.queue
    assert (q.kind, q.dead_letter_enabled, q.max_delivery_attempts, q.broker) == ("nats", True, 5, True)
    assert q.nats.url == "nats://127.0.0.1:4222"
    assert q.nats.planner.durable_consumer == "scheduler-planners"
    assert q.nats.planner.dead_letter_subject == "scheduler.planner.dead"
    assert q.nats.runner.stream == "SCHEDULER_RUNNER"
    assert q.nats.runner.dead_letter_stream == "SCHEDULER_RUNNER_DEAD"  # a default fills what is left out
    assert q.redis.planner.dead_letter_stream == "scheduler:planner:dead"  # top-level keys: the planner's
    assert q.redis.planner.idempotency_key_prefix == "scheduler:planner:idemp:"
    assert q.redis.runner.stream == "scheduler:runner"


def test_defaults_are_the_database_transport() -> None:
    q = Settings().queue
    assert q == QueueConfig()
    assert (q.kind, q.broker, q.max_delivery_attempts, q.dead_letter_enabled) == ("database", False, 5, True)


def test_environment_overrides_apply() -> None:
    env = {
        "JOBENGINE_QUEUE_KIND": "redis",
        "JOBENGINE_QUEUE_REDIS_URL": "redis://cache:6380/2",
        "JOBENGINE_QUEUE_DEAD_LETTER_ENABLED": "false",
        "JOBENGINE_QUEUE_MAX_DELIVERY_ATTEMPTS": "9",
    }
    q = Settings.from_mapping({}, env=env).queue
    assert (q.kind, q.redis.url, q.dead_letter_enabled, q.max_delivery_attempts) == (
        "redis", "redis://cache:6380/2", False, 9,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"kind": "kafka"}, "queue.kind"),
        ({"maxDeliveryAttempts": 0}, "queue.maxDeliveryAttempts"),
        ({"maxDeliveryAttempts": "many"}, "queue.maxDeliveryAttempts"),
        ({"deadLetterEnabled": "perhaps"}, "queue.deadLetterEnabled"),
        ({"nats": {"runner": {"stream": "has.dots"}}}, "queue.nats.runner.stream"),
        ({"nats": {"runner": {"subject": "wild.*"}}}, "queue.nats.runner.subject"),
        ({"redis": {"runner": {"stream": ""}}}, "queue.redis.runner.stream"),
        ({"redis": {"bogus": 1}}, "queue.redis.bogus"),
        ({"nats": "nats://x"}, "queue.nats"),
        ({"nats": {"replicas": 0}}, "queue.nats.replicas"),
        ({"nats": {"replicas": 7}}, "queue.nats.replicas"),
        ({"nats": {"url": " , "}}, "queue.nats.url"),
    ],
)
def test_bad_values_name_their_path(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        QueueConfig.load(values)


def test_a_nats_cluster_is_several_comma_separated_urls_and_a_replica_count() -> None:
    values = {"kind": "nats", "nats": {"url": "nats://n1:4222, nats://n2:4222,nats://n3:4222", "replicas": 3}}
    q = QueueConfig.load(values)
    assert q.nats.servers == ["nats://n1:4222", "nats://n2:4222", "nats://n3:4222"]
    assert q.nats.replicas == 3
    assert QueueConfig().nats.servers == ["nats://127.0.0.1:4222"]
    assert QueueConfig().nats.replicas == 1
    env = {"JOBENGINE_QUEUE_NATS_URL": "nats://a:1,nats://b:2", "JOBENGINE_QUEUE_NATS_REPLICAS": "3"}
    q = QueueConfig.load(None, env)
    assert (q.nats.servers, q.nats.replicas) == (["nats://a:1", "nats://b:2"], 3)
