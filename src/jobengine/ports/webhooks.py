"""The webhook store: endpoints, the delivery outbox, attempts, inbound hooks and the receipts of their
events (an optional port beside the Store, implemented for SQLite and PostgreSQL; tables: migrations
``0005_webhooks`` and ``0011_sessions_hooks``). Values in and out carry secrets in clear; the SQL stores seal
them at rest (:mod:`jobengine.secretbox`).

Deliveries are an outbox: ``fan_out`` moves a named cursor over the event log from ``expected`` to ``new``
(compare-and-set) and inserts the deliveries of those events in the same transaction, so two dispatchers
never insert the same deliveries, and a crash before the commit leaves the events to fan out again. A
delivery's body is a snapshot taken from the event, so retention deleting the job changes nothing.

``claim_deliveries`` hands due deliveries of enabled endpoints to one dispatcher under a lease token;
``finish_attempt`` / ``postpone`` are fenced by that token, so an attempt is recorded (and sent) by one
process only: a dispatcher whose lease lapsed changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from jobengine.core.models import Event
from jobengine.core.webhooks.model import Attempt, Delivery, Endpoint, InboundHook


@runtime_checkable
class WebhookStore(Protocol):
    # -- endpoints ------------------------------------------------------------------------------------
    async def insert_endpoint(self, endpoint: Endpoint) -> None: ...

    async def get_endpoint(self, endpoint_id: str, tenant: str | None = None) -> Endpoint | None: ...

    async def list_endpoints(self, tenant: str | None = None) -> list[Endpoint]:
        """Oldest first; every tenant's when ``tenant`` is None."""
        ...

    async def save_endpoint(self, endpoint: Endpoint) -> None:
        """Replace the stored endpoint of that id."""
        ...

    async def delete_endpoint(self, endpoint_id: str, tenant: str) -> bool:
        """Delete it with its deliveries and their attempts."""
        ...

    async def mark_endpoint(self, endpoint_id: str, ok: bool, now: float) -> None:
        """A success clears ``failing_since``; a failure sets it unless already set."""
        ...

    async def disable_endpoint(self, endpoint_id: str, reason: str, now: float) -> Event | None:
        """Disable it and append a ``webhook.endpoint_disabled`` event in one transaction; None (and no
        event) when it was already disabled or is gone."""
        ...

    # -- the outbox -----------------------------------------------------------------------------------
    async def get_cursor(self, name: str) -> int | None: ...

    async def init_cursor(self, name: str, event_id: int) -> None:
        """Create the cursor at ``event_id`` unless it exists."""
        ...

    async def fan_out(self, name: str, expected: int, new: int, deliveries: Sequence[Delivery]) -> bool:
        """Move the cursor from ``expected`` to ``new`` and insert ``deliveries`` (one per endpoint and event:
        duplicates are ignored), atomically; False (nothing written) when the cursor was not at ``expected``."""
        ...

    async def claim_deliveries(self, now: float, limit: int, lease_seconds: float, token: str) -> list[Delivery]:
        """Up to ``limit`` pending deliveries due at ``now`` of enabled endpoints whose lease is free,
        leased to ``token`` until ``now + lease_seconds``; earliest due first."""
        ...

    async def finish_attempt(self, delivery: Delivery, attempt: Attempt) -> bool:
        """Record ``attempt`` and store ``delivery``'s new state (lease cleared) if the delivery is still
        leased to ``delivery.lease_token``; False (nothing written) otherwise."""
        ...

    async def postpone(self, delivery_id: str, token: str, next_at: float) -> bool:
        """Give a leased delivery back without an attempt (rate limited), due at ``next_at``."""
        ...

    async def get_delivery(self, delivery_id: str, tenant: str | None = None) -> Delivery | None: ...

    async def list_deliveries(
        self, tenant: str, endpoint_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[Delivery]:
        """Newest first."""
        ...

    async def list_attempts(self, delivery_id: str) -> list[Attempt]: ...

    async def resend(self, delivery_id: str, tenant: str, now: float) -> Delivery | None:
        """Start a new series of attempts now (whatever its state): pending, series count 0, window from now."""
        ...

    # -- inbound hooks --------------------------------------------------------------------------------
    async def insert_inbound(self, hook: InboundHook) -> bool:
        """False when the tenant already has a hook of that name (names are per tenant)."""
        ...

    async def get_inbound(self, name: str, tenant: str) -> InboundHook | None: ...

    async def inbound_named(self, name: str) -> list[InboundHook]:
        """The hooks of that name in every tenant, by tenant."""
        ...

    async def list_inbound(self, tenant: str) -> list[InboundHook]: ...

    async def delete_inbound(self, name: str, tenant: str) -> bool:
        """Delete it with its receipts."""
        ...

    async def claim_inbound_event(self, tenant: str, hook: str, event_id: str, now: float, window: float) -> bool:
        """Record that ``hook`` received the event ``event_id`` at ``now``, atomically: False (nothing written)
        when it already did within ``window`` seconds before (a replay)."""
        ...

    async def release_inbound_event(self, tenant: str, hook: str, event_id: str) -> None:
        """Forget a receipt whose event could not be handled, so that the sender's retry is not a replay."""
        ...

    async def prune_inbound_events(self, before: float, limit: int) -> int:
        """Delete up to ``limit`` receipts recorded at or before ``before``; return how many."""
        ...

    # -- secrets at rest ------------------------------------------------------------------------------
    async def reseal_secrets(self) -> int:
        """Seal every stored secret that is clear or sealed with an older key with the first key (a store that
        keeps nothing at rest: 0). Returns how many rows changed. Raises ConfigError without a key."""
        ...

    async def count_stale_secrets(self) -> int:
        """How many stored secrets :meth:`reseal_secrets` would rewrite."""
        ...

    async def close(self) -> None: ...
