"""One benchmark worker process: ``python -m bench.worker --database ... --socket ...``.

Runs a jobengine worker with the benchmark task until SIGTERM / SIGINT (graceful stop), reporting every
job it runs to the collector socket.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Callable

from bench.workload import make_engine


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.worker")
    p.add_argument("--database", required=True)
    p.add_argument("--socket", required=True, help="the collector's AF_UNIX stream socket")
    p.add_argument("--synchronous", default="FULL")
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--fetch-batch", type=int, default=0)
    p.add_argument("--poll-interval", type=float, default=1.0)
    p.add_argument("--prefetch", type=int, help="jobs claimed beyond the free slots (default: the product's)")
    p.add_argument("--lease-seconds", type=float, default=30.0)
    p.add_argument("--queue", help="the queue: settings as JSON (--transport redis|nats)")
    p.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the event loop (uvloop: installed)"
    )
    p.add_argument("--log-level", default="warning", help="info: the job lines, as `jobengine worker` writes")
    return p.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    engine, sink = make_engine(args.database, args.synchronous, args.queue)
    sink.connect(args.socket)
    async with engine:
        ahead = {} if args.prefetch is None else {"prefetch": args.prefetch}
        worker = engine.worker(
            **ahead,
            concurrency=args.concurrency,
            fetch_batch=args.fetch_batch,
            poll_interval=args.poll_interval,
            lease_seconds=args.lease_seconds,
            heartbeat_every=args.lease_seconds / 3,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stop)
        await worker.run()
    sink.close()


def loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if loop == "uvloop":
        import uvloop  # not a jobengine dependency: pip install uvloop to compare

        return uvloop.new_event_loop
    return None


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.log_level == "warning":
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s worker %(process)d %(levelname)s %(message)s")
    else:
        from jobengine.cli.logs import configure_logging

        configure_logging(args.log_level, "text")
    with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
        runner.run(serve(args))


if __name__ == "__main__":
    main()
