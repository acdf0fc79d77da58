"""Errors of task packs. Each subclasses an existing jobengine error, so the HTTP problem mapping and the
CLI's exit codes apply unchanged:

    InvalidPack (InvalidJob)     a manifest field or the archive is wrong; ``field`` names it   → 422, exit 2
    ├── UnsafeArchive            a member escapes, links, is a device, or a size limit is hit  → 422
    └── DigestMismatch           the bytes do not hash to the declared / expected sha256       → 400 on upload
    PackConflict (IllegalState)  the version exists with other bytes, or its status forbids it  → 409
    ApprovalDenied               the approver is the uploader while four-eyes is on             → 403
    MissingRequirement (ConfigError)  a worker lacks a package the pack requires (never installed for it)
"""

from __future__ import annotations

from jobengine.errors import ConfigError, IllegalState, InvalidJob, JobEngineError


class InvalidPack(InvalidJob):
    pass


class UnsafeArchive(InvalidPack):
    def __init__(self, message: str) -> None:
        super().__init__("archive", message)


class DigestMismatch(InvalidPack):
    def __init__(self, expected: str, actual: str) -> None:
        super().__init__("sha256", f"the content hashes to {actual}, not the declared {expected}")
        self.expected = expected
        self.actual = actual


class PackConflict(IllegalState):
    pass


class ApprovalDenied(JobEngineError):
    pass


class MissingRequirement(ConfigError):
    pass
