"""What the broker transports (Redis, NATS) share: the rule for messages delivered too often.

A message handed to workers ``max_deliveries`` times without being settled is *exhausted*. Two paths lead
there, and both end after exactly ``max_deliveries`` deliveries to a worker:

- a worker asks to ``retry`` a delivery that already was the ``max_deliveries``-th: it is not delivered
  again;
- a delivery's lease expires ``max_deliveries`` times (the worker crashed each time): the broker delivers it
  once more, and ``receive`` intercepts that delivery instead of returning it.

An exhausted delivery goes to the ``exhausted`` hook first (the engine marks the job dead in the store), then
to the dead-letter stream with its headers, or is dropped and counted when dead-lettering is off. If the
hook fails, nothing is settled: the message is delivered again later and meets the same rule.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from jobengine.ports.transport import Delivery, TransportOptions

log = logging.getLogger("jobengine.transport")

Settle = Callable[[Sequence[Delivery]], Awaitable[None]]
DeadLetter = Callable[[Sequence[Delivery], str, Callable[[Delivery], int]], Awaitable[None]]


def exhausted_reason(options: TransportOptions) -> str:
    return f"delivered {options.max_deliveries} times without success (maxDeliveryAttempts {options.max_deliveries})"


async def settle_exhausted(
    options: TransportOptions,
    deliveries: Sequence[Delivery],
    *,
    made: Callable[[Delivery], int],
    dead_letter: DeadLetter,
    ack: Settle,
) -> None:
    """Run the hook, then dead-letter (or drop) what it returns and ack the rest. ``made(d)``: deliveries to
    a worker so far (the header value)."""
    if not deliveries:
        return
    try:
        doomed = list(await options.exhausted(deliveries))
    except Exception:
        log.exception("the exhausted-delivery hook failed; %d message(s) will be delivered again", len(deliveries))
        return
    chosen = {d.receipt for d in doomed}
    if doomed:
        await dead_letter(doomed, exhausted_reason(options), made)
    rest = [d for d in deliveries if d.receipt not in chosen]
    if rest:
        await ack(rest)


async def deliverable(
    options: TransportOptions, got: Sequence[Delivery], *, dead_letter: DeadLetter, ack: Settle
) -> list[Delivery]:
    """What ``receive`` returns of ``got``: the exhausted deliveries (the broker's ``max_deliveries`` + 1-th)
    go to :func:`settle_exhausted` instead."""
    exhausted = [d for d in got if d.attempt > options.max_deliveries]
    await settle_exhausted(options, exhausted, made=lambda d: d.attempt - 1, dead_letter=dead_letter, ack=ack)
    return [d for d in got if d.attempt <= options.max_deliveries]
