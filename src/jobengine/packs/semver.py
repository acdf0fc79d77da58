"""Semantic versions (semver.org 2.0.0): parsing and precedence, so versions list in the order people expect.

``1.0.0-alpha < 1.0.0-alpha.1 < 1.0.0-beta < 1.0.0``; build metadata (``+sha``) is kept but ignored by the
order, as the spec says. :func:`parse` raises ValueError with the reason; nothing here does I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
MAX_LENGTH = 64


@total_ordering
@dataclass(frozen=True, slots=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: str = ""

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        # A release sorts after its pre-releases; numeric identifiers sort before alphanumeric ones.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        return text + (f"+{self.build}" if self.build else "")


def parse(text: object) -> Version:
    """The version ``text`` names. Raises ValueError (with the text) when it is not a semantic version."""
    if not isinstance(text, str) or len(text) > MAX_LENGTH:
        raise ValueError(f"must be a semantic version like 1.2.3 (at most {MAX_LENGTH} characters), got {text!r}")
    match = _SEMVER.match(text)
    if match is None:
        raise ValueError(f"must be a semantic version like 1.2.3 or 1.2.3-rc.1, got {text!r}")
    pre = tuple(match.group(4).split(".")) if match.group(4) else ()
    return Version(int(match.group(1)), int(match.group(2)), int(match.group(3)), pre, match.group(5) or "")


def is_valid(text: object) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


def sort_key(text: str) -> Version:
    """For ``sorted(versions, key=sort_key)``; every stored version was validated on the way in."""
    return parse(text)
