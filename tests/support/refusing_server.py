"""A stand-in HTTP server that answers every request with one fixed error, counting the requests: for the
throttling no emulator can be made to produce (GCS's 429, Azure's 503 ServerBusy)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Refusal:
    """What the server answers, and how many requests it has answered so far."""

    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    requests: int = 0
    url: str = ""


@contextmanager
def refusing_server(refusal: Refusal) -> Iterator[Refusal]:
    """A server on a free loopback port answering every request with ``refusal``; its ``url`` is set."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            refusal.requests += 1
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(refusal.status)
            for name, value in refusal.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(refusal.body)))
            self.end_headers()
            self.wfile.write(refusal.body)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _answer  # noqa: N815 - http.server's names

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    refusal.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield refusal
    finally:
        server.shutdown()
        server.server_close()
