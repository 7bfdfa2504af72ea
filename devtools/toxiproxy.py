"""Toxiproxy on loopback: the pinned build (:data:`devtools.gotools.TOXIPROXY`) and a client of its HTTP API.

A proxy listens on a loopback port and forwards TCP to an upstream server; toxics added to it delay,
throttle, reset or swallow that traffic, on the connections already open and on new ones, until they
are removed. The chaos suite puts one between ``reclaim worker`` and each of its servers (the broker,
the S3 endpoint, PostgreSQL) to inject network faults without touching the servers themselves.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools import gotools
from reclaim.localstack.procs import StackError, free_port, spawn, stop_pid, wait_until

DOWNSTREAM, UPSTREAM = "downstream", "upstream"
"""The two directions of a proxy's traffic: server to client, and client to server."""


@dataclass(frozen=True)
class Toxic:
    """One fault on one direction of a proxy's traffic: a Toxiproxy toxic ``type`` with its attributes.

    ``toxicity`` is the share of connections it applies to (each connection draws once).
    """

    type: str
    attributes: tuple[tuple[str, int], ...]
    stream: str = DOWNSTREAM
    toxicity: float = 1.0

    @property
    def name(self) -> str:
        return f"{self.type}_{self.stream}"

    def body(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "stream": self.stream, "toxicity": self.toxicity,
                "attributes": dict(self.attributes)}

    def __str__(self) -> str:
        attributes = ", ".join(f"{key}={value}" for key, value in self.attributes)
        return f"{self.type}({attributes}) {self.stream}"


def latency(ms: int, jitter_ms: int = 0, stream: str = DOWNSTREAM) -> Toxic:
    """Each chunk of data is held ``ms`` (± ``jitter_ms``) before it is passed on."""
    return Toxic("latency", (("latency", ms), ("jitter", jitter_ms)), stream)


def bandwidth(kb_per_s: int, stream: str = DOWNSTREAM) -> Toxic:
    """At most ``kb_per_s`` kilobytes a second pass."""
    return Toxic("bandwidth", (("rate", kb_per_s),), stream)


def reset_peer(after_ms: int = 0, stream: str = DOWNSTREAM, toxicity: float = 1.0) -> Toxic:
    """A connection is reset (TCP RST, unsent data dropped) ``after_ms`` after data arrives on it; one that
    was open when the toxic came is closed instead."""
    return Toxic("reset_peer", (("timeout", after_ms),), stream, toxicity)


def timeout(after_ms: int = 0, stream: str = DOWNSTREAM) -> Toxic:
    """No data passes; the connection is closed after ``after_ms``, or never when it is 0 (a blackhole).
    Removing the toxic closes the connections it held: what they sent is lost."""
    return Toxic("timeout", (("timeout", after_ms),), stream)


def limit_data(bytes_: int, stream: str = DOWNSTREAM) -> Toxic:
    """A connection is closed once ``bytes_`` bytes have passed on it."""
    return Toxic("limit_data", (("bytes", bytes_),), stream)


def slow_close(delay_ms: int, stream: str = DOWNSTREAM) -> Toxic:
    """A connection's close is held ``delay_ms``."""
    return Toxic("slow_close", (("delay", delay_ms),), stream)


def blackhole() -> tuple[Toxic, Toxic]:
    """Nothing passes either way and no connection is closed: the network path is gone, silently."""
    return timeout(0, DOWNSTREAM), timeout(0, UPSTREAM)


@dataclass(frozen=True)
class Proxy:
    """A proxy: clients connect to ``listen`` (``host:port``), Toxiproxy connects them to ``upstream``."""

    name: str
    listen: str
    upstream: str

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


@dataclass(frozen=True)
class Toxiproxy:
    """A client of a Toxiproxy server's HTTP API at ``api`` (``http://host:port``)."""

    api: str
    timeout_s: float = 10.0

    def version(self) -> str:
        return str(self._call("GET", "/version"))

    def create(self, name: str, upstream: str, listen: str = "127.0.0.1:0") -> Proxy:
        """A new proxy, enabled, to ``upstream``; on a free loopback port unless ``listen`` names one."""
        made = self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream,
                                                "enabled": True})
        return Proxy(made["name"], made["listen"], made["upstream"])

    def delete(self, proxy: Proxy) -> None:
        self._call("DELETE", f"/proxies/{proxy.name}")

    def set_enabled(self, proxy: Proxy, enabled: bool) -> None:
        """Disabling closes the proxy's port and every connection through it; enabling opens it again."""
        self._call("POST", f"/proxies/{proxy.name}", {"enabled": enabled})

    def add(self, proxy: Proxy, *toxics: Toxic) -> None:
        for toxic in toxics:
            self._call("POST", f"/proxies/{proxy.name}/toxics", toxic.body())

    def remove(self, proxy: Proxy, *toxics: Toxic) -> None:
        for toxic in toxics:
            self._call("DELETE", f"/proxies/{proxy.name}/toxics/{toxic.name}")

    def toxics(self, proxy: Proxy) -> list[str]:
        """The names of the toxics on ``proxy`` now."""
        return sorted(str(toxic["name"]) for toxic in self._call("GET", f"/proxies/{proxy.name}/toxics"))

    def reset(self) -> None:
        """Every proxy enabled again and every toxic removed."""
        self._call("POST", "/reset")

    @contextmanager
    def faults(self, proxy: Proxy, *toxics: Toxic) -> Iterator[None]:
        """``toxics`` on ``proxy`` for the ``with`` block, removed after it however it ends."""
        self.add(proxy, *toxics)
        try:
            yield
        finally:
            self.remove(proxy, *toxics)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.api + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise StackError(f"Toxiproxy {method} {path}: HTTP {exc.code} {_api_error(exc)}") from exc
        except OSError as exc:
            raise StackError(f"Toxiproxy at {self.api} cannot be reached ({method} {path}): {exc}") from exc
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text


def _api_error(exc: urllib.error.HTTPError) -> str:
    """What Toxiproxy said (its JSON ``error``), on one line."""
    try:
        raw = exc.read().decode(errors="replace")
    except OSError:
        return exc.reason or ""
    try:
        said = json.loads(raw).get("error", raw)
    except (ValueError, AttributeError):
        said = raw
    return " ".join(str(said).split())


def _ready(client: Toxiproxy) -> bool:
    try:
        client.version()
    except StackError:
        return False
    return True


def start_toxiproxy(work: Path, cache_dir: Path, timeout_s: float = 30.0) -> tuple[int, Toxiproxy]:
    """Start a Toxiproxy server with its API on a free loopback port, logging under ``work``; return its
    pid and a client. The binary is built first when the cache does not hold it (a minute, once).

    Raises :class:`~reclaim.localstack.procs.StackError` when it cannot be built or does not answer within
    ``timeout_s``.
    """
    binary = gotools.build(gotools.TOXIPROXY, cache_dir).path
    port = free_port()
    log = work / "toxiproxy.log"
    proc = spawn([str(binary), "-host", "127.0.0.1", "-port", str(port)], log,
                 env={**os.environ, "LOG_LEVEL": "warn"})
    client = Toxiproxy(f"http://127.0.0.1:{port}")
    try:
        wait_until(lambda: _ready(client), timeout_s, "Toxiproxy", proc, log)
    except StackError:
        stop_pid(proc.pid)
        raise
    return proc.pid, client
