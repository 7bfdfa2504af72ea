"""Toxiproxy as the chaos suite drives it: the pinned build under its own name, and each toxic doing to a
TCP connection what its name says (an echo server on loopback behind the proxy)."""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools import gotools
from devtools import toxiproxy as toxics
from devtools.gotools import GoTool
from devtools.toxiproxy import Proxy, Toxiproxy, start_toxiproxy
from reclaim.localstack.procs import StackError, stop_pid
from reclaim.settings import Settings
from tests.support.paths import REPO
from tests.support.servers import started


def test_a_binary_go_install_names_after_its_directory_is_installed_under_the_tool_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in ``go`` that builds as ``go install`` does: into ``$GOBIN``, named after the package's
    last directory (``cmd/server`` → ``server``)."""
    fake_bin = tmp_path / "fake-go"
    fake_bin.mkdir()
    go = fake_bin / "go"
    go.write_text('#!/bin/sh\npkg="${2%@*}"\nprintf "built %s" "$*" > "$GOBIN/${pkg##*/}"\n')
    go.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    tool = GoTool("toxiproxy-server", "example.com/toxiproxy/v2/cmd/server", "v2.5.0")

    built = gotools.build(tool, tmp_path / "cache")

    assert built.path == tmp_path / "cache" / "bin" / "toxiproxy-server"
    assert built.path.read_text() == "built install example.com/toxiproxy/v2/cmd/server@v2.5.0"
    assert tool.installed(tmp_path / "cache")
    assert sorted(p.name for p in built.path.parent.iterdir()) == [
        ".toxiproxy-server.lock", "toxiproxy-server", "toxiproxy-server.version"]


def test_the_pinned_toxiproxy_is_a_make_test_tool() -> None:
    assert gotools.TOOLS["toxiproxy-server"] is gotools.TOXIPROXY
    assert "toxiproxy-server" in (REPO / "Makefile").read_text()


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        with contextlib.suppress(OSError):
            while data := self.request.recv(65536):
                self.request.sendall(data)


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    """``host:port`` of a TCP echo server on loopback."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def toxi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Toxiproxy]:
    pid, client = started("Toxiproxy", lambda: start_toxiproxy(tmp_path_factory.mktemp("toxiproxy"),
                                                                Settings.from_env().cache_dir))
    yield client
    stop_pid(pid)


@pytest.fixture
def proxy(toxi: Toxiproxy, echo: str, request: pytest.FixtureRequest) -> Iterator[Proxy]:
    made = toxi.create(request.node.name[:60], echo)
    yield made
    toxi.delete(made)


def _round_trip(proxy: Proxy, payload: bytes = b"ping", timeout_s: float = 5.0) -> tuple[bytes, float]:
    """What comes back for ``payload`` through ``proxy``, and how long it took."""
    started = time.monotonic()
    with socket.create_connection((proxy.host, proxy.port), timeout=timeout_s) as sock:
        sock.sendall(payload)
        received = b""
        while len(received) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    return received, time.monotonic() - started


@pytest.mark.integration
def test_a_proxy_forwards_and_latency_delays_each_answer(toxi: Toxiproxy, proxy: Proxy) -> None:
    assert proxy.host == "127.0.0.1" and proxy.port > 0
    assert _round_trip(proxy)[0] == b"ping"
    with toxi.faults(proxy, toxics.latency(300)):
        assert toxi.toxics(proxy) == ["latency_downstream"]
        echoed, took = _round_trip(proxy)
    assert echoed == b"ping" and took >= 0.3
    assert toxi.toxics(proxy) == []


@pytest.mark.integration
def test_bandwidth_limits_the_rate(toxi: Toxiproxy, proxy: Proxy) -> None:
    with toxi.faults(proxy, toxics.bandwidth(100)):
        echoed, took = _round_trip(proxy, b"x" * 100_000)
    assert len(echoed) == 100_000 and took >= 0.8


@pytest.mark.integration
def test_reset_peer_ends_connections_open_and_resets_new_ones(toxi: Toxiproxy, proxy: Proxy) -> None:
    with socket.create_connection((proxy.host, proxy.port), timeout=5) as sock:
        sock.sendall(b"before")
        assert sock.recv(100) == b"before"
        with toxi.faults(proxy, toxics.reset_peer()):
            sock.sendall(b"after")
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(100) == b"", "the connection open when the toxic came still answers"
            with pytest.raises(ConnectionResetError):
                _round_trip(proxy)
    assert _round_trip(proxy)[0] == b"ping"


@pytest.mark.integration
def test_a_blackhole_passes_nothing_and_closes_nothing_until_lifted(toxi: Toxiproxy, proxy: Proxy) -> None:
    with socket.create_connection((proxy.host, proxy.port), timeout=1) as sock:
        with toxi.faults(proxy, *toxics.blackhole()):
            sock.sendall(b"lost")
            with pytest.raises(TimeoutError):
                sock.recv(100)
            with socket.create_connection((proxy.host, proxy.port), timeout=1) as new:
                new.sendall(b"lost too")
                with pytest.raises(TimeoutError):
                    new.recv(100)
        assert sock.recv(100) == b""  # lifting it closes the connections it held: what they sent is gone
    assert _round_trip(proxy)[0] == b"ping"


@pytest.mark.integration
def test_a_disabled_proxy_refuses_connections(toxi: Toxiproxy, proxy: Proxy) -> None:
    toxi.set_enabled(proxy, False)
    with pytest.raises(ConnectionRefusedError):
        _round_trip(proxy)
    toxi.set_enabled(proxy, True)
    assert _round_trip(proxy)[0] == b"ping"


@pytest.mark.integration
def test_what_toxiproxy_refuses_is_one_line(toxi: Toxiproxy, proxy: Proxy) -> None:
    with pytest.raises(StackError, match=r"^Toxiproxy POST /proxies: HTTP 409 proxy already exists$"):
        toxi.create(proxy.name, proxy.upstream)
    with pytest.raises(StackError, match=r"HTTP 404 toxic not found"):
        toxi.remove(proxy, toxics.latency(1))


def test_an_unreachable_api_is_one_line() -> None:
    with pytest.raises(StackError, match=r"^Toxiproxy at http://127.0.0.1:9 cannot be reached \(GET /version\)") \
            as info:
        Toxiproxy("http://127.0.0.1:9", timeout_s=1).version()
    assert "\n" not in str(info.value)
