"""The SignatureStore port: failure signatures per tenant (see :mod:`jobengine.core.signatures`).

Signatures are statistics kept beside the jobs: they are upserted after the failures they count were
stored, in their own transaction. A crash in between loses those occurrences, never a job's error (the
job keeps every attempt's error itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from jobengine.core.models import Event, NewEvent
from jobengine.core.signatures import Signature, SignatureFilter, SignatureHit, SignatureStatus


class SignatureStore(Protocol):
    async def record_signatures(self, hits: Sequence[SignatureHit], now: float) -> None:
        """Upsert one occurrence per hit (``core.signatures.record``), per (tenant, key)."""
        ...

    async def non_retryable_signatures(self) -> set[tuple[str, str]]:
        """Every (tenant, key) marked non-retryable (a small set; callers cache it briefly)."""
        ...

    async def get_signature(self, tenant: str, key: str) -> Signature | None: ...

    async def list_signatures(self, filter: SignatureFilter) -> list[Signature]:
        """Most recently seen first."""
        ...

    async def update_signature(
        self,
        tenant: str,
        key: str,
        status: SignatureStatus | None,
        non_retryable: bool | None,
        now: float,
        event: NewEvent,
    ) -> tuple[Signature, list[Event]]:
        """Set what is not None, record ``event``. Raises NotFound."""
        ...
