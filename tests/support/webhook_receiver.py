"""A real HTTP receiver for webhook tests: a threaded ``http.server`` on a free loopback port that records
every request (time, headers, body) and answers what its ``answer`` function says."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    at: float
    path: str
    headers: dict[str, str]
    body: bytes


#: (request number from 1, the request) -> (status, extra headers)
Answer = Callable[[int, Received], tuple[int, dict[str, str]]]


@dataclass
class Receiver:
    answer: Answer = field(default=lambda n, r: (200, {}))
    requests: list[Received] = field(default_factory=list)
    connections: int = 0
    port: int = 0  # 0: a free one

    def __post_init__(self) -> None:
        receiver = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                with lock:
                    receiver.connections += 1
                super().setup()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                got = Received(time.time(), self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with lock:
                    receiver.requests.append(got)
                    n = len(receiver.requests)
                status, extra = receiver.answer(n, got)
                self.send_response(status)
                for k, v in extra.items():
                    self.send_header(k, v)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
