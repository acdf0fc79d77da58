"""What an answer means and when to try again (pure).

- 2xx: delivered. 410 Gone: the endpoint is disabled, the delivery fails. Any other answer (3xx included:
  redirects are never followed), a timeout or a connection error: try again after ``base * factor**(n-1)``
  seconds (n: failed attempts of this series), at most ``max_delay``, spread by ``jitter`` (a fraction: the
  delay is multiplied by a random factor in ``[1 - jitter, 1 + jitter]``). 429 and 503 with Retry-After
  (seconds or an HTTP date) wait that long instead (at most ``max_delay``).
- A delivery whose next attempt would fall after ``window_start + window`` fails; if its endpoint has been
  failing for the whole window too, the endpoint is disabled (``webhook.endpoint_disabled``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Final

SUCCESS: Final = "success"
RETRY: Final = "retry"
GONE: Final = "gone"


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    base: float = 5.0
    factor: float = 2.0
    max_delay: float = 3600.0
    window: float = 3 * 86400.0
    jitter: float = 0.2

    def delay(self, failures: int, rand: float = 0.5) -> float:
        """The wait after the ``failures``-th failed attempt of a series; ``rand`` in [0, 1)."""
        raw = min(self.max_delay, self.base * self.factor ** max(0, failures - 1))
        return max(0.0, raw * (1 + self.jitter * (2 * rand - 1)))


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str  # SUCCESS, RETRY or GONE
    retry_after: float | None = None


def parse_retry_after(value: str | None, now: float) -> float | None:
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(text).timestamp() - now
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if seconds != seconds or seconds < 0:  # NaN or in the past
        return 0.0 if seconds < 0 else None
    return seconds


def judge(status: int | None, headers: Mapping[str, str], now: float) -> Verdict:
    """``status`` None: no answer (timeout, connection refused, refused address)."""
    if status is None:
        return Verdict(RETRY)
    if 200 <= status < 300:
        return Verdict(SUCCESS)
    if status == 410:
        return Verdict(GONE)
    if status in (429, 503):
        return Verdict(RETRY, parse_retry_after(headers.get("retry-after"), now))
    return Verdict(RETRY)


def next_attempt_at(
    schedule: RetrySchedule, verdict: Verdict, failures: int, window_start: float, now: float, rand: float
) -> float | None:
    """When to try again after a failed attempt (``failures`` of this series so far), or None: give up."""
    if verdict.kind != RETRY:
        return None
    wait = schedule.delay(failures, rand)
    if verdict.retry_after is not None:
        wait = min(schedule.max_delay, verdict.retry_after)
    at = now + wait
    if at > window_start + schedule.window:
        return None
    return at
