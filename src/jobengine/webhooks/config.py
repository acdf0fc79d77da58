"""The values the webhook manager and dispatcher read from the ``webhook_*`` settings (checked by
``Settings``)."""

from __future__ import annotations

from jobengine.core.webhooks.addresses import AddressPolicy
from jobengine.core.webhooks.policy import RetrySchedule
from jobengine.settings import Settings


def retry_schedule(s: Settings) -> RetrySchedule:
    return RetrySchedule(base=s.webhook_retry_base, max_delay=s.webhook_retry_max_delay,
                         window=s.webhook_retry_window, jitter=s.webhook_retry_jitter)  # fmt: skip


def address_policy(s: Settings) -> AddressPolicy:
    return AddressPolicy.from_entries(s.webhook_allow_hosts)
