"""The webhook API over the real FastAPI app (httpx ASGI transport): endpoints CRUD, tenancy, scopes, SSRF
refusals at registration and at send time (a loopback canary receives no connection), deliveries and
attempts, resend, secret rotation (both signatures verify), and inbound hooks (401 / 429 / 202; more in
test_inbound.py)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from standardwebhooks.webhooks import Webhook

from jobengine.core.webhooks.model import Endpoint
from jobengine.engine import Engine
from jobengine.http import create_app
from jobengine.webhooks.dispatcher import WebhookDispatcher
from tests.integration.webhooks.conftest import dispatching, webhook_settings
from tests.support.webhook_receiver import Answer, Receiver

W = "/api/v1/webhooks"


class Api:
    def __init__(self, engine: Engine, keys: dict[str, str]) -> None:
        self.engine = engine
        self.app = create_app(engine)
        self.keys = keys

    def client(self, key: str) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://api", headers=headers)


@asynccontextmanager
async def api_on(tmp_path: Path, **overrides: object) -> AsyncIterator[Api]:
    async with Engine.from_settings(webhook_settings(str(tmp_path / "api.db"), **overrides)) as engine:
        keys = {t: (await engine.keys.create(t, ["admin"], t))[1] for t in ("acme", "globex")}
        names = {"internal.example.com": ["10.1.2.3"], "public.example.com": ["93.184.216.34"],
                 "mixed.example.com": ["93.184.216.34", "127.0.0.1"]}  # fmt: skip

        async def resolver(host: str, port: int) -> list[str]:
            if host == "localhost":
                return ["127.0.0.1", "::1"]
            if host not in names:
                raise OSError(f"unknown host {host}")
            return names[host]

        engine.webhooks.resolver = resolver
        yield Api(engine, keys)


async def test_endpoint_crud_tenancy_and_scopes(tmp_path: Path, receiver: Callable[[Answer], Receiver]) -> None:
    rx = receiver(lambda n, r: (200, {}))
    async with api_on(tmp_path) as api, api.client(api.keys["acme"]) as acme, api.client(api.keys["globex"]) as gx:
        r = await acme.post(f"{W}/endpoints", json={"url": rx.url, "filter": {"types": ["job.*"], "queues": ["q"]},
                                                     "rate_limit": 5, "rate_window": 1})  # fmt: skip
        assert r.status_code == 201, r.text
        created = r.json()
        assert created["secret"].startswith("whsec_") and created["filter"]["types"] == ["job.*"]
        eid = created["id"]
        shown = (await acme.get(f"{W}/endpoints/{eid}")).json()
        assert "secret" not in shown and shown["rate_limit"] == 5
        assert [e["id"] for e in (await acme.get(f"{W}/endpoints")).json()["items"]] == [eid]
        # Another tenant: 404 on every path, and its list is empty.
        assert (await gx.get(f"{W}/endpoints")).json()["items"] == []
        for method, path in [("GET", f"{W}/endpoints/{eid}"), ("PATCH", f"{W}/endpoints/{eid}"),
                             ("DELETE", f"{W}/endpoints/{eid}"), ("POST", f"{W}/endpoints/{eid}/disable"),
                             ("POST", f"{W}/endpoints/{eid}/rotate-secret")]:  # fmt: skip
            answer = await gx.request(method, path, json={} if method != "GET" and method != "DELETE" else None)
            assert answer.status_code == 404, (method, path, answer.text)
        # Scopes: a read-only key may list, not create.
        reader = await api.engine.keys.create("acme", ["webhooks:read"], "reader")
        async with api.client(reader[1]) as ro:
            assert (await ro.get(f"{W}/endpoints")).status_code == 200
            denied = await ro.post(f"{W}/endpoints", json={"url": rx.url})
            assert denied.status_code == 403 and denied.json()["required_scope"] == "webhooks:write"
        # Bad input: 422 naming the field, nothing written.
        for body, field in [
            ({"url": "ftp://x.example.com/"}, "url"),
            ({"url": rx.url, "secret": "nope"}, "secret"),
            ({"url": rx.url, "filter": {"types": ["a b"]}}, "filter.types"),
            ({"url": rx.url, "filter": {"types": ["job.exploded"]}}, "filter.types"),
            ({"url": rx.url, "rate_limit": 0}, "rate_limit"),
            ({"url": rx.url, "extra": 1}, "extra"),
        ]:
            bad = await acme.post(f"{W}/endpoints", json=body)
            assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json", bad.text
            assert bad.json()["field"] == field or field in str(bad.json()["errors"]), bad.text
        assert len((await acme.get(f"{W}/endpoints")).json()["items"]) == 1
        patched = await acme.patch(f"{W}/endpoints/{eid}", json={"description": "ops", "filter": {"types": []}})
        assert patched.json()["description"] == "ops" and patched.json()["filter"]["types"] == []
        assert (await acme.post(f"{W}/endpoints/{eid}/disable")).json()["enabled"] is False
        enabled = (await acme.post(f"{W}/endpoints/{eid}/enable")).json()
        assert enabled["enabled"] is True and enabled["disabled_reason"] is None
        assert (await acme.delete(f"{W}/endpoints/{eid}")).status_code == 204
        assert (await acme.get(f"{W}/endpoints/{eid}")).status_code == 404


async def test_ssrf_refusals_and_a_canary_that_gets_no_connection(
    tmp_path: Path, receiver: Callable[[Answer], Receiver]
) -> None:
    canary = receiver(lambda n, r: (200, {}))
    port = canary.port
    refused = [
        f"http://127.0.0.1:{port}/x", f"http://localhost:{port}/x", f"http://[::1]:{port}/x",
        "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/x", f"http://2130706433:{port}/x",
        f"http://0x7f000001:{port}/x", f"http://0177.0.0.1:{port}/x", f"http://127.1:{port}/x",
        f"http://[::ffff:127.0.0.1]:{port}/x", "http://internal.example.com/x", "http://mixed.example.com/x",
        "http://[fe80::1]/x", "http://0.0.0.0/x", "http://224.0.0.1/x", "http://100.64.0.1/x",
    ]  # fmt: skip
    async with api_on(tmp_path, webhook_allow_hosts=()) as api, api.client(api.keys["acme"]) as acme:
        for url in refused:
            r = await acme.post(f"{W}/endpoints", json={"url": url})
            assert r.status_code == 422, (url, r.text)
            assert r.json()["field"] == "url" and "refused" in r.json()["detail"], r.text
            assert "webhook_allow_hosts" in r.json()["detail"]  # the way to allow a receiver of one's own
        assert (await acme.get(f"{W}/endpoints")).json()["items"] == []
        ok = await acme.post(f"{W}/endpoints", json={"url": "https://public.example.com/hook"})
        assert ok.status_code == 201, ok.text
        assert (await acme.delete(f"{W}/endpoints/{ok.json()['id']}")).status_code == 204  # (never sent to)

        # At send time too: a name that resolved to a public address at registration now resolves to the
        # canary (DNS rebinding), and an endpoint stored around the API points at it directly.
        engine = api.engine
        names: dict[str, list[str]] = {"rebind.example.com": ["93.184.216.34"]}

        async def resolver(host: str, port: int) -> list[str]:
            return names[host]

        engine.webhooks.resolver = resolver
        rebind = await engine.webhooks.create_endpoint("acme", f"http://rebind.example.com:{port}/x")
        names["rebind.example.com"] = ["127.0.0.1"]
        await engine.webhook_store().insert_endpoint(
            Endpoint("we_direct", "acme", f"http://127.0.0.1:{port}/x", rebind.secret, created_at=0.0)
        )
        await engine.enqueue("t", None, tenant="acme")

        async def attempted() -> bool:
            pending = await engine.webhooks.list_deliveries("acme", state="pending")
            return len(pending) == 2 and all(d.attempts for d in pending)

        async with dispatching(engine):
            async with asyncio.timeout(10):
                while not await attempted():  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
        for endpoint_id in (rebind.id, "we_direct"):
            [d] = await engine.webhooks.list_deliveries("acme", endpoint_id)
            [attempt] = await engine.webhooks.attempts(d.id, "acme")
            assert attempt.status is None and (attempt.error or "").startswith("refused"), attempt
    assert canary.connections == 0 and canary.requests == []


async def test_deliveries_attempts_resend_and_rotation_over_the_api(
    tmp_path: Path, receiver: Callable[[Answer], Receiver]
) -> None:
    rx = receiver(lambda n, r: (200, {}))
    async with api_on(tmp_path) as api, api.client(api.keys["acme"]) as acme, api.client(api.keys["globex"]) as gx:
        created = (
            await acme.post(f"{W}/endpoints", json={"url": rx.url, "filter": {"types": ["job.enqueued"]}})
        ).json()
        old_secret = created["secret"]
        rotated = (await acme.post(f"{W}/endpoints/{created['id']}/rotate-secret", json={"overlap": 60})).json()
        assert rotated["secret"] != old_secret and rotated["previous_secret_until"] is not None
        dispatcher = WebhookDispatcher(api.engine)
        await dispatcher.start()
        try:
            await acme.post("/api/v1/jobs", json={"task": "t"})
            async with asyncio.timeout(10):
                while not rx.requests:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            for secret in (old_secret, rotated["secret"]):  # both signatures verify during the overlap
                Webhook(secret).verify(rx.requests[0].body, rx.requests[0].headers)
            assert len(rx.requests[0].headers["webhook-signature"].split(" ")) == 2
            [d] = (await acme.get(f"{W}/deliveries", params={"endpoint_id": created["id"]})).json()["items"]
            async with asyncio.timeout(5):
                while (await acme.get(f"{W}/deliveries/{d['id']}")).json()["state"] != "succeeded":  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            detail = (await acme.get(f"{W}/deliveries/{d['id']}")).json()
            assert detail["attempts_made"][0]["status"] == 200 and detail["attempts_made"][0]["latency_ms"] > 0
            assert (await gx.get(f"{W}/deliveries/{d['id']}")).status_code == 404
            assert (await gx.post(f"{W}/deliveries/{d['id']}/resend")).status_code == 404
            assert (await acme.post(f"{W}/deliveries/{d['id']}/resend")).status_code == 202
            async with asyncio.timeout(10):
                while len(rx.requests) < 2:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            ready = (await acme.get("/readyz")).json()["checks"]["webhooks"]
            assert ready["ready"] is True and "limiter local" in ready["detail"]
            bad = await acme.get(f"{W}/deliveries", params={"state": "weird"})
            assert bad.status_code == 422 and bad.json()["field"] == "state"
        finally:
            await dispatcher.stop()


async def test_inbound_hook_signature_rate_limit_and_trigger(tmp_path: Path) -> None:
    async with (
        api_on(tmp_path, webhook_rate_limit=2, webhook_rate_window=30.0) as api,
        api.client(api.keys["acme"]) as acme,
        api.client("") as anonymous,
    ):
        schedule = {"name": "digest", "cron": "0 * * * *", "template": {"task": "mail.digest"}}
        assert (await acme.post("/api/v1/schedules", json=schedule)).status_code == 201
        missing = await acme.post(f"{W}/inbound", json={"name": "deploys", "schedule": "nope"})
        assert missing.status_code == 422 and missing.json()["field"] == "schedule"
        r = await acme.post(f"{W}/inbound", json={"name": "deploys", "schedule": "digest"})
        assert r.status_code == 201, r.text
        secret = r.json()["secret"]
        assert (await acme.post(f"{W}/inbound", json={"name": "deploys", "schedule": "digest"})).status_code == 409
        body = b'{"ref": "main"}'

        def sign(b: bytes) -> str:
            return "sha256=" + hmac.new(secret.encode(), b, hashlib.sha256).hexdigest()

        good = sign(body)
        unsigned = await anonymous.post("/api/v1/hooks/deploys", content=body)
        assert unsigned.status_code == 401 and unsigned.headers["content-type"] == "application/problem+json"
        wrong = await anonymous.post("/api/v1/hooks/deploys", content=body + b" ", headers={"X-Signature": good})
        assert wrong.status_code == 401
        assert (
            await anonymous.post("/api/v1/hooks/nope", content=body, headers={"X-Signature": good})
        ).status_code == 401  # as unsigned: an unknown hook is not told apart
        bodies = [b'{"ref": "main", "n": %d}' % i for i in range(3)]  # the same body twice would be a replay
        answers = [await anonymous.post("/api/v1/hooks/deploys", content=b, headers={"X-Signature": sign(b)})
                   for b in bodies]  # fmt: skip
        assert [a.status_code for a in answers] == [202, 202, 429]
        assert answers[0].json()["trigger"] == "manual" and int(answers[2].headers["retry-after"]) >= 1
        listed = (await acme.get("/api/v1/runs")).json()["items"]
        assert len(listed) == 2 and all(r["actor"] == "hook:deploys" for r in listed), listed
        assert [h["name"] for h in (await acme.get(f"{W}/inbound")).json()["items"]] == ["deploys"]
        assert (await acme.delete(f"{W}/inbound/deploys")).status_code == 204
