"""Outbound webhooks (signed deliveries of events to tenants' endpoints) and inbound event hooks.

- :mod:`.model`: endpoints, deliveries, attempts, inbound hooks and their validation (pure).
- :mod:`.signing`: Standard Webhooks signatures and ``whsec_`` secrets; the inbound ``sha256=<hex>`` check.
- :mod:`.ssrf`: which URLs may be sent to (checked at registration and again at send time).
- :mod:`.policy`: the retry schedule and what each answer means (pure).
- :mod:`.limiter`: the rate limiters (noop, in-process; Redis in ``backends/redis/ratelimit.py``).
- :mod:`.manager`: the facade the API and CLI use; :mod:`.dispatcher`: the delivery service.
"""
