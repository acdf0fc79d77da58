"""Flow control, as pure logic over a controlled clock (no I/O here; the stores and the engine do that).

- :mod:`.limits`    FlowLimits: a queue's rate, key concurrency, depth limits and adaptive settings.
- :mod:`.bucket`    the token bucket (refill and take), stored by the backends as ``(tokens, at)``.
- :mod:`.select`    which of a queue's runnable jobs a limited claim may start (bucket + concurrency).
- :mod:`.aimd`      the adaptive (AIMD) rate limiter.
- :mod:`.pressure`  backpressure (soft / hard depth limits) and load shedding (saturation by priority).
- :mod:`.scale`     latency percentiles, throughput and a recommended worker count.
"""
