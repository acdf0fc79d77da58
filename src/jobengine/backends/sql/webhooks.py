"""The webhook store's SQL, shared by SQLite and PostgreSQL (tables: migrations ``0005_webhooks`` and
``0011_sessions_hooks``).

Each operation is a coroutine of a :class:`~jobengine.backends.sql.base.Tx` (one open transaction), run by
the store's :class:`~jobengine.backends.sql.base.Db` (SQLite: its thread in ``BEGIN IMMEDIATE``;
PostgreSQL: its async pool). A dispatcher's claim takes ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so
dispatchers in several processes never lease the same delivery (SQLite's write lock serialises them).

Secrets (an endpoint's ``secret`` and ``previous_secret``, an inbound hook's ``secret``) are sealed by a
:class:`~jobengine.secretbox.SecretBox` as rows are written and opened as they are read, so values above
this module are always clear and the tables never are (clear text written before 0011 is read as is until
:meth:`WebhookSql.reseal` seals it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

from jobengine.core import codec
from jobengine.core.mapping import TriggerMapping
from jobengine.core.models import Event
from jobengine.core.webhooks.model import (
    ENDPOINT_DISABLED,
    PENDING,
    Attempt,
    Delivery,
    Endpoint,
    EventFilter,
    InboundHook,
)
from jobengine.secretbox import SecretBox

from .base import Db, Row, Tx, conditions, marks

T = TypeVar("T")

_EP: Final = (
    "id, tenant, url, secret, event_types, queues, tasks, description, enabled, disabled_reason, rate_limit, "
    "rate_window, previous_secret, previous_until, failing_since, created_at, updated_at"
)
_DL: Final = (
    "id, tenant, endpoint_id, event_id, event_type, body, state, attempts, series_attempts, next_at, "
    "window_start, created_at, updated_at, last_status, last_error, lease_token, lease_until"
)
_AT: Final = "delivery_id, attempt, tenant, at, status, latency_ms, error"
_IN: Final = "name, tenant, schedule, secret, enabled, created_at, template"


def endpoint_row(e: Endpoint, box: SecretBox) -> tuple[Any, ...]:
    f = e.filter
    previous = box.seal(e.previous_secret) if e.previous_secret is not None else None
    return (
        e.id, e.tenant, e.url, box.seal(e.secret), codec.dumps(list(f.types)), codec.dumps(list(f.queues)),
        codec.dumps(list(f.tasks)), e.description, int(e.enabled), e.disabled_reason, e.rate_limit, e.rate_window,
        previous, e.previous_until, e.failing_since, e.created_at, e.updated_at,
    )  # fmt: skip


def endpoint_of(r: Row, box: SecretBox) -> Endpoint:
    flt = EventFilter(tuple(codec.loads(r[4])), tuple(codec.loads(r[5])), tuple(codec.loads(r[6])))
    previous = box.open(r[12]) if r[12] is not None else None
    return Endpoint(
        id=r[0], tenant=r[1], url=r[2], secret=box.open(r[3]), filter=flt, description=r[7], enabled=bool(r[8]),
        disabled_reason=r[9], rate_limit=r[10], rate_window=r[11], previous_secret=previous, previous_until=r[13],
        failing_since=r[14], created_at=r[15], updated_at=r[16],
    )  # fmt: skip


def delivery_row(d: Delivery) -> tuple[Any, ...]:
    return (
        d.id, d.tenant, d.endpoint_id, d.event_id, d.event_type, d.body, d.state, d.attempts, d.series_attempts,
        d.next_at, d.window_start, d.created_at, d.updated_at, d.last_status, d.last_error, d.lease_token,
        d.lease_until,
    )  # fmt: skip


def delivery_of(r: Row) -> Delivery:
    return Delivery(*(r[i] for i in range(17)))


def attempt_of(r: Row) -> Attempt:
    return Attempt(r[0], r[1], r[2], r[3], r[4], r[5], r[6])


def inbound_of(r: Row, box: SecretBox) -> InboundHook:
    template = TriggerMapping.from_json(codec.loads(r[6])) if r[6] is not None else TriggerMapping()
    return InboundHook(r[0], r[1], r[2], box.open(r[3]), bool(r[4]), r[5], template)


class WebhookSql:
    """The operations of :class:`jobengine.ports.webhooks.WebhookStore` as functions of a transaction."""

    def __init__(self, box: SecretBox) -> None:
        self.box = box

    # -- endpoints ------------------------------------------------------------------------------------
    async def insert_endpoint(self, tx: Tx, e: Endpoint) -> None:
        await tx.run((f"INSERT INTO {{s}}webhook_endpoints ({_EP}) VALUES ({marks(17)})"), endpoint_row(e, self.box))

    async def get_endpoint(self, tx: Tx, endpoint_id: str, tenant: str | None) -> Endpoint | None:
        clause, args = conditions(("tenant = ?", tenant), base="id = ?")
        rows = await tx.rows(f"SELECT {_EP} FROM {{s}}webhook_endpoints WHERE {clause}", [endpoint_id, *args])
        return endpoint_of(rows[0], self.box) if rows else None

    async def list_endpoints(self, tx: Tx, tenant: str | None) -> list[Endpoint]:
        clause, args = conditions(("tenant = ?", tenant))
        rows = await tx.rows(f"SELECT {_EP} FROM {{s}}webhook_endpoints WHERE {clause} ORDER BY created_at, id", args)
        return [endpoint_of(r, self.box) for r in rows]

    async def save_endpoint(self, tx: Tx, e: Endpoint) -> None:
        cols = _EP.split(", ")[1:]
        sets = ", ".join(f"{c} = ?" for c in cols)
        await tx.run((f"UPDATE {{s}}webhook_endpoints SET {sets} WHERE id = ?"), [*endpoint_row(e, self.box)[1:], e.id])

    async def delete_endpoint(self, tx: Tx, endpoint_id: str, tenant: str) -> bool:
        if not await tx.run("DELETE FROM {s}webhook_endpoints WHERE id = ? AND tenant = ?", [endpoint_id, tenant]):
            return False
        await tx.run(("DELETE FROM {s}webhook_attempts WHERE delivery_id IN "
                 "(SELECT id FROM {s}webhook_deliveries WHERE endpoint_id = ?)"), [endpoint_id])  # fmt: skip
        await tx.run("DELETE FROM {s}webhook_deliveries WHERE endpoint_id = ?", [endpoint_id])
        return True

    async def mark_endpoint(self, tx: Tx, endpoint_id: str, ok: bool, now: float) -> None:
        if ok:
            sql = "UPDATE {s}webhook_endpoints SET failing_since = NULL WHERE id = ? AND failing_since IS NOT NULL"
            await tx.run((sql), [endpoint_id])
        else:
            sql = "UPDATE {s}webhook_endpoints SET failing_since = ? WHERE id = ? AND failing_since IS NULL"
            await tx.run((sql), [now, endpoint_id])

    async def disable_endpoint(self, tx: Tx, endpoint_id: str, reason: str, now: float) -> Event | None:
        rows = await tx.rows(("UPDATE {s}webhook_endpoints SET enabled = 0, disabled_reason = ?, updated_at = ? "
                         "WHERE id = ? AND enabled = 1 RETURNING tenant, url"), [reason, now, endpoint_id])  # fmt: skip
        if not rows:
            return None
        tenant, url = rows[0][0], rows[0][1]
        data = {"endpoint_id": endpoint_id, "url": url, "reason": reason}
        ins = ("INSERT INTO {s}events (at, type, tenant, job_id, queue, task, data) "
                "VALUES (?, ?, ?, NULL, NULL, NULL, {json}) RETURNING id")  # fmt: skip
        event_id = (await tx.rows(ins, [now, ENDPOINT_DISABLED, tenant, codec.dumps(data)]))[0][0]
        return Event(int(event_id), now, ENDPOINT_DISABLED, tenant, None, None, None, data)

    # -- the outbox -----------------------------------------------------------------------------------
    async def get_cursor(self, tx: Tx, name: str) -> int | None:
        rows = await tx.rows("SELECT event_id FROM {s}webhook_cursors WHERE name = ?", [name])
        return int(rows[0][0]) if rows else None

    async def init_cursor(self, tx: Tx, name: str, event_id: int) -> None:
        sql = "INSERT INTO {s}webhook_cursors (name, event_id) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"
        await tx.run((sql), [name, event_id])

    async def fan_out(self, tx: Tx, name: str, expected: int, new: int, deliveries: Sequence[Delivery]) -> bool:
        moved = await tx.run("UPDATE {s}webhook_cursors SET event_id = ? WHERE name = ? AND event_id = ?",
                       [new, name, expected])  # fmt: skip
        if not moved:
            return False
        ins = (f"INSERT INTO {{s}}webhook_deliveries ({_DL}) VALUES ({marks(17)}) "
                "ON CONFLICT (endpoint_id, event_id) DO NOTHING")  # fmt: skip
        for d in deliveries:
            await tx.run(ins, delivery_row(d))
        return True

    async def claim_deliveries(
        self, tx: Tx, now: float, limit: int, lease_seconds: float, token: str
    ) -> list[Delivery]:
        pick = ("SELECT d.id FROM {s}webhook_deliveries d WHERE d.state = 'pending' AND d.next_at <= ? "
                "AND (d.lease_until IS NULL OR d.lease_until <= ?) AND EXISTS (SELECT 1 FROM {s}webhook_endpoints e "
                "WHERE e.id = d.endpoint_id AND e.enabled = 1) ORDER BY d.next_at, d.id LIMIT ?")  # fmt: skip
        pick += " FOR UPDATE OF d SKIP LOCKED" if tx.d.native else ""
        ids = [r[0] for r in await tx.rows(pick, [now, now, limit])]
        if not ids:
            return []
        upd = (f"UPDATE {{s}}webhook_deliveries SET lease_token = ?, lease_until = ? WHERE id IN ({marks(len(ids))}) "
                f"RETURNING {_DL}")  # fmt: skip
        out = [delivery_of(r) for r in await tx.rows(upd, [token, now + lease_seconds, *ids])]
        return sorted(out, key=lambda d: (d.next_at, d.id))

    async def finish_attempt(self, tx: Tx, d: Delivery, a: Attempt) -> bool:
        upd = ("UPDATE {s}webhook_deliveries SET state = ?, attempts = ?, series_attempts = ?, next_at = ?, "
                "updated_at = ?, last_status = ?, last_error = ?, lease_token = NULL, lease_until = NULL "
                "WHERE id = ? AND lease_token = ?")  # fmt: skip
        args = [d.state, d.attempts, d.series_attempts, d.next_at, d.updated_at, d.last_status, d.last_error, d.id,
                d.lease_token]  # fmt: skip
        if not await tx.run(upd, args):
            return False
        await tx.run((f"INSERT INTO {{s}}webhook_attempts ({_AT}) VALUES ({marks(7)})"),
               [a.delivery_id, a.attempt, a.tenant, a.at, a.status, a.latency_ms, a.error])  # fmt: skip
        return True

    async def postpone(self, tx: Tx, delivery_id: str, token: str, next_at: float) -> bool:
        sql = ("UPDATE {s}webhook_deliveries SET next_at = ?, lease_token = NULL, lease_until = NULL "
               "WHERE id = ? AND lease_token = ?")  # fmt: skip
        return await tx.run((sql), [next_at, delivery_id, token]) > 0

    async def get_delivery(self, tx: Tx, delivery_id: str, tenant: str | None) -> Delivery | None:
        clause, args = conditions(("tenant = ?", tenant), base="id = ?")
        rows = await tx.rows(f"SELECT {_DL} FROM {{s}}webhook_deliveries WHERE {clause}", [delivery_id, *args])
        return delivery_of(rows[0]) if rows else None

    async def list_deliveries(
        self, tx: Tx, tenant: str, endpoint_id: str | None, state: str | None, limit: int
    ) -> list[Delivery]:
        clause, args = conditions(("endpoint_id = ?", endpoint_id), ("state = ?", state), base="tenant = ?")
        sql = f"SELECT {_DL} FROM {{s}}webhook_deliveries WHERE {clause} ORDER BY created_at DESC, id DESC LIMIT ?"
        rows = await tx.rows(sql, [tenant, *args, limit])
        return [delivery_of(r) for r in rows]

    async def list_attempts(self, tx: Tx, delivery_id: str) -> list[Attempt]:
        sql = f"SELECT {_AT} FROM {{s}}webhook_attempts WHERE delivery_id = ? ORDER BY attempt"
        return [attempt_of(r) for r in await tx.rows((sql), [delivery_id])]

    async def resend(self, tx: Tx, delivery_id: str, tenant: str, now: float) -> Delivery | None:
        sql = (f"UPDATE {{s}}webhook_deliveries SET state = '{PENDING}', series_attempts = 0, next_at = ?, "
               f"window_start = ?, updated_at = ?, lease_token = NULL, lease_until = NULL "
               f"WHERE id = ? AND tenant = ? RETURNING {_DL}")  # fmt: skip
        rows = await tx.rows((sql), [now, now, now, delivery_id, tenant])
        return delivery_of(rows[0]) if rows else None

    # -- inbound hooks --------------------------------------------------------------------------------
    async def insert_inbound(self, tx: Tx, h: InboundHook) -> bool:
        sql = f"INSERT INTO {{s}}inbound_hooks ({_IN}) VALUES ({marks(7)}) ON CONFLICT (tenant, name) DO NOTHING"
        template = None if h.template.empty else codec.dumps(h.template.to_json())
        row = [h.name, h.tenant, h.schedule, self.box.seal(h.secret), int(h.enabled), h.created_at, template]
        return await tx.run((sql), row) > 0

    async def get_inbound(self, tx: Tx, name: str, tenant: str) -> InboundHook | None:
        sql = f"SELECT {_IN} FROM {{s}}inbound_hooks WHERE name = ? AND tenant = ?"
        rows = await tx.rows((sql), [name, tenant])
        return inbound_of(rows[0], self.box) if rows else None

    async def inbound_named(self, tx: Tx, name: str) -> list[InboundHook]:
        sql = f"SELECT {_IN} FROM {{s}}inbound_hooks WHERE name = ? ORDER BY tenant"
        return [inbound_of(r, self.box) for r in await tx.rows((sql), [name])]

    async def list_inbound(self, tx: Tx, tenant: str) -> list[InboundHook]:
        sql = f"SELECT {_IN} FROM {{s}}inbound_hooks WHERE tenant = ? ORDER BY name"
        return [inbound_of(r, self.box) for r in await tx.rows((sql), [tenant])]

    async def delete_inbound(self, tx: Tx, name: str, tenant: str) -> bool:
        if not await tx.run("DELETE FROM {s}inbound_hooks WHERE name = ? AND tenant = ?", [name, tenant]):
            return False
        await tx.run("DELETE FROM {s}inbound_receipts WHERE hook = ? AND tenant = ?", [name, tenant])
        return True

    async def claim_inbound_event(
        self, tx: Tx, tenant: str, hook: str, event_id: str, now: float, window: float
    ) -> bool:
        # A receipt older than the window is history: the id is taken again (as if pruned).
        sql = ("INSERT INTO {s}inbound_receipts AS r (tenant, hook, event_id, received_at) VALUES (?, ?, ?, ?) "
               "ON CONFLICT (tenant, hook, event_id) DO UPDATE SET received_at = excluded.received_at "
               "WHERE r.received_at <= ?")  # fmt: skip
        return await tx.run((sql), [tenant, hook, event_id, now, now - window]) > 0

    async def release_inbound_event(self, tx: Tx, tenant: str, hook: str, event_id: str) -> None:
        sql = "DELETE FROM {s}inbound_receipts WHERE tenant = ? AND hook = ? AND event_id = ?"
        await tx.run((sql), [tenant, hook, event_id])

    async def prune_inbound_events(self, tx: Tx, before: float, limit: int) -> int:
        sql = ("DELETE FROM {s}inbound_receipts WHERE (tenant, hook, event_id) IN (SELECT tenant, hook, event_id "
               "FROM {s}inbound_receipts WHERE received_at <= ? ORDER BY received_at LIMIT ?)")  # fmt: skip
        return await tx.run((sql), [before, limit])

    # -- secrets at rest ------------------------------------------------------------------------------
    async def reseal(self, tx: Tx) -> int:
        """Seal with the first key every secret that is clear or sealed with another key. Each row is
        rewritten only if it still holds what was read (a rotation made meanwhile is kept). Returns how many
        rows changed."""
        box = self.box
        changed = 0
        for eid, secret, previous in await tx.rows("SELECT id, secret, previous_secret FROM {s}webhook_endpoints"):
            if box.stale(secret) or (previous is not None and box.stale(previous)):
                new_previous = box.seal(box.open(previous)) if previous is not None else None
                changed += await tx.run(
                    ("UPDATE {s}webhook_endpoints SET secret = ?, previous_secret = ? "
                      "WHERE id = ? AND secret = ? AND previous_secret {same} ?"),
                    [box.seal(box.open(secret)), new_previous, eid, secret, previous],
                )  # fmt: skip
        for tenant, name, secret in await tx.rows("SELECT tenant, name, secret FROM {s}inbound_hooks"):
            if box.stale(secret):
                changed += await tx.run(("UPDATE {s}inbound_hooks SET secret = ? WHERE tenant = ? AND name = ? "
                                    "AND secret = ?"), [box.seal(box.open(secret)), tenant, name, secret])  # fmt: skip
        return changed

    async def count_stale(self, tx: Tx) -> int:
        """How many stored secrets :meth:`reseal` would rewrite (or, without a key, are in clear)."""
        values = [v for r in await tx.rows("SELECT secret, previous_secret FROM {s}webhook_endpoints") for v in r]
        values += [r[0] for r in await tx.rows("SELECT secret FROM {s}inbound_hooks")]
        return sum(1 for v in values if v is not None and self.box.stale(v))


class SqlWebhookStore:
    """:class:`jobengine.ports.webhooks.WebhookStore` over :class:`WebhookSql` and a backend's runner."""

    def __init__(self, db: Db, box: SecretBox) -> None:
        self._sql = WebhookSql(box)
        self._db = db

    async def _w(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        return await self._db.write(fn, retry=False)

    async def _hot(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        """A dispatcher's own bookkeeping (claims, attempts, postpones): a power loss can only roll back
        attempts, so deliveries are sent again (at least once)."""
        return await self._db.write(fn, retry=False, hot=True)

    async def _r(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        return await self._db.read(fn)

    async def insert_endpoint(self, endpoint: Endpoint) -> None:
        await self._w(lambda tx: self._sql.insert_endpoint(tx, endpoint))

    async def get_endpoint(self, endpoint_id: str, tenant: str | None = None) -> Endpoint | None:
        return await self._r(lambda tx: self._sql.get_endpoint(tx, endpoint_id, tenant))

    async def list_endpoints(self, tenant: str | None = None) -> list[Endpoint]:
        return await self._r(lambda tx: self._sql.list_endpoints(tx, tenant))

    async def save_endpoint(self, endpoint: Endpoint) -> None:
        await self._w(lambda tx: self._sql.save_endpoint(tx, endpoint))

    async def delete_endpoint(self, endpoint_id: str, tenant: str) -> bool:
        return await self._w(lambda tx: self._sql.delete_endpoint(tx, endpoint_id, tenant))

    async def mark_endpoint(self, endpoint_id: str, ok: bool, now: float) -> None:
        await self._hot(lambda tx: self._sql.mark_endpoint(tx, endpoint_id, ok, now))

    async def disable_endpoint(self, endpoint_id: str, reason: str, now: float) -> Event | None:
        return await self._w(lambda tx: self._sql.disable_endpoint(tx, endpoint_id, reason, now))

    async def get_cursor(self, name: str) -> int | None:
        return await self._r(lambda tx: self._sql.get_cursor(tx, name))

    async def init_cursor(self, name: str, event_id: int) -> None:
        await self._w(lambda tx: self._sql.init_cursor(tx, name, event_id))

    async def fan_out(self, name: str, expected: int, new: int, deliveries: Sequence[Delivery]) -> bool:
        return await self._w(lambda tx: self._sql.fan_out(tx, name, expected, new, deliveries))

    async def claim_deliveries(self, now: float, limit: int, lease_seconds: float, token: str) -> list[Delivery]:
        return await self._hot(lambda tx: self._sql.claim_deliveries(tx, now, limit, lease_seconds, token))

    async def finish_attempt(self, delivery: Delivery, attempt: Attempt) -> bool:
        return await self._hot(lambda tx: self._sql.finish_attempt(tx, delivery, attempt))

    async def postpone(self, delivery_id: str, token: str, next_at: float) -> bool:
        return await self._hot(lambda tx: self._sql.postpone(tx, delivery_id, token, next_at))

    async def get_delivery(self, delivery_id: str, tenant: str | None = None) -> Delivery | None:
        return await self._r(lambda tx: self._sql.get_delivery(tx, delivery_id, tenant))

    async def list_deliveries(
        self, tenant: str, endpoint_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[Delivery]:
        return await self._r(lambda tx: self._sql.list_deliveries(tx, tenant, endpoint_id, state, limit))

    async def list_attempts(self, delivery_id: str) -> list[Attempt]:
        return await self._r(lambda tx: self._sql.list_attempts(tx, delivery_id))

    async def resend(self, delivery_id: str, tenant: str, now: float) -> Delivery | None:
        return await self._w(lambda tx: self._sql.resend(tx, delivery_id, tenant, now))

    async def insert_inbound(self, hook: InboundHook) -> bool:
        return await self._w(lambda tx: self._sql.insert_inbound(tx, hook))

    async def get_inbound(self, name: str, tenant: str) -> InboundHook | None:
        return await self._r(lambda tx: self._sql.get_inbound(tx, name, tenant))

    async def inbound_named(self, name: str) -> list[InboundHook]:
        return await self._r(lambda tx: self._sql.inbound_named(tx, name))

    async def list_inbound(self, tenant: str) -> list[InboundHook]:
        return await self._r(lambda tx: self._sql.list_inbound(tx, tenant))

    async def delete_inbound(self, name: str, tenant: str) -> bool:
        return await self._w(lambda tx: self._sql.delete_inbound(tx, name, tenant))

    async def claim_inbound_event(self, tenant: str, hook: str, event_id: str, now: float, window: float) -> bool:
        return await self._w(lambda tx: self._sql.claim_inbound_event(tx, tenant, hook, event_id, now, window))

    async def release_inbound_event(self, tenant: str, hook: str, event_id: str) -> None:
        await self._w(lambda tx: self._sql.release_inbound_event(tx, tenant, hook, event_id))

    async def prune_inbound_events(self, before: float, limit: int) -> int:
        return await self._w(lambda tx: self._sql.prune_inbound_events(tx, before, limit))

    async def reseal_secrets(self) -> int:
        return await self._w(self._sql.reseal)

    async def count_stale_secrets(self) -> int:
        return await self._r(self._sql.count_stale)

    async def close(self) -> None:
        """Nothing to release: the store's own connections run every operation."""
