"""An HTTP client for the jobengine API (httpx), with the retry policy every SDK call shares.

Failure policy: a call that could not reach the server (connection refused or reset, a timeout) or got
429 / 502 / 503 / 504 is retried with exponential backoff and full jitter, honouring ``Retry-After``, until
``max_elapsed`` seconds have passed; then the last error is raised. Any other error status raises
:class:`ApiError` at once, carrying the problem document (RFC 9457). Usage::

    async with ApiClient("http://127.0.0.1:8080", key="je_...") as api:
        job = await api.enqueue("greet", {"name": "Ada"}, priority=5)
        same = await api.get(f"/api/v1/jobs/{job['id']}")
        graph = await api.graphs.submit([GraphNode("a", "fetch"), GraphNode("b", "parse", after=["a"])])

Graphs of jobs are :attr:`ApiClient.graphs` (:mod:`jobengine.sdk.graphs`).
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from jobengine.errors import JobEngineError
from jobengine.sdk.graphs import Graphs

RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: The states of a job that has ended (``GET /api/v1/jobs/{id}?wait=`` answers at once in them).
TERMINAL_STATES = frozenset({"succeeded", "dead", "cancelled", "stale"})
#: The server's longest ``?wait=``; a longer wait is a loop of them.
MAX_WAIT = 60.0


def problem_detail(status: int, problem: Mapping[str, Any]) -> tuple[str | None, str]:
    """The field a problem+json names (None if it names none) and its detail without that field: the
    server's detail starts with the field for a malformed request and not for a value the engine refused,
    so a message that names the field once takes it from here."""
    field = problem.get("field")
    detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
    if not isinstance(field, str) or not field:
        return None, detail
    return field, detail.removeprefix(f"{field}: ")


class ApiError(JobEngineError):
    """The server refused a call. ``problem`` is its problem+json body (or a stand-in); the message is
    ``HTTP <status>: [<field>: ]<detail>``, naming the field at fault once."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        field, detail = problem_detail(status, problem)
        super().__init__(f"HTTP {status}: {field}: {detail}" if field else f"HTTP {status}: {detail}")
        self.status = status
        self.problem = dict(problem)


def retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asked to wait (``Retry-After`` as seconds or an HTTP date), if it did."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class ApiClient:
    def __init__(
        self,
        base_url: str,
        key: str | None = None,
        *,
        timeout: float = 30.0,
        max_elapsed: float = 60.0,
        backoff_base: float = 0.1,
        backoff_cap: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout, transport=transport)
        self.max_elapsed = max_elapsed
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.retries = 0  # calls retried so far (for tests and logs)
        #: Graphs of jobs: submit, get, list, cancel, retry, wait.
        self.graphs = Graphs(self)

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return await self.request("GET", path, params=params)

    async def post(
        self, path: str, body: Any = None, *, idempotency_key: str | None = None, timeout: float | None = None
    ) -> Any:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return await self.request("POST", path, json=body, headers=headers, timeout=timeout)

    async def enqueue(
        self,
        task: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | str | None = None,
        delay: float | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        depends_on: Sequence[str] = (),
        timeout: float | None = None,
    ) -> Any:
        """POST /api/v1/jobs; returns the job. The options are the API's job fields (``run_at``: an aware
        datetime or ISO 8601 text); one left out gets the task's default on the server, and a misspelt one
        is a TypeError naming it. ``idempotency_key`` is the request's ``Idempotency-Key`` header, always sent
        (a new random one unless given), so a call retried after a lost answer cannot enqueue twice."""
        key = idempotency_key or uuid.uuid4().hex
        fields = {
            "queue": queue, "priority": priority, "delay": delay, "max_attempts": max_attempts, "timeout": timeout,
            "run_at": run_at.isoformat() if isinstance(run_at, datetime) else run_at,
        }  # fmt: skip
        body = {"task": task, "payload": payload, **{k: v for k, v in fields.items() if v is not None}}
        if depends_on:
            body["depends_on"] = list(depends_on)
        return await self.post("/api/v1/jobs", body, idempotency_key=key)

    async def wait(self, job_id: str, timeout: float = 30.0) -> Any:
        """The job once it has ended (its ``state`` one of :data:`TERMINAL_STATES`), by long polls of
        ``GET /api/v1/jobs/{id}?wait=`` (each at most 60 s, so a proxy's idle timeout never cuts one);
        TimeoutError after ``timeout`` seconds, ApiError (404) for an unknown job. Usage::

            job = await api.enqueue("greet", {"name": "Ada"})
            done = await api.wait(job["id"], timeout=120)
            print(done["state"], done["result"])
        """
        if timeout < 0:
            raise ValueError("timeout: must not be negative")
        deadline = time.monotonic() + timeout
        path = f"/api/v1/jobs/{quote(job_id, safe='')}"
        while True:
            remaining = deadline - time.monotonic()
            wait = round(min(MAX_WAIT, max(0.0, remaining)), 3)
            # The HTTP timeout outlasts the server's wait, which answers by itself when it runs out.
            job = await self.request("GET", path, params={"wait": wait}, timeout=wait + 30.0)
            if job["state"] in TERMINAL_STATES:
                return job
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {job['state']} after {timeout:g}s")

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        max_elapsed: float | None = None,
    ) -> Any:
        """Send a request, retrying as the module docstring says; returns the decoded JSON body."""
        deadline = time.monotonic() + (self.max_elapsed if max_elapsed is None else max_elapsed)
        attempt = 0
        while True:
            attempt += 1
            wait: float | None = None
            try:
                response = await self._http.request(
                    method, path, json=json, params=params, headers=headers,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )  # fmt: skip
            except httpx.TransportError:
                if time.monotonic() >= deadline:
                    raise
            else:
                if response.status_code < 400:
                    return response.json() if response.content else None
                if response.status_code not in RETRY_STATUSES or time.monotonic() >= deadline:
                    raise ApiError(response.status_code, _problem(response))
                wait = retry_after(response)
            self.retries += 1
            backoff = random.uniform(0, min(self.backoff_cap, self.backoff_base * 2 ** (attempt - 1)))
            delay = max(wait, backoff) if wait is not None else backoff
            await asyncio.sleep(max(0.0, min(delay, deadline - time.monotonic())))


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {"status": response.status_code, "detail": response.text[:500]}
    return body if isinstance(body, dict) else {"status": response.status_code, "detail": str(body)[:500]}
