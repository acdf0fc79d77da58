"""Failure signatures: the same bug, whatever ids its message carries, gets the same fingerprint. Pure.

A fingerprint is a hash of three things (:func:`fingerprint`):

- the exception type;
- the message with its variable parts masked: UUIDs, hex (``0x1f``, long hex runs), paths, then every
  number (``order 8812 not found at /srv/a/b.py`` -> ``order <n> not found at <path>``);
- the top frames of the task's own code (``file.py:function``, innermost first), read from the
  traceback: frames in jobengine itself and in the Python standard library are left out, and library
  frames (site-packages) only count when there is no other. Line numbers are left out, so an edit
  elsewhere in the file does not split a signature.

It is cheap (a few regular expressions over at most the 8,000 characters of a stored traceback), because
it runs for every failed attempt.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from jobengine.core.ids import JobId

SIGNATURE_UPDATED: Final = "signature.updated"
TOP_FRAMES: Final = 3
MAX_MESSAGE: Final = 500
#: How many job ids a signature keeps as samples (the most recent).
SAMPLE_JOBS: Final = 10

_UUID: Final = re.compile(r"\b[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\b")
_HEX: Final = re.compile(r"\b0[xX][0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b")
_PATH: Final = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.\-~@+]+){2,}[\\/]?|(?:\.{1,2}[\\/])[\w.\-~@+/\\]+")
_NUMBER: Final = re.compile(r"[-+]?\d+(?:[.,]\d+)*")
_SPACE: Final = re.compile(r"\s+")
_FRAME: Final = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+, in (?P<name>.+)$', re.MULTILINE)
_TRACEBACK_HEAD: Final = "Traceback (most recent call last):"


class SignatureStatus(StrEnum):
    ACTIVE = "active"
    RESOLVED = "resolved"  # a new occurrence makes it active again (a regression)
    SUPPRESSED = "suppressed"  # still counted, never reopened


@dataclass(frozen=True, slots=True)
class Fingerprint:
    key: str  # 16 hex characters
    error_type: str
    message: str  # masked
    frames: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SignatureHit:
    """One failed attempt of ``job_id`` with this fingerprint (what a store upserts)."""

    tenant: str
    fingerprint: Fingerprint
    job_id: JobId
    task: str
    at: float


@dataclass(frozen=True, slots=True)
class Signature:
    tenant: str
    key: str
    error_type: str
    message: str
    frames: tuple[str, ...]
    task: str  # the task of the latest occurrence
    occurrences: int
    first_seen: float
    last_seen: float
    sample_job_ids: tuple[JobId, ...]
    status: SignatureStatus = SignatureStatus.ACTIVE
    non_retryable: bool = False  # new failures with it go straight to dead
    updated_at: float = 0.0


@dataclass(frozen=True, slots=True)
class SignatureFilter:
    tenant: str | None = None
    statuses: tuple[SignatureStatus, ...] = ()
    task: str | None = None
    limit: int = 100  # most recently seen first


def mask(message: str) -> str:
    """``message`` with ids, hex, paths and numbers replaced by placeholders, whitespace collapsed."""
    text = _UUID.sub("<uuid>", message[: MAX_MESSAGE * 4])
    text = _HEX.sub("<hex>", text)
    text = _PATH.sub("<path>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:MAX_MESSAGE]


def own_frames(traceback: str | None, excluded: Sequence[str], limit: int = TOP_FRAMES) -> tuple[str, ...]:
    """The innermost ``limit`` frames of the task's code in a formatted traceback, innermost first.

    Only the last traceback block counts (the exception that was raised; chained causes print before
    it). ``excluded``: path prefixes of code that is not the task's (jobengine, the standard library).
    """
    if not traceback:
        return ()
    block = traceback[traceback.rfind(_TRACEBACK_HEAD) :] if _TRACEBACK_HEAD in traceback else traceback
    frames = [(m.group("path"), m.group("name").strip()) for m in _FRAME.finditer(block)]
    candidates = [(p, n) for p, n in frames if not p.startswith(tuple(excluded)) and not p.startswith("<")]
    own = [(p, n) for p, n in candidates if "site-packages" not in p and "dist-packages" not in p]
    chosen = own or candidates
    return tuple(f"{_basename(p)}:{n}" for p, n in reversed(chosen[-limit:]))


def _basename(path: str) -> str:
    return re.split(r"[\\/]", path)[-1]


def fingerprint(error_type: str, message: str, traceback: str | None, excluded: Sequence[str] = ()) -> Fingerprint:
    """The signature of one failure (see the module docstring)."""
    masked = mask(message)
    frames = own_frames(traceback, excluded)
    digest = hashlib.blake2b("\x1f".join((error_type, masked, *frames)).encode(), digest_size=8).hexdigest()
    return Fingerprint(digest, error_type, masked, frames)


def record(existing: Signature | None, hit: SignatureHit) -> Signature:
    """``existing`` (None: the first occurrence) with one more occurrence. A resolved signature that
    occurs again is active again; a suppressed one stays suppressed."""
    fp = hit.fingerprint
    if existing is None:
        return Signature(
            tenant=hit.tenant, key=fp.key, error_type=fp.error_type, message=fp.message, frames=fp.frames,
            task=hit.task, occurrences=1, first_seen=hit.at, last_seen=hit.at, sample_job_ids=(hit.job_id,),
            updated_at=hit.at,
        )  # fmt: skip
    samples = (*(j for j in existing.sample_job_ids if j != hit.job_id), hit.job_id)
    status = SignatureStatus.ACTIVE if existing.status is SignatureStatus.RESOLVED else existing.status
    return Signature(
        tenant=existing.tenant, key=existing.key, error_type=existing.error_type, message=existing.message,
        frames=existing.frames, task=hit.task, occurrences=existing.occurrences + 1,
        first_seen=min(existing.first_seen, hit.at), last_seen=max(existing.last_seen, hit.at),
        sample_job_ids=samples[-SAMPLE_JOBS:], status=status, non_retryable=existing.non_retryable,
        updated_at=hit.at,
    )  # fmt: skip
