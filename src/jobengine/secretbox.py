"""Secrets encrypted at rest (webhook signing secrets, inbound hook secrets) with keys that rotate.

A stored secret reads ``sealed:v1:<key id>:<Fernet token>``: Fernet (AES-128-CBC with HMAC-SHA256,
``cryptography``) under one of the configured keys, named by its id (the first 8 hex digits of the key's
sha256), so the box knows which key opens a value without trying each, and an error can say which key is
missing. The first key seals; every key opens. Rotation: put a new key first (keeping the old one after
it), re-seal what is stored (``jobengine secrets rotate``), then drop the old key.

A stored value without the ``sealed:`` prefix is a secret written in clear before encryption existed: it
opens as itself, and :meth:`SecretBox.stale` reports it, so it is sealed on the next re-seal.

Failure policy: a malformed key raises ConfigError naming ``secret_keys`` (when the box is built); sealing
without a key, or opening a value sealed by a key that is not configured, raises ConfigError naming the
setting; a token that no configured key authenticates (tampered, or a key reused under another id) too.
Usage::

    box = SecretBox([new_key(), old_key])
    stored = box.seal("whsec_...")       # 'sealed:v1:1a2b3c4d:gAAAA...'
    box.open(stored)                     # 'whsec_...'
    box.stale(stored)                    # False; True for clear text or another key's value
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from jobengine.errors import ConfigError

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

PREFIX: Final = "sealed:v1:"
SETTING: Final = "secret_keys"


def new_key() -> str:
    """A fresh key: 32 random bytes, URL-safe base64 (what Fernet takes)."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def key_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:8]


def _fernet(key: str, position: int) -> Fernet:
    from cryptography.fernet import Fernet

    try:
        raw = base64.urlsafe_b64decode(key.encode())
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ConfigError(f"{SETTING}: key {position + 1} is not 32 bytes of URL-safe base64 "
                          "(make one with `jobengine secrets generate-key`)")  # fmt: skip
    return Fernet(key.encode())


class SecretBox:
    def __init__(self, keys: Sequence[str] | Callable[[], Sequence[str]], *, source: str = SETTING) -> None:
        """``keys``: the first seals, all open; or a function that reads them, called on first use (so a key
        file is made only when a secret is stored). ``source`` names where they come from, for errors."""
        self.source = source
        self._load = keys if callable(keys) else None
        self._ids: list[str] = []
        self._keys: dict[str, Fernet] = {}
        if not callable(keys):
            self._use(keys)

    def _use(self, keys: Sequence[str]) -> None:
        self._ids = [key_id(k) for k in keys]
        self._keys = {kid: _fernet(k, i) for i, (kid, k) in enumerate(zip(self._ids, keys, strict=True))}

    def _ready(self) -> None:
        if self._load is not None:
            self._use(self._load())
            self._load = None

    @property
    def primary(self) -> str | None:
        """The id of the key that seals (None: no key)."""
        self._ready()
        return self._ids[0] if self._ids else None

    def seal(self, secret: str) -> str:
        self._ready()
        if not self._ids:
            raise ConfigError(f"{SETTING}: no key is set to encrypt secrets at rest (required with this database; "
                              "make one with `jobengine secrets generate-key`)")  # fmt: skip
        token = self._keys[self._ids[0]].encrypt(secret.encode()).decode()
        return f"{PREFIX}{self._ids[0]}:{token}"

    def open(self, stored: str) -> str:
        if not stored.startswith(PREFIX):
            return stored  # written in clear before secrets were sealed
        kid, _, token = stored[len(PREFIX) :].partition(":")
        self._ready()
        fernet = self._keys.get(kid)
        if fernet is None:
            raise ConfigError(f"{SETTING}: a stored secret is sealed with key {kid}, which is not among the keys "
                              f"of {self.source} (was it removed before `jobengine secrets rotate`?)")  # fmt: skip
        from cryptography.fernet import InvalidToken

        try:
            return fernet.decrypt(token.encode()).decode()
        except (InvalidToken, UnicodeDecodeError):
            raise ConfigError(f"{SETTING}: key {kid} does not authenticate a stored secret (tampered with?)") from None

    def stale(self, stored: str) -> bool:
        """True when ``stored`` is not sealed with the first key: clear text, or sealed with another key."""
        return not stored.startswith(f"{PREFIX}{self.primary}:" if self.primary else PREFIX)


def read_key_file(path: Path) -> list[str]:
    """The keys of a key file (one per line, first seals), creating it with a new key when it does not exist.

    Created owner-only and atomically (written under a temporary name, then linked into place), so two
    processes starting at once end up with the same key. Raises ConfigError when it cannot be read or made."""
    try:
        if not path.exists():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.fchmod(fd, 0o600)
                os.write(fd, (new_key() + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process made it first: use theirs
            finally:
                tmp.unlink(missing_ok=True)
        keys = [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    except OSError as exc:
        raise ConfigError(f"{SETTING}: cannot read or create the key file {path}: {exc.strerror or exc}") from None
    if not keys:
        raise ConfigError(f"{SETTING}: the key file {path} holds no key")
    return keys
