"""Webhook values as JSON (the API's answers and the CLI's ``--json``). Secrets appear only in the answers
that create or rotate them (``with_secret``)."""

from __future__ import annotations

from typing import Any

from jobengine.core.clock import iso
from jobengine.core.webhooks.model import Attempt, Delivery, Endpoint, InboundHook


def _t(value: float | None) -> str | None:
    return iso(value) if value is not None else None


def endpoint_to_json(e: Endpoint, *, with_secret: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": e.id,
        "tenant": e.tenant,
        "url": e.url,
        "description": e.description,
        "filter": e.filter.to_json(),
        "enabled": e.enabled,
        "disabled_reason": e.disabled_reason,
        "rate_limit": e.rate_limit,
        "rate_window": e.rate_window,
        "failing_since": _t(e.failing_since),
        "previous_secret_until": _t(e.previous_until),
        "created_at": _t(e.created_at),
        "updated_at": _t(e.updated_at),
    }
    if with_secret:
        out["secret"] = e.secret
    return out


def delivery_to_json(d: Delivery) -> dict[str, Any]:
    return {
        "id": d.id,
        "endpoint_id": d.endpoint_id,
        "event_id": d.event_id,
        "event_type": d.event_type,
        "state": d.state,
        "attempts": d.attempts,
        "next_at": _t(d.next_at) if d.state == "pending" else None,
        "last_status": d.last_status,
        "last_error": d.last_error,
        "created_at": _t(d.created_at),
        "updated_at": _t(d.updated_at),
    }


def attempt_to_json(a: Attempt) -> dict[str, Any]:
    return {"attempt": a.attempt, "at": _t(a.at), "status": a.status, "latency_ms": a.latency_ms, "error": a.error}


def inbound_to_json(h: InboundHook, *, with_secret: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": h.name, "schedule_id": h.schedule, "enabled": h.enabled,
                           "url_path": f"/api/v1/hooks/{h.tenant}/{h.name}", "template": h.template.to_json(),
                           "created_at": _t(h.created_at)}  # fmt: skip
    if with_secret:
        out["secret"] = h.secret
    return out
