"""The webhook store in memory (one process; the reference the SQL stores are tested against). Its
``webhook.endpoint_disabled`` events go into the memory store's own event log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from jobengine.core.models import Event, NewEvent
from jobengine.core.webhooks.model import ENDPOINT_DISABLED, PENDING, Attempt, Delivery, Endpoint, InboundHook

if TYPE_CHECKING:
    from .store import MemoryStore


class MemoryWebhookStore:
    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._endpoints: dict[str, Endpoint] = {}
        self._deliveries: dict[str, Delivery] = {}
        self._attempts: dict[str, list[Attempt]] = {}
        self._cursors: dict[str, int] = {}
        self._inbound: dict[tuple[str, str], InboundHook] = {}  # (tenant, name)
        self._receipts: dict[tuple[str, str, str], float] = {}  # (tenant, hook, event id) -> received at

    async def insert_endpoint(self, endpoint: Endpoint) -> None:
        self._endpoints[endpoint.id] = endpoint

    async def get_endpoint(self, endpoint_id: str, tenant: str | None = None) -> Endpoint | None:
        e = self._endpoints.get(endpoint_id)
        return e if e is not None and (tenant is None or e.tenant == tenant) else None

    async def list_endpoints(self, tenant: str | None = None) -> list[Endpoint]:
        found = [e for e in self._endpoints.values() if tenant is None or e.tenant == tenant]
        return sorted(found, key=lambda e: (e.created_at, e.id))

    async def save_endpoint(self, endpoint: Endpoint) -> None:
        if endpoint.id in self._endpoints:
            self._endpoints[endpoint.id] = endpoint

    async def delete_endpoint(self, endpoint_id: str, tenant: str) -> bool:
        if await self.get_endpoint(endpoint_id, tenant) is None:
            return False
        del self._endpoints[endpoint_id]
        for d in [d for d in self._deliveries.values() if d.endpoint_id == endpoint_id]:
            del self._deliveries[d.id]
            self._attempts.pop(d.id, None)
        return True

    async def mark_endpoint(self, endpoint_id: str, ok: bool, now: float) -> None:
        e = self._endpoints.get(endpoint_id)
        if e is None:
            return
        if ok and e.failing_since is not None:
            self._endpoints[e.id] = replace(e, failing_since=None)
        elif not ok and e.failing_since is None:
            self._endpoints[e.id] = replace(e, failing_since=now)

    async def disable_endpoint(self, endpoint_id: str, reason: str, now: float) -> Event | None:
        e = self._endpoints.get(endpoint_id)
        if e is None or not e.enabled:
            return None
        self._endpoints[e.id] = replace(e, enabled=False, disabled_reason=reason, updated_at=now)
        data = {"endpoint_id": e.id, "url": e.url, "reason": reason}
        return self._store._append([NewEvent(ENDPOINT_DISABLED, e.tenant, None, None, None, data)], now)[0]

    async def get_cursor(self, name: str) -> int | None:
        return self._cursors.get(name)

    async def init_cursor(self, name: str, event_id: int) -> None:
        self._cursors.setdefault(name, event_id)

    async def fan_out(self, name: str, expected: int, new: int, deliveries: Sequence[Delivery]) -> bool:
        if self._cursors.get(name) != expected:
            return False
        self._cursors[name] = new
        seen = {(d.endpoint_id, d.event_id) for d in self._deliveries.values()}
        for d in deliveries:
            if (d.endpoint_id, d.event_id) not in seen:
                self._deliveries[d.id] = d
                seen.add((d.endpoint_id, d.event_id))
        return True

    async def claim_deliveries(self, now: float, limit: int, lease_seconds: float, token: str) -> list[Delivery]:
        due = [
            d for d in self._deliveries.values()
            if d.state == PENDING and d.next_at <= now and (d.lease_until is None or d.lease_until <= now)
            and (e := self._endpoints.get(d.endpoint_id)) is not None and e.enabled
        ]  # fmt: skip
        picked = sorted(due, key=lambda d: (d.next_at, d.id))[:limit]
        out = []
        for d in picked:
            leased = replace(d, lease_token=token, lease_until=now + lease_seconds)
            self._deliveries[d.id] = leased
            out.append(leased)
        return out

    async def finish_attempt(self, delivery: Delivery, attempt: Attempt) -> bool:
        held = self._deliveries.get(delivery.id)
        if held is None or held.lease_token is None or held.lease_token != delivery.lease_token:
            return False
        self._deliveries[delivery.id] = replace(delivery, lease_token=None, lease_until=None)
        self._attempts.setdefault(delivery.id, []).append(attempt)
        return True

    async def postpone(self, delivery_id: str, token: str, next_at: float) -> bool:
        held = self._deliveries.get(delivery_id)
        if held is None or held.lease_token != token:
            return False
        self._deliveries[delivery_id] = replace(held, next_at=next_at, lease_token=None, lease_until=None)
        return True

    async def get_delivery(self, delivery_id: str, tenant: str | None = None) -> Delivery | None:
        d = self._deliveries.get(delivery_id)
        return d if d is not None and (tenant is None or d.tenant == tenant) else None

    async def list_deliveries(
        self, tenant: str, endpoint_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[Delivery]:
        found = [
            d for d in self._deliveries.values()
            if d.tenant == tenant and endpoint_id in (None, d.endpoint_id) and state in (None, d.state)
        ]  # fmt: skip
        return sorted(found, key=lambda d: (d.created_at, d.id), reverse=True)[:limit]

    async def list_attempts(self, delivery_id: str) -> list[Attempt]:
        return list(self._attempts.get(delivery_id, []))

    async def resend(self, delivery_id: str, tenant: str, now: float) -> Delivery | None:
        d = await self.get_delivery(delivery_id, tenant)
        if d is None:
            return None
        d = replace(d, state=PENDING, series_attempts=0, next_at=now, window_start=now, updated_at=now,
                    lease_token=None, lease_until=None)  # fmt: skip
        self._deliveries[d.id] = d
        return d

    async def insert_inbound(self, hook: InboundHook) -> bool:
        if (hook.tenant, hook.name) in self._inbound:
            return False
        self._inbound[(hook.tenant, hook.name)] = hook
        return True

    async def get_inbound(self, name: str, tenant: str) -> InboundHook | None:
        return self._inbound.get((tenant, name))

    async def inbound_named(self, name: str) -> list[InboundHook]:
        return sorted((h for h in self._inbound.values() if h.name == name), key=lambda h: h.tenant)

    async def list_inbound(self, tenant: str) -> list[InboundHook]:
        return sorted((h for h in self._inbound.values() if h.tenant == tenant), key=lambda h: h.name)

    async def delete_inbound(self, name: str, tenant: str) -> bool:
        if self._inbound.pop((tenant, name), None) is None:
            return False
        for key in [k for k in self._receipts if k[:2] == (tenant, name)]:
            del self._receipts[key]
        return True

    async def claim_inbound_event(self, tenant: str, hook: str, event_id: str, now: float, window: float) -> bool:
        seen = self._receipts.get((tenant, hook, event_id))
        if seen is not None and seen > now - window:
            return False
        self._receipts[(tenant, hook, event_id)] = now
        return True

    async def release_inbound_event(self, tenant: str, hook: str, event_id: str) -> None:
        self._receipts.pop((tenant, hook, event_id), None)

    async def prune_inbound_events(self, before: float, limit: int) -> int:
        old = sorted((at, key) for key, at in self._receipts.items() if at <= before)[:limit]
        for _, key in old:
            del self._receipts[key]
        return len(old)

    async def reseal_secrets(self) -> int:
        return 0  # nothing is kept at rest

    async def count_stale_secrets(self) -> int:
        return 0

    async def close(self) -> None:
        return None
