"""The delivery service: fans the event log out into the delivery outbox and sends what is due.

Run it in any number of processes (``jobengine up`` / ``serve`` start one): the fan-out moves a shared
cursor by compare-and-set, and each delivery is sent under a lease claimed in the store with its result
recorded fenced by that lease, so no two processes send the same attempt. A pass fans out new events, then
sends due deliveries ``webhook_concurrency`` at a time while any are due; then it sleeps until the soonest
retry, a wake-up or ``webhook_poll_interval``. How an attempt is sent and judged: docs/webhooks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx

from jobengine.core.ids import JobId, RunId, uuid7
from jobengine.core.models import Event
from jobengine.core.run_modes import RunMode, mode_of
from jobengine.core.run_requests import request_of
from jobengine.core.webhooks import signing
from jobengine.core.webhooks.model import FAILED, PENDING, SUCCEEDED, Attempt, Delivery, Endpoint, InvalidWebhook
from jobengine.core.webhooks.policy import GONE, SUCCESS, judge, next_attempt_at
from jobengine.middleware import DeliveryTrace
from jobengine.webhooks.config import retry_schedule
from jobengine.webhooks.manager import CURSOR, delivery_body
from jobengine.webhooks.ssrf import check_url

if TYPE_CHECKING:
    from jobengine.engine import Engine

log = logging.getLogger("jobengine.webhooks")

_FAN_BATCH = 500


class WebhookDispatcher:
    name = "webhooks"

    def __init__(self, engine: Engine, *, rand: random.Random | None = None) -> None:
        self.engine = engine
        self.webhooks = engine.webhooks
        self.settings = engine.settings
        self.schedule = retry_schedule(engine.settings)
        self.rand = rand or random.Random()
        self.sent = 0  # attempts made by this process (tests, status)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._client: httpx.AsyncClient | None = None
        self._soonest: float | None = None
        self.webhooks.on_due(self.wake)

    def wake(self) -> None:
        self._wake.set()

    def _on_events(self, event: Event) -> None:
        self._wake.set()

    async def start(self) -> None:
        """Checks the rate limiter first: ``redis`` without a reachable Redis fails here, clearly. Then seals
        stored secrets that need it (``Webhooks.seal_stale_secrets``; a failure is logged, not fatal)."""
        if self._task is not None and not self._task.done():
            return
        await self.webhooks.limiter.check()
        try:  # secrets stored in clear (before they were sealed) or under an older key are sealed now
            await self.webhooks.seal_stale_secrets()
        except Exception:
            log.exception("could not seal the stored webhook secrets; they stay as they are")
        self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False,
                                         timeout=httpx.Timeout(self.settings.webhook_timeout))  # fmt: skip
        self.engine.bus.add_listener(self._on_events)
        self.engine.health.add("webhooks", self._health)
        self._task = asyncio.create_task(self._loop(), name="jobengine-webhooks")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self.engine.bus.remove_listener(self._on_events)
        self.engine.health.remove("webhooks")
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await self.webhooks.close()

    async def _health(self) -> str:
        """For /readyz: the loop runs and its rate limiter answers (raises otherwise)."""
        if not self.running:
            raise RuntimeError("the webhook dispatcher is not running")
        await self.webhooks.limiter.check()
        return f"running; limiter {self.webhooks.limiter.name}; {self.sent} attempts made"

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:
                log.exception("webhook pass failed; trying again in %gs", self.settings.webhook_poll_interval)
            sleep = self.settings.webhook_poll_interval
            if self._soonest is not None:
                sleep = max(0.0, min(sleep, self._soonest - self.engine.clock.now()))
                self._soonest = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(sleep):
                    await self._wake.wait()

    async def run_once(self) -> int:
        """One pass: fan out, then send until nothing is due. Returns the attempts made."""
        await self.fan_out()
        made = 0
        while True:
            token = uuid7()
            now = self.engine.clock.now()
            lease = self.settings.webhook_timeout + 30.0
            batch = await self.webhooks.store.claim_deliveries(now, self.settings.webhook_concurrency, lease, token)
            if not batch:
                return made
            endpoints = {e.id: e for e in await self.webhooks.store.list_endpoints(None)}  # one read per batch
            traces = self.engine.middleware.traces()
            parents = await self._job_traces(batch) if traces is not None else {}
            results = await asyncio.gather(
                *(self._deliver(d, endpoints.get(d.endpoint_id), parents.get(d.id)) for d in batch),
                return_exceptions=True,
            )
            for r in results:
                if isinstance(r, BaseException):
                    log.error("webhook delivery failed unexpectedly", exc_info=r)
                elif r:
                    made += 1

    async def fan_out(self) -> int:
        """Turn events after the cursor into deliveries. Returns how many were written."""
        store = self.webhooks.store
        written = 0
        while True:
            cursor = await store.get_cursor(CURSOR)
            if cursor is None:
                return written  # no endpoint was ever created
            # On PostgreSQL an event id can commit after a later one: the read stops before a hole that may
            # still fill (Engine.event_log.read_settled), so the cursor never passes an event never delivered.
            read = await self.engine.event_log.read_settled(cursor, _FAN_BATCH)
            events = read.events
            if not events:
                return written
            endpoints = [e for e in await store.list_endpoints(None) if e.enabled]
            now = self.engine.clock.now()
            deliveries = []
            simulated = await self._simulated(events) if endpoints else set()
            for event in events:
                if (event.job_id or event.data.get("run_id")) in simulated:
                    continue  # a simulate run is a dry run: nothing outside the engine hears of it
                body: str | None = None
                for e in endpoints:
                    if e.tenant == event.tenant and event.at >= e.created_at and e.filter.matches(event):
                        body = body or delivery_body(event)
                        deliveries.append(Delivery(
                            id="wd_" + uuid7(), tenant=e.tenant, endpoint_id=e.id, event_id=event.id,
                            event_type=event.type, body=body, state=PENDING, next_at=now, window_start=now,
                            created_at=now, updated_at=now,
                        ))  # fmt: skip
            if await store.fan_out(CURSOR, cursor, events[-1].id, deliveries):
                written += len(deliveries)
            if read.complete:
                return written

    async def _simulated(self, events: Sequence[Event]) -> set[str]:
        """The ids of the jobs and runs of simulate runs among ``events``: a run's mode is in its request, a
        job's in its payload (the hot paths write job events in SQL, so the event itself does not say)."""
        job_ids = {e.job_id for e in events if e.job_id is not None}
        run_ids = {str(e.data["run_id"]) for e in events if e.job_id is None and isinstance(e.data.get("run_id"), str)}
        found: set[str] = set()
        if job_ids:
            jobs = await self.engine.store.get_jobs(list(job_ids))
            found.update(j.id for j in jobs if mode_of(j) is RunMode.SIMULATE)
        if run_ids:
            runs = await self.engine.store.scheduling().get_runs([RunId(i) for i in run_ids])
            found.update(r.id for r in runs if request_of(r.trigger_data).get("mode") == RunMode.SIMULATE.value)
        return found

    async def _job_traces(self, batch: Sequence[Delivery]) -> dict[str, str]:
        """The stored traceparent of the job each delivery's event is about, by delivery id (with tracing on:
        a delivery's span joins its job's trace). One read per batch; a job already deleted has none."""
        job_of: dict[str, JobId] = {}
        for d in batch:
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                job_id = json.loads(d.body)["data"].get("job_id")
                if isinstance(job_id, str):
                    job_of[d.id] = JobId(job_id)
        if not job_of:
            return {}
        try:
            jobs = await self.engine.store.get_jobs(list(set(job_of.values())))
        except Exception:  # tracing must not hold deliveries up: the batch goes out with traces of its own
            log.exception("reading the traces of a batch of webhook deliveries failed; sending without them")
            return {}
        traces = {j.id: j.trace for j in jobs}
        return {d: t for d, job_id in job_of.items() if (t := traces.get(job_id)) is not None}

    async def _deliver(self, d: Delivery, endpoint: Endpoint | None, parent: str | None = None) -> bool:
        """One attempt of a leased delivery (or giving it back when rate limited). True if attempted.
        ``parent``: the traceparent of the event's job, for the attempt's span (with tracing on)."""
        store = self.webhooks.store
        if endpoint is None:
            return False
        assert d.lease_token is not None
        sent = await self._send(endpoint, d, parent)
        if sent is None:  # rate limited: given back, due when the window has room
            return False
        status, headers, error, latency_ms = sent
        now = self.engine.clock.now()
        verdict = judge(status, headers, now)
        failures = d.series_attempts + 1
        attempt = Attempt(d.id, d.attempts + 1, d.tenant, now, status, latency_ms, error)
        if verdict.kind == SUCCESS:
            done = replace(d, state=SUCCEEDED, attempts=d.attempts + 1, series_attempts=failures, updated_at=now,
                           last_status=status, last_error=None)  # fmt: skip
        else:
            retry_at = next_attempt_at(self.schedule, verdict, failures, d.window_start, now, self.rand.random())
            done = replace(
                d, state=PENDING if retry_at is not None else FAILED, attempts=d.attempts + 1,
                series_attempts=failures, next_at=retry_at if retry_at is not None else d.next_at, updated_at=now,
                last_status=status, last_error=error,
            )  # fmt: skip
            if retry_at is not None:
                self._note_due(retry_at)
        if not await store.finish_attempt(done, attempt):
            log.warning("webhook delivery %s: lease lost; its result was not recorded", d.id)
            return True
        self.sent += 1
        ok = verdict.kind == SUCCESS
        if ok == (endpoint.failing_since is not None):  # its failure streak starts or ends: one write, else none
            await store.mark_endpoint(endpoint.id, ok, now)
        if verdict.kind == GONE:
            await self._disable(endpoint.id, "the endpoint answered 410 Gone", now)
        elif done.state == FAILED:
            # Given up after its retry window: if the endpoint has not succeeded once since this series'
            # first attempt, it failed for the whole window, and is disabled.
            fresh = await store.get_endpoint(endpoint.id)
            since = fresh.failing_since if fresh is not None else None
            series = (await store.list_attempts(d.id))[-failures:]
            if since is not None and series and since <= series[0].at:
                reason = f"failing for the whole retry window ({self.schedule.window:g}s)"
                await self._disable(endpoint.id, reason, now)
        return True

    async def _disable(self, endpoint_id: str, reason: str, now: float) -> None:
        event = await self.webhooks.store.disable_endpoint(endpoint_id, reason, now)
        if event is not None:
            log.warning("webhook endpoint %s disabled: %s", endpoint_id, reason)
            self.engine.bus.publish([event])

    def _note_due(self, at: float) -> None:
        if self._soonest is None or at < self._soonest:
            self._soonest = at

    async def _send(
        self, endpoint: Endpoint, d: Delivery, parent: str | None = None
    ) -> tuple[int | None, dict[str, str], str | None, float] | None:
        """(status or None, lower-cased headers, error, latency in ms), or None when the rate limit gave the
        delivery back. The limiter is asked once the connection is open, right before the request is written,
        so the time it counts is as close as can be to the time the receiver sees."""
        assert self._client is not None and d.lease_token is not None
        s = self.settings
        try:
            target = await check_url(endpoint.url, self.webhooks.policy, self.webhooks.resolver)
        except InvalidWebhook as exc:
            return None, {}, f"refused: {exc.message}", 0.0
        limit = endpoint.rate_limit or s.webhook_rate_limit
        window = (endpoint.rate_window or s.webhook_rate_window) + s.webhook_rate_margin
        limiter = self.webhooks.limiter
        key = f"endpoint:{endpoint.id}"

        async def on_the_wire(name: str, info: Any) -> None:
            # httpcore's trace: the connection is open and the request is about to be written. The limiter
            # counts here, so a slow connect (a cold pool, a TLS handshake) cannot bunch deliveries up at
            # the receiver beyond the limit.
            if name.endswith("send_request_headers.started"):
                wait = await limiter.acquire(key, limit, window)
                if wait > 0:
                    raise _RateLimited(wait)

        now = self.engine.clock.now()
        headers = signing.headers(d.id, int(now), d.body, endpoint.secrets_at(now))
        headers.update({"host": target.host_header, "content-type": "application/json",
                        "user-agent": "jobengine-webhooks"})  # fmt: skip
        extensions: dict[str, Any] = {"trace": on_the_wire}
        if target.scheme == "https":
            extensions["sni_hostname"] = target.host
        span = self._span(endpoint, d, parent)
        if span is not None:  # the receiver goes on with the trace (the signature covers the body only)
            headers.update(span.headers)
        sent: tuple[int | None, dict[str, str], str | None, float] | None = None
        try:
            sent = await self._post(target.connect_url, d, headers, extensions)
        finally:
            if span is not None:  # a rate-limited attempt (given back) ends without a status or an error
                status, _, error, _ = sent if sent is not None else (None, {}, None, 0.0)
                span.ended(status, error)
        return sent

    async def _post(
        self, url: str, d: Delivery, headers: dict[str, str], extensions: dict[str, Any]
    ) -> tuple[int | None, dict[str, str], str | None, float] | None:
        """Send the request of :meth:`_send`; its answer as :meth:`_send` gives it."""
        assert self._client is not None and d.lease_token is not None
        started = time.perf_counter()
        try:
            response = await self._client.post(url, content=d.body.encode(), headers=headers, extensions=extensions)
        except _RateLimited as limited:  # given back, due when the window has room: it waits, it is not dropped
            at = self.engine.clock.now() + limited.wait
            await self.webhooks.store.postpone(d.id, d.lease_token, at)
            self._note_due(at)
            return None
        except httpx.TimeoutException:
            return None, {}, f"timeout after {self.settings.webhook_timeout:g}s", _ms(started)
        except httpx.HTTPError as exc:
            return None, {}, f"{type(exc).__name__}: {exc}"[:500], _ms(started)
        latency = _ms(started)
        answer = {k.lower(): v for k, v in response.headers.items()}
        status = response.status_code
        error = None if 200 <= status < 300 else f"HTTP {status}" + (
            f" (redirect to {answer.get('location', '?')} not followed)" if 300 <= status < 400 else "")  # fmt: skip
        return status, answer, error, latency

    def _span(self, endpoint: Endpoint, d: Delivery, parent: str | None) -> DeliveryTrace | None:
        """The attempt's span, with tracing on: a child of the event's job's trace."""
        traces = self.engine.middleware.traces()
        if traces is None:
            return None
        attributes: dict[str, str | int] = {
            "jobengine.webhook.delivery_id": d.id, "jobengine.webhook.endpoint_id": endpoint.id,
            "jobengine.webhook.event_id": d.event_id, "jobengine.webhook.attempt": d.attempts + 1,
            "jobengine.tenant": d.tenant, "http.request.method": "POST",
        }  # fmt: skip
        return traces.delivery(d.event_type, parent, attributes)


class _RateLimited(Exception):
    def __init__(self, wait: float) -> None:
        super().__init__(f"rate limited for {wait:g}s")
        self.wait = wait


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
