"""A real upstream for the proxy: a threaded HTTP server that counts executions per key.

Paths say how it behaves, so one server serves every test:
  /slow-first/...  the first execution of a key takes SLOW_SECONDS (a client timeout is shorter)
  /unknown/...     takes HANG_SECONDS, longer than the proxy's upstream timeout on that route
  anything else    answers at once
Every answer is 201 with JSON: the execution number, the key it saw and the body it got.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SLOW_SECONDS = 1.5
HANG_SECONDS = 3.0


class Upstream:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: (method, path, key, body) of every request that reached it, in arrival order.
        self.received: list[tuple[str, str, str | None, bytes]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def executions(self, key: str) -> int:
        with self.lock:
            return sum(1 for _, _, k, _ in self.received if k == key)

    def keys_seen(self, path: str) -> list[str | None]:
        with self.lock:
            return [k for _, p, k, _ in self.received if p == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(upstream: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def do_PUT(self) -> None:
            self._answer()

        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            key = self.headers.get("idempotency-key")
            with upstream.lock:
                upstream.received.append((self.command, self.path, key, body))
                execution = sum(1 for _, _, k, _ in upstream.received if k == key)
            if self.path.startswith("/slow-first/") and execution == 1:
                time.sleep(SLOW_SECONDS)
            if self.path.startswith("/unknown/"):
                time.sleep(HANG_SECONDS)
            payload = json.dumps(
                {"execution": execution, "key": key, "body": body.decode("utf-8", "replace")}
            ).encode()
            try:
                self.send_response(201)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the proxy gave up on it (the unknown-outcome route)

    return Handler
