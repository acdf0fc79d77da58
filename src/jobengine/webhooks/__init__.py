"""Outbound webhooks (signed deliveries of events to tenants' endpoints) and inbound event hooks: the
services. Their values and pure rules are in :mod:`jobengine.core.webhooks`.

- :mod:`.ssrf`: resolves and checks the URL a send goes to (at registration and again at send time).
- :mod:`.limiter`: the in-process rate limiters (Redis in ``backends/redis/ratelimit.py``).
- :mod:`.config`: the values read from the ``webhook_*`` settings.
- :mod:`.manager`: the facade the API and CLI use; :mod:`.dispatcher`: the delivery service.
"""
