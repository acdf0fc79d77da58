"""The ``webhook_*``, ``inbound_*`` and ``secret_keys`` settings: validation (called by Settings) and the
values the dispatcher uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobengine.errors import ConfigError

if TYPE_CHECKING:
    from jobengine.settings import Settings
    from jobengine.webhooks.policy import RetrySchedule
    from jobengine.webhooks.ssrf import AddressPolicy


def check_webhook_settings(s: Settings) -> None:
    if s.webhook_rate_limiter not in ("noop", "local", "redis"):
        raise ConfigError("webhook_rate_limiter: one of noop, local, redis")
    if s.webhook_rate_limiter == "redis" and not s.webhook_redis_url:
        raise ConfigError("webhook_redis_url: the redis rate limiter needs a Redis URL (redis://host:6379/0)")
    if s.webhook_rate_limit < 1:
        raise ConfigError("webhook_rate_limit: must be at least 1")
    if s.webhook_concurrency < 1:
        raise ConfigError("webhook_concurrency: must be at least 1")
    positive = ("webhook_rate_window", "webhook_timeout", "webhook_retry_base", "webhook_retry_max_delay",
                "webhook_retry_window", "webhook_poll_interval")  # fmt: skip
    for name in positive:
        if getattr(s, name) <= 0:
            raise ConfigError(f"{name}: must be a positive number of seconds")
    if not 0 <= s.webhook_retry_jitter < 1:
        raise ConfigError("webhook_retry_jitter: must be from 0 to below 1 (a fraction of the delay)")
    if not 0 <= s.webhook_rate_margin <= 10:
        raise ConfigError("webhook_rate_margin: must be from 0 to 10 seconds")
    if s.webhook_secret_overlap < 0:
        raise ConfigError("webhook_secret_overlap: must be >= 0 seconds")
    if s.inbound_max_body_bytes < 1024:
        raise ConfigError("inbound_max_body_bytes: must be at least 1024")
    if s.inbound_tolerance <= 0:
        raise ConfigError("inbound_tolerance: must be a positive number of seconds")
    # A signed timestamp is accepted from tolerance before to tolerance after its time: its id must be
    # remembered at least that long, or a replay late in that span would pass.
    if s.inbound_replay_window < 2 * s.inbound_tolerance:
        raise ConfigError("inbound_replay_window: must be at least twice inbound_tolerance")
    if s.secret_keys:
        from jobengine.secretbox import SecretBox

        SecretBox(s.secret_keys)  # a malformed key fails here, naming the setting
    if s.webhook_allow_hosts:  # only then is the SSRF module loaded: most processes never send a webhook
        try:
            address_policy(s)
        except ValueError as exc:
            raise ConfigError(f"webhook_allow_hosts: {exc}") from None


def retry_schedule(s: Settings) -> RetrySchedule:
    from jobengine.webhooks.policy import RetrySchedule

    return RetrySchedule(base=s.webhook_retry_base, max_delay=s.webhook_retry_max_delay,
                         window=s.webhook_retry_window, jitter=s.webhook_retry_jitter)  # fmt: skip


def address_policy(s: Settings) -> AddressPolicy:
    from jobengine.webhooks.ssrf import AddressPolicy

    return AddressPolicy.from_entries(s.webhook_allow_hosts)
