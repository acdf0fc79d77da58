"""The ``flow_limits`` setting: JSON of queue name → FlowLimits fields, checked by ``Settings``."""

from __future__ import annotations

import json

from jobengine.core.flow.limits import FlowLimits
from jobengine.errors import ConfigError, InvalidJob


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
