"""The webhook facade the API and the CLI use (``engine.webhooks``): endpoints, deliveries, attempts,
resends and inbound hooks, validated here so every edge refuses bad input the same way."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from jobengine.core import bounds, codec
from jobengine.core.clock import iso
from jobengine.core.ids import IdKind, uuid7
from jobengine.core.mapping import TriggerMapping
from jobengine.core.models import Event, Json
from jobengine.core.runs import Run
from jobengine.core.webhooks import signing
from jobengine.core.webhooks.model import (
    DELIVERY_STATES,
    Attempt,
    Delivery,
    Endpoint,
    InboundHook,
    InboundLimited,
    InboundRefused,
    InboundReplay,
    InvalidWebhook,
    check_filter,
    check_name,
    check_rate,
)
from jobengine.errors import AlreadyExists, ConfigError, IllegalState, InvalidJob, NotFound
from jobengine.ports.ids import resolve_id
from jobengine.ports.ratelimit import RateLimiter
from jobengine.ports.webhooks import WebhookStore
from jobengine.serialize import event_to_json
from jobengine.webhooks.config import address_policy
from jobengine.webhooks.ssrf import Resolver, check_url, system_resolver

if TYPE_CHECKING:
    from jobengine.engine import Engine

#: The dispatcher's cursor over the event log.
CURSOR: Final = "webhooks"
_UNSET: Final[Any] = object()
#: Checked against when no hook of the name exists: a fixed secret nobody signs with.
_DECOY: Final = signing.PREFIX + "ZGVjb3ktc2VjcmV0LW5vYm9keS1zaWducy13aXRoLWl0"

log = logging.getLogger("jobengine.webhooks")


def delivery_body(event: Event) -> str:
    """The body of every delivery of ``event`` (Standard Webhooks' envelope): fixed when it is fanned out."""
    return codec.dumps({"type": event.type, "timestamp": iso(event.at), "data": event_to_json(event)})


class Webhooks:
    def __init__(self, engine: Engine, open_limiter: Callable[[], RateLimiter]) -> None:
        """``open_limiter`` builds the ``webhook_rate_limiter`` when first needed (the composition root
        chooses it, so this package names no backend)."""
        self.engine = engine
        self.settings = engine.settings
        self.policy = address_policy(engine.settings)
        #: How host names are resolved (tests replace it to make a name resolve to a private address).
        self.resolver: Resolver = system_resolver
        self._open_limiter = open_limiter
        self._limiter: RateLimiter | None = None
        self._wake: list[Callable[[], None]] = []

    @property
    def store(self) -> WebhookStore:
        return self.engine.webhook_store()

    @property
    def limiter(self) -> RateLimiter:
        """The limiter of ``webhook_rate_limiter``, shared by deliveries and inbound hooks of this process."""
        if self._limiter is None:
            self._limiter = self._open_limiter()
        return self._limiter

    def on_due(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when a delivery became due by hand (a resend, an endpoint enabled)."""
        self._wake.append(callback)

    def _woken(self) -> None:
        for callback in self._wake:
            callback()

    # -- endpoints ------------------------------------------------------------------------------------
    async def create_endpoint(
        self,
        tenant: str,
        url: str,
        *,
        secret: str | None = None,
        filter: Mapping[str, Any] | None = None,
        description: str = "",
        rate_limit: int | None = None,
        rate_window: float | None = None,
        enabled: bool = True,
    ) -> Endpoint:
        """Validate (the URL against SSRF too) and store a new endpoint; events from now on are delivered."""
        if secret is not None:
            signing.secret_key(secret)
        flt = check_filter(filter)
        limit, window = check_rate(rate_limit, rate_window)
        _check_description(description)
        await check_url(url, self.policy, self.resolver)
        now = self.engine.clock.now()
        endpoint = Endpoint(
            id="we_" + uuid7(), tenant=tenant, url=url, secret=secret or signing.new_secret(), filter=flt,
            description=description, enabled=bool(enabled), rate_limit=limit, rate_window=window,
            created_at=now, updated_at=now,
        )  # fmt: skip
        await self.store.init_cursor(CURSOR, await self.engine.event_log.newest_id())
        await self.store.insert_endpoint(endpoint)
        return endpoint

    async def get_endpoint(self, endpoint_id: str, tenant: str | None) -> Endpoint:
        """The endpoint ``endpoint_id`` names, whole or by a unique prefix (:func:`~jobengine.ports.ids.resolve_id`)."""
        endpoint = await self.store.get_endpoint(await self._full(IdKind.ENDPOINT, endpoint_id, tenant), tenant)
        if endpoint is None:
            raise NotFound("webhook endpoint", endpoint_id)
        return endpoint

    async def list_endpoints(self, tenant: str | None) -> list[Endpoint]:
        return await self.store.list_endpoints(tenant)

    async def update_endpoint(
        self,
        endpoint_id: str,
        tenant: str,
        *,
        url: str | None = None,
        filter: Mapping[str, Any] | None = _UNSET,
        description: str | None = None,
        rate_limit: int | None = _UNSET,
        rate_window: float | None = _UNSET,
    ) -> Endpoint:
        endpoint = await self.get_endpoint(endpoint_id, tenant)
        changes: dict[str, Any] = {}
        if url is not None:
            await check_url(url, self.policy, self.resolver)
            changes["url"] = url
        if filter is not _UNSET:
            changes["filter"] = check_filter(filter)
        if description is not None:
            changes["description"] = _check_description(description)
        if rate_limit is not _UNSET or rate_window is not _UNSET:
            limit = endpoint.rate_limit if rate_limit is _UNSET else rate_limit
            window = endpoint.rate_window if rate_window is _UNSET else rate_window
            changes["rate_limit"], changes["rate_window"] = check_rate(limit, window)
        endpoint = replace(endpoint, **changes, updated_at=self.engine.clock.now())
        await self.store.save_endpoint(endpoint)
        return endpoint

    async def set_enabled(self, endpoint_id: str, tenant: str, enabled: bool) -> Endpoint:
        """Enable (clearing the reason it was disabled and its failure streak) or disable by hand."""
        endpoint = await self.get_endpoint(endpoint_id, tenant)
        now = self.engine.clock.now()
        if enabled:
            endpoint = replace(endpoint, enabled=True, disabled_reason=None, failing_since=None, updated_at=now)
        else:
            endpoint = replace(endpoint, enabled=False, disabled_reason="disabled by hand", updated_at=now)
        await self.store.save_endpoint(endpoint)
        if enabled:
            self._woken()
        return endpoint

    async def rotate_secret(
        self, endpoint_id: str, tenant: str, *, secret: str | None = None, overlap: float | None = None
    ) -> Endpoint:
        """A new secret signs from now on; the previous one signs too for ``overlap`` seconds (default
        ``webhook_secret_overlap``), so receivers can switch without missing a delivery."""
        if secret is not None:
            signing.secret_key(secret)
        keep = self.settings.webhook_secret_overlap if overlap is None else overlap
        if isinstance(keep, bool) or not isinstance(keep, int | float) or not 0 <= keep <= 30 * 86400:
            raise InvalidWebhook("overlap", "must be from 0 to 2592000 seconds")
        endpoint = await self.get_endpoint(endpoint_id, tenant)
        now = self.engine.clock.now()
        endpoint = replace(endpoint, secret=secret or signing.new_secret(), previous_secret=endpoint.secret,
                           previous_until=now + keep, updated_at=now)  # fmt: skip
        await self.store.save_endpoint(endpoint)
        return endpoint

    async def delete_endpoint(self, endpoint_id: str, tenant: str) -> None:
        if not await self.store.delete_endpoint(await self._full(IdKind.ENDPOINT, endpoint_id, tenant), tenant):
            raise NotFound("webhook endpoint", endpoint_id)

    # -- deliveries -----------------------------------------------------------------------------------
    async def list_deliveries(
        self, tenant: str, endpoint_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[Delivery]:
        if endpoint_id is not None:
            endpoint_id = (await self.get_endpoint(endpoint_id, tenant)).id
        if state is not None and state not in DELIVERY_STATES:
            raise InvalidWebhook("state", f"one of {', '.join(DELIVERY_STATES)}")
        if not 1 <= limit <= 1000:
            raise InvalidWebhook("limit", "must be from 1 to 1000")
        return await self.store.list_deliveries(tenant, endpoint_id, state, limit)

    async def get_delivery(self, delivery_id: str, tenant: str | None) -> Delivery:
        """The delivery ``delivery_id`` names, whole or by a unique prefix."""
        delivery = await self.store.get_delivery(await self._full(IdKind.DELIVERY, delivery_id, tenant), tenant)
        if delivery is None:
            raise NotFound("webhook delivery", delivery_id)
        return delivery

    async def attempts(self, delivery_id: str, tenant: str | None) -> list[Attempt]:
        return await self.store.list_attempts((await self.get_delivery(delivery_id, tenant)).id)

    async def resend(self, delivery_id: str, tenant: str) -> Delivery:
        """Send again now, as a new series of attempts (with a fresh retry window), whatever its state."""
        full = await self._full(IdKind.DELIVERY, delivery_id, tenant)
        delivery = await self.store.resend(full, tenant, self.engine.clock.now())
        if delivery is None:
            raise NotFound("webhook delivery", delivery_id)
        self._woken()
        return delivery

    # -- inbound hooks --------------------------------------------------------------------------------
    async def create_inbound(
        self,
        tenant: str,
        name: str,
        schedule: str,
        *,
        secret: str | None = None,
        template: Mapping[str, Any] | None = None,
    ) -> InboundHook:
        """``POST /api/v1/hooks/{tenant}/{name}`` signed with the secret triggers a run of the tenant's
        ``schedule`` with the event's JSON; ``template`` (``{"payload": {key: pointer}, "items": pointer}``,
        :mod:`jobengine.core.mapping`) maps parts of it into the jobs. The secret defaults to a new
        ``whsec_`` one (what Standard Webhooks libraries take). Raises InvalidJob naming the field,
        AlreadyExists when the tenant has a hook of that name."""
        check_name(name)
        if secret is not None and not (isinstance(secret, str) and 16 <= len(secret) <= 200):
            raise InvalidWebhook("secret", "must be 16 to 200 characters")
        mapping = TriggerMapping.from_json(template)
        try:
            found = await self.engine.schedules.get(schedule, tenant)
        except NotFound:
            raise InvalidWebhook("schedule", f"no schedule {schedule!r} in this tenant") from None
        mapping.check(found.spec.template)
        hook = InboundHook(name, tenant, found.id, secret or signing.new_secret(), True, self.engine.clock.now(),
                           mapping)  # fmt: skip
        if not await self.store.insert_inbound(hook):
            raise AlreadyExists("inbound hook", name)
        return hook

    async def list_inbound(self, tenant: str) -> list[InboundHook]:
        return await self.store.list_inbound(tenant)

    async def delete_inbound(self, name: str, tenant: str) -> None:
        if not await self.store.delete_inbound(name, tenant):
            raise NotFound("inbound hook", name)

    async def receive_inbound(self, tenant: str | None, name: str, body: bytes, headers: Mapping[str, str]) -> Run:
        """An inbound event for hook ``name`` of ``tenant`` (None: of the tenant whose hook of that name the
        signature is from); ``headers`` by lower-case name. In order, each refusal leaving nothing written:

        1. the signature (``signing.verify_inbound_request``): InboundRefused with :data:`NOT_SIGNED` alike
           for a hook that does not exist or is disabled, an unsigned event and a wrong signature;
        2. a Standard Webhooks timestamp within ``inbound_tolerance`` of now: InboundRefused naming
           ``webhook-timestamp``;
        3. the body: JSON (empty: null), else InvalidWebhook naming ``body``;
        4. the hook's rate limit (the webhook limiter): InboundLimited;
        5. the event's id not received within ``inbound_replay_window``: InboundReplay;
        6. the run: ``engine.schedules.trigger`` with the data and the hook's template (InvalidSchedule naming the
           place in the body the template needs; the id is forgotten then, so a corrected event is no replay).
        """
        s = self.settings
        hooks: Sequence[InboundHook | None] = (
            await self.store.inbound_named(name) if tenant is None else [await self.store.get_inbound(name, tenant)]
        )
        matched: list[tuple[InboundHook, signing.InboundProof]] = []
        for hook in hooks:
            proof = signing.verify_inbound_request(hook.secret if hook else _DECOY, body, headers)
            if hook is not None and proof is not None and hook.enabled:
                matched.append((hook, proof))
        if not hooks:  # the same work as for a hook that exists, so timing does not tell them apart either
            signing.verify_inbound_request(_DECOY, body, headers)
        if not matched:
            raise InboundRefused()
        if len(matched) > 1:
            raise IllegalState(f"hooks named {name!r} in several tenants take this signature: post to "
                               f"/api/v1/hooks/<tenant>/{name}")  # fmt: skip
        hook, proof = matched[0]
        now = self.engine.clock.now()
        if proof.timestamp is not None and abs(now - proof.timestamp) > s.inbound_tolerance:
            raise InboundRefused(f"webhook-timestamp is more than {s.inbound_tolerance:g} s away from the server's "
                                 "clock (a replay, or a sender's clock that is off)", "webhook-timestamp")  # fmt: skip
        data = _event_data(body)
        wait = await self.limiter.acquire(f"inbound:{hook.tenant}:{hook.name}", s.webhook_rate_limit,
                                          s.webhook_rate_window)  # fmt: skip
        if wait > 0:
            raise InboundLimited(hook.name, wait)
        store = self.store
        if not await store.claim_inbound_event(hook.tenant, hook.name, proof.event_id, now, s.inbound_replay_window):
            raise InboundReplay(proof.event_id)
        try:
            return await self.engine.schedules.trigger(
                hook.schedule, reason=f"inbound hook {hook.name}, event {proof.event_id}", tenant=hook.tenant,
                actor=f"hook:{hook.name}", data=data, mapping=hook.template,
            )  # fmt: skip
        except BaseException:
            with contextlib.suppress(Exception):
                await store.release_inbound_event(hook.tenant, hook.name, proof.event_id)
            raise

    async def prune_inbound(self, limit: int = 10_000) -> int:
        """Forget the ids of inbound events older than ``inbound_replay_window``; returns how many went."""
        before = self.engine.clock.now() - self.settings.inbound_replay_window
        return await self.store.prune_inbound_events(before, limit)

    # -- secrets at rest ------------------------------------------------------------------------------
    async def reseal_secrets(self) -> int:
        """Seal every stored secret with the first of the keys (clear ones, and those of an older key): the
        step of a key rotation, and of the migration of secrets stored in clear. Returns how many rows
        changed. Raises ConfigError naming ``secret_keys`` when there is no key."""
        return await self.store.reseal_secrets()

    async def seal_stale_secrets(self) -> int:
        """:meth:`reseal_secrets` if any stored secret needs it; when that cannot be done (no key, or a value
        sealed with a key that is not configured), log why and leave them. The webhook dispatcher calls it as
        it starts. Returns how many rows changed."""
        stale = await self.store.count_stale_secrets()
        if not stale:
            return 0
        try:
            changed = await self.reseal_secrets()
        except ConfigError as exc:
            log.warning("%d stored webhook secret(s) are not sealed with the first secret key: %s", stale, exc)
            return 0
        log.info("sealed %d stored webhook secret(s) with the first of the secret keys", changed)
        return changed

    async def _full(self, kind: IdKind, ident: str, tenant: str | None) -> str:
        # The webhook tables are in the engine's database: its store answers prefixes for them too.
        return await resolve_id(self.engine.store, kind, ident, tenant)

    async def close(self) -> None:
        if self._limiter is not None:
            await self._limiter.close()
            self._limiter = None


def _event_data(body: bytes) -> Json:
    """An inbound event's JSON (an empty body: null). Raises InvalidWebhook naming ``body``."""
    if not body.strip():
        return None
    try:
        data = codec.loads(body)
    except (ValueError, RecursionError):
        raise InvalidWebhook("body", "must be JSON (the event)") from None
    try:
        return bounds.check_json("body", data)  # it reaches the run and its jobs: what every store can hold
    except InvalidJob as exc:
        raise InvalidWebhook("body", exc.message) from None


def _check_description(description: object) -> str:
    if not isinstance(description, str) or len(description) > 500:
        raise InvalidWebhook("description", "at most 500 characters")
    return description
