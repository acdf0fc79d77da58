"""Flow control settings: the ``flow_limits`` setting (JSON: queue name → FlowLimits fields) and the
checks of the flat ``flow_*`` / ``shed_*`` / ``scale_*`` settings, run by ``Settings.__post_init__``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from jobengine.errors import ConfigError, InvalidJob
from jobengine.flow.limits import FlowLimits
from jobengine.flow.pressure import ShedPolicy

if TYPE_CHECKING:
    from jobengine.settings import Settings


def parse_flow_limits(text: str) -> dict[str, FlowLimits]:
    """``{"emails": {"rate": 10, "burst": 5}, ...}`` → limits by queue. Raises ConfigError naming the
    queue and field."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"flow_limits: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("flow_limits: must be a mapping of queue name to limits")
    out: dict[str, FlowLimits] = {}
    for queue, spec in data.items():
        if not isinstance(spec, dict):
            raise ConfigError(f"flow_limits.{queue}: must be a mapping of limits")
        unknown = sorted(set(spec) - set(FlowLimits.__dataclass_fields__) - {"queue", "updated_at"})
        if unknown:
            raise ConfigError(f"flow_limits.{queue}.{unknown[0]}: unknown limit")
        try:
            out[queue] = FlowLimits.from_json(queue, spec)
        except (InvalidJob, TypeError) as exc:
            raise ConfigError(f"flow_limits.{queue}.{getattr(exc, 'field', '?')}: {exc}") from None
    return out


def shed_policy(settings: Settings) -> ShedPolicy:
    return ShedPolicy(
        settings.shed_depth,
        settings.shed_in_flight,
        settings.shed_latency,
        settings.shed_min_priority,
        settings.flow_retry_after,
    )


def check_flow_settings(settings: Settings) -> None:
    for name in ("flow_soft_limit", "flow_hard_limit", "shed_depth", "shed_in_flight"):
        if getattr(settings, name) < 0:
            raise ConfigError(f"{name}: must be >= 0 (0: off)")
    if settings.flow_soft_limit and settings.flow_hard_limit and settings.flow_soft_limit > settings.flow_hard_limit:
        raise ConfigError("flow_soft_limit: must not be above flow_hard_limit")
    for name in ("shed_latency", "flow_cache_seconds"):
        if getattr(settings, name) < 0:
            raise ConfigError(f"{name}: must be >= 0 seconds")
    for name in ("flow_retry_after", "scale_target_seconds"):
        if getattr(settings, name) <= 0:
            raise ConfigError(f"{name}: must be a positive number of seconds")
    parse_flow_limits(settings.flow_limits)
