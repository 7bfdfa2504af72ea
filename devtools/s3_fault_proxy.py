"""A fault-injecting HTTP proxy in front of an S3 endpoint: a seeded share of requests is answered with S3's
throttling and server errors, every other one is forwarded as it came.

A client points at the proxy and signs for the proxy's ``host:port``; the proxy passes the ``Host``
header and every signed header through verbatim, so the server behind it checks the very signature the
client made (SigV4 signs ``host``, never ``Expect``, which the proxy answers itself). Bodies are streamed
both ways with their ``Content-Length`` (chunked ones re-chunked), and each client connection keeps one
upstream connection alive for as long as it lives.

An injected fault carries S3's XML error body, so botocore classifies it (and retries it) exactly as an
answer of AWS: ``SlowDown`` and ``ServiceUnavailable`` are refused before the server sees the request;
``InternalError`` comes after the server has done the work, as AWS warns it may, so a retry repeats a
request that already took effect.
"""

from __future__ import annotations

import http.client
import random
import select
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BufferedIOBase
from types import TracebackType
from urllib.parse import urlsplit

#: Headers of one connection, not of the request: never forwarded either way.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                         "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "expect"})
_BLOCK = 64 * 1024
_NO_BODY = frozenset({204, 304})


@dataclass(frozen=True)
class S3Fault:
    """One kind of error answer: its HTTP status, S3 error code and message, and whether the request
    reaches the server first (``after``: the server acted on it; the client is told it failed)."""

    status: int
    code: str
    message: str
    after: bool = False

    def body(self, resource: str, request_id: str) -> bytes:
        """The S3 XML error document, as AWS sends it."""
        return ('<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{self.code}</Code><Message>{self.message}</Message>"
                f"<Resource>{_xml(resource)}</Resource><RequestId>{request_id}</RequestId></Error>").encode()


SLOW_DOWN = S3Fault(503, "SlowDown", "Please reduce your request rate.")
SERVICE_UNAVAILABLE = S3Fault(503, "ServiceUnavailable", "Service is unable to handle request.")
INTERNAL_ERROR = S3Fault(500, "InternalError", "We encountered an internal error. Please try again.", after=True)
#: Throttling and both kinds of server error, drawn with equal odds.
S3_FAULTS: tuple[S3Fault, ...] = (SLOW_DOWN, INTERNAL_ERROR, SERVICE_UNAVAILABLE)


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class Drawn:
    """One request the proxy took: its method and path, and the code of the fault it got (None: none)."""

    method: str
    path: str
    fault: str | None


class FaultPlan:
    """Which requests fail and how, drawn from one seeded generator (thread-safe), and what was drawn."""

    def __init__(self, rate: float, seed: int, faults: Sequence[S3Fault] = S3_FAULTS) -> None:
        if not 0 <= rate <= 1:
            raise ValueError(f"fault rate must lie in [0, 1], got {rate}")
        if not faults:
            raise ValueError("no fault kinds to draw from")
        self.rate = rate
        self._faults = tuple(faults)
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._injected: Counter[str] = Counter()
        self._seen: list[Drawn] = []

    def draw(self, method: str, path: str) -> S3Fault | None:
        """The fault of the next request (``method`` on ``path``, query left out), or None to forward it."""
        with self._lock:
            fault = self._random.choice(self._faults) if self._random.random() < self.rate else None
            self._seen.append(Drawn(method, path, None if fault is None else fault.code))
            if fault is not None:
                self._injected[fault.code] += 1
            return fault

    @property
    def requests(self) -> int:
        with self._lock:
            return len(self._seen)

    def seen(self) -> list[Drawn]:
        """Every request so far, in the order drawn, with the fault it got."""
        with self._lock:
            return list(self._seen)

    def injected(self) -> dict[str, int]:
        """Faults injected so far, by S3 error code (every kind named, zero or not)."""
        with self._lock:
            return {fault.code: self._injected[fault.code] for fault in self._faults}

    def describe(self) -> str:
        """``61 of 304 S3 requests: 20 SlowDown, 21 InternalError, 20 ServiceUnavailable``."""
        injected = self.injected()
        kinds = ", ".join(f"{n} {code}" for code, n in injected.items())
        return f"{sum(injected.values())} of {self.requests} S3 requests: {kinds}"


class S3FaultProxy:
    """The proxy on ``host`` (a free port unless named), forwarding to ``upstream`` (``http://host:port``).

    Use it as a context manager, or :meth:`start` and :meth:`stop`; :attr:`url` is the endpoint to give
    a client, :attr:`plan` counts what was injected. ``upstream_failures`` counts requests the proxy
    could not forward (the connection to the client is then dropped, as the server's own would be).
    """

    def __init__(self, upstream: str, rate: float = 0.2, seed: int = 0, faults: Sequence[S3Fault] = S3_FAULTS,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self.plan = FaultPlan(rate, seed, faults)
        self.upstream_failures = 0
        self._failures_lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def upstream_failed(self) -> None:
        with self._failures_lock:
            self.upstream_failures += 1

    def start(self) -> S3FaultProxy:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="s3-fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting; connections still open end with their handler threads (daemons)."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> S3FaultProxy:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _handler_for(proxy: S3FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(_ProxyHandler):
        owner = proxy

    return Handler


class _ProxyHandler(BaseHTTPRequestHandler):
    """One client connection: each request faulted or forwarded on this connection's upstream one."""

    owner: S3FaultProxy
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect
    timeout = 60  # an idle client connection is closed after this long

    _upstream: http.client.HTTPConnection | None = None

    def do_GET(self) -> None:  # noqa: N802 - the names http.server dispatches to
        self._serve()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the signature overridden
        pass  # one line per request on stderr is noise in a worker's test log

    def finish(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
        super().finish()

    def _serve(self) -> None:
        fault = self.owner.plan.draw(self.command, self.path.split("?", 1)[0])
        if fault is not None and not fault.after:
            for _ in self._request_body():
                pass  # read to its end: the connection carries the next request after it
            self._answer_fault(fault)
            return
        try:
            response = self._forward()
        except (OSError, http.client.HTTPException):
            self.owner.upstream_failed()
            self.close_connection = True
            self._drop_upstream()
            return
        if fault is not None:
            response.read()
            self._answer_fault(fault)
        else:
            self._relay(response)

    def _request_body(self) -> Iterator[bytes]:
        """The request's body in blocks, as it arrives: by ``Content-Length`` or chunk by chunk."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            yield from _read_chunked(self.rfile)
            return
        left = int(self.headers.get("Content-Length") or 0)
        while left:
            block = self.rfile.read(min(left, _BLOCK))
            if not block:
                raise ConnectionError("client closed the connection mid-body")
            left -= len(block)
            yield block

    def _connection(self) -> http.client.HTTPConnection:
        """The upstream connection, opened again when the server closed it while idle."""
        conn = self._upstream
        if conn is not None and conn.sock is not None and _dropped(conn.sock):
            self._drop_upstream()
            conn = None
        if conn is None:
            conn = self._upstream = http.client.HTTPConnection(*self.owner.upstream, timeout=120)
        return conn

    def _drop_upstream(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None

    def _forward(self) -> http.client.HTTPResponse:
        conn = self._connection()
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():
            if name.lower() not in _HOP_BY_HOP:
                conn.putheader(name, value)
        if chunked:
            conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        for block in self._request_body():
            conn.send(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
        if chunked:
            conn.send(b"0\r\n\r\n")
        return conn.getresponse()

    def _relay(self, response: http.client.HTTPResponse) -> None:
        """The server's answer, streamed back with its own status, headers and length."""
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        has_body = self.command != "HEAD" and response.status not in _NO_BODY
        chunked = has_body and response.getheader("Content-Length") is None
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        if response.will_close:
            self.close_connection = True
        self.end_headers()
        if not has_body:
            response.read()  # nothing to read, but the upstream connection takes no request before it
        while has_body:
            block = response.read(_BLOCK)
            if chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block) if block else b"0\r\n\r\n")
            elif block:
                self.wfile.write(block)
            if not block:
                break
        if response.will_close:
            self._drop_upstream()

    def _answer_fault(self, fault: S3Fault) -> None:
        request_id = uuid.uuid4().hex[:16].upper()
        body = fault.body(self.path.split("?", 1)[0], request_id)
        self.send_response_only(fault.status, http.client.responses.get(fault.status, ""))
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", request_id)
        self.send_header("Date", self.date_time_string())
        self.send_header("Server", "AmazonS3")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _read_chunked(stream: BufferedIOBase) -> Iterator[bytes]:
    """The data of an HTTP/1.1 chunked body; its trailer is read and dropped."""
    while True:
        size_line = stream.readline(1024)
        if not size_line:
            raise ConnectionError("client closed the connection mid-body")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while stream.readline(1024) not in (b"\r\n", b"\n", b""):
                pass
            return
        data = stream.read(size)
        stream.readline(1024)  # the CRLF after the chunk's data
        yield data


def _dropped(sock: socket.socket) -> bool:
    """True when an idle connection has something to read: the server's close (or stray bytes)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
