"""Hosts on one machine (devtools.netns): each host has its own address and ports, reaches the others over
the bridge, loses every packet while its link is cut, and leaves nothing behind — not even when the
process that made it was killed."""

from __future__ import annotations

import errno
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from devtools import netns
from devtools.netns import HostNetwork
from reclaim.localstack.procs import StackError, wait_until
from tests.support.paths import REPO
from tests.support.servers import server_unavailable

pytestmark = pytest.mark.integration

PORT = 7000


@pytest.fixture
def hosts() -> Iterator[HostNetwork]:
    try:
        net = HostNetwork(["a", "b"])
    except StackError as exc:
        server_unavailable("hosts on one machine (network namespaces)", exc)
        raise AssertionError("unreachable") from exc
    yield net
    net.close()


def _listen(net: HostNetwork, host: str) -> subprocess.Popen[bytes]:
    """A TCP server on ``host``'s address that answers every connection with the host's name."""
    code = textwrap.dedent(f"""
        import socket
        server = socket.create_server(({net[host].address!r}, {PORT}))
        while True:
            conn, _ = server.accept()
            conn.sendall({host.encode()!r})
            conn.close()
    """)
    with net[host].entered():
        server = subprocess.Popen([sys.executable, "-c", code])
    wait_until(lambda: _answer(net[host].address) is not None, 10, f"server on host {host}", server)
    return server


def _answer(address: str, timeout: float = 2.0) -> bytes | None:
    try:
        with socket.create_connection((address, PORT), timeout=timeout) as conn:
            return conn.recv(16)
    except OSError:
        return None


def _connect_from(net: HostNetwork, host: str, address: str) -> str:
    """What a client on ``host`` gets connecting to ``address``: the answer, or the error's name."""
    code = textwrap.dedent(f"""
        import errno, socket
        try:
            with socket.create_connection(({address!r}, {PORT}), timeout=5) as conn:
                print(conn.recv(16).decode())
        except OSError as exc:
            print(errno.errorcode.get(exc.errno, "timeout") if exc.errno else "timeout")
    """)
    done = subprocess.run(net[host].argv([sys.executable, "-c", code]), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_hosts_reach_each_other_and_the_test_over_the_bridge_and_nothing_on_another_loopback(
        hosts: HostNetwork) -> None:
    server = _listen(hosts, "b")
    try:
        assert _connect_from(hosts, "a", hosts["b"].address) == "b"
        assert _answer(hosts["b"].address) == b"b"  # from the root namespace, over the bridge
        assert _connect_from(hosts, "a", "127.0.0.1") == errno.errorcode[errno.ECONNREFUSED]
        assert hosts["a"].address != hosts["b"].address != hosts.gateway
    finally:
        server.kill()
        server.wait()


def test_a_cut_link_loses_packets_without_refusing_and_a_restored_one_carries_them_again(
        hosts: HostNetwork) -> None:
    server = _listen(hosts, "b")
    try:
        hosts.cut("a")
        started = time.monotonic()
        failed = _connect_from(hosts, "a", hosts["b"].address)
        # Nothing answers a dead link: no reset, only silence, until the client gives up.
        assert failed in ("timeout", errno.errorcode[errno.EHOSTUNREACH]), failed
        assert time.monotonic() - started > 1.0
        assert _answer(hosts["b"].address) == b"b", "cutting a must leave b reachable"
        hosts.restore("a")
        assert _connect_from(hosts, "a", hosts["b"].address) == "b"
    finally:
        server.kill()
        server.wait()


def test_close_removes_every_namespace_and_link(hosts: HostNetwork) -> None:
    names = [host.namespace for host in hosts.hosts.values()]
    links = [hosts.bridge, *(host.link for host in hosts.hosts.values())]
    hosts.close()
    assert not set(names) & set(_namespaces())
    assert not set(links) & set(_links())


def test_what_a_killed_run_left_is_removed_by_the_next(hosts: HostNetwork) -> None:
    code = textwrap.dedent("""
        import sys, time
        from devtools.netns import HostNetwork
        net = HostNetwork(["orphan"])
        print(net["orphan"].namespace, net.bridge, flush=True)
        time.sleep(600)
    """)
    aborted = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                               cwd=REPO)
    assert aborted.stdout is not None
    namespace, bridge = aborted.stdout.readline().split()
    aborted.send_signal(signal.SIGKILL)
    aborted.wait()
    assert namespace in _namespaces() and bridge in _links()
    removed = netns.remove_leftovers()
    assert namespace in removed and bridge in removed
    assert namespace not in _namespaces() and bridge not in _links()
    assert hosts["a"].namespace in _namespaces(), "a live run's hosts must be left alone"


def _namespaces() -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def _links() -> list[str]:
    listing = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in listing.splitlines()]
