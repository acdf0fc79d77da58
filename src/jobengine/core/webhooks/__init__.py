"""The pure side of webhooks: values, validation, signatures, retry policy, address rules.

- :mod:`.model`: endpoints, deliveries, attempts, inbound hooks and their validation.
- :mod:`.signing`: Standard Webhooks signatures and ``whsec_`` secrets; the inbound ``sha256=<hex>`` check.
- :mod:`.policy`: the retry schedule and what each answer means.
- :mod:`.addresses`: which addresses a webhook may reach (IP literal forms, refused classes, exceptions).
- :mod:`.jsonshape`: the JSON shapes of the HTTP API and CLI.
"""
