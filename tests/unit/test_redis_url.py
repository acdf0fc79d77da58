"""``redis+sentinel://`` URLs: what they name, and a ConfigError naming the setting for a malformed one, in
``queue.redis.url`` (YAML and environment) and ``webhook_redis_url``. Opening a client connects nothing."""

from __future__ import annotations

import pytest

from jobengine.core.queue_config import QueueConfig
from jobengine.core.redis_url import SentinelUrl, is_sentinel_url, parse_sentinel_url
from jobengine.errors import ConfigError
from jobengine.settings import Settings


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis+sentinel://s1/jobs", SentinelUrl((("s1", 26379),), "jobs", 0, None, None)),
        (
            "redis+sentinel://s1:26380,10.0.0.2,[::1]:5000/my-master/7",
            SentinelUrl((("s1", 26380), ("10.0.0.2", 26379), ("::1", 5000)), "my-master", 7, None, None),
        ),
        ("REDIS+SENTINEL://:s%40cret@s1/jobs/2", SentinelUrl((("s1", 26379),), "jobs", 2, None, "s@cret")),
        ("redis+sentinel://app:pw@s1,s2/jobs/", SentinelUrl((("s1", 26379), ("s2", 26379)), "jobs", 0, "app", "pw")),
    ],
)
def test_a_sentinel_url_names_its_sentinels_service_and_db(url: str, expected: SentinelUrl) -> None:
    assert is_sentinel_url(url)
    assert parse_sentinel_url(url, "queue.redis.url") == expected


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis+sentinel://s1", "service name"),
        ("redis+sentinel://s1/", "service name"),
        ("redis+sentinel:///jobs", "'' is not a host"),
        ("redis+sentinel://s1,,s2/jobs", "'' is not a host"),
        ("redis+sentinel://s1:0/jobs", "port 0 is out of range"),
        ("redis+sentinel://s1:70000/jobs", "port 70000 is out of range"),
        ("redis+sentinel://s1:http/jobs", "'s1:http' is not a host"),
        ("redis+sentinel://s1/jobs/two", "'two' is not a number"),
        ("redis+sentinel://s1/jobs?ssl=true", "no query"),
        ("redis+sentinel://s1/jo bs", "service name"),
    ],
)
def test_a_malformed_sentinel_url_names_the_setting_and_the_form(url: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_sentinel_url(url, "queue.redis.url")
    message = str(caught.value)
    assert message.startswith("queue.redis.url: ") and why in message
    assert "redis+sentinel://[user:password@]host[:port][,host[:port]...]/service[/db]" in message


def test_the_queue_section_refuses_a_malformed_sentinel_url_by_its_path() -> None:
    with pytest.raises(ConfigError, match=r"^queue\.redis\.url: .*service name"):
        QueueConfig.load({"kind": "redis", "redis": {"url": "redis+sentinel://s1:26379"}})
    with pytest.raises(ConfigError, match=r"^queue\.redis\.url: .*port 99999"):
        QueueConfig.load({"kind": "redis"}, {"JOBENGINE_QUEUE_REDIS_URL": "redis+sentinel://s1:99999/jobs"})
    ok = QueueConfig.load({"kind": "redis", "redis": {"url": "redis+sentinel://s1,s2/jobs/1"}})
    assert ok.redis.url == "redis+sentinel://s1,s2/jobs/1"


def test_the_queue_section_refuses_a_url_of_another_scheme() -> None:
    # kombu / Celery spell Sentinel ``sentinel://``; redis-py would refuse it only when the worker starts.
    with pytest.raises(ConfigError, match=r"^queue\.redis\.url: a redis://, rediss://, unix:// or redis\+sentinel"):
        QueueConfig.load({"kind": "redis", "redis": {"url": "sentinel://s1:26379"}})
    for url in ("redis://h:6379/0", "rediss://h/1", "unix:///run/redis.sock"):
        assert QueueConfig.load({"kind": "redis", "redis": {"url": url}}).redis.url == url
    # Unused when another kind delivers.
    assert QueueConfig.load({"kind": "nats", "redis": {"url": "nats://h:4222"}}).redis.url == "nats://h:4222"


def test_the_webhook_rate_limiters_url_is_checked_under_its_own_name() -> None:
    with pytest.raises(ConfigError, match=r"^webhook_redis_url: .*'' is not a host"):
        Settings(webhook_rate_limiter="redis", webhook_redis_url="redis+sentinel:///jobs")
    assert Settings(webhook_rate_limiter="redis", webhook_redis_url="redis+sentinel://s1/jobs").webhook_redis_url


async def test_a_sentinel_client_is_built_without_connecting_and_closes_cleanly() -> None:
    from jobengine.backends.redis.client import SentinelRedis
    from jobengine.backends.redis.transport import connect

    # Nothing listens on these ports: building the client must not try.
    client = connect("redis+sentinel://127.0.0.1:1,127.0.0.1:2/jobs/3", "w1")
    assert isinstance(client, SentinelRedis)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["db"], kwargs["client_name"]) == (3, "w1")
    await client.aclose()


async def test_a_transports_errors_show_its_url_without_the_password() -> None:
    from jobengine.backends.redis.transport import RedisTransport
    from jobengine.core.queue_config import RedisConfig

    # Nothing listens on port 1: the Sentinels refuse at once, and the error names the URL.
    transport = RedisTransport("redis+sentinel://app:s3cret@127.0.0.1:1/jobs/0", "runner", RedisConfig().runner)
    try:
        health = await transport.health()
    finally:
        await transport.close()
    assert not health.ok
    assert "redis+sentinel://app:***@127.0.0.1:1/jobs/0" in health.detail and "s3cret" not in health.detail
