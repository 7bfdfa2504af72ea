"""Several hosts on one machine: a Linux network namespace per host, each joined to one bridge by a veth pair.

Every host has its own loopback, its own address on a private /24 and its own ports, so servers and
reclaim processes in different hosts talk over a link as they would between machines. The bridge has
the subnet's first address in the root namespace, so the process that builds the network reaches
every host. :meth:`HostNetwork.cut` takes a host's link down (as a pulled cable or a dead switch port:
packets vanish, nothing is refused) and :meth:`HostNetwork.restore` brings it back.

Processes run in a host when started inside :meth:`Host.entered` (``subprocess`` and :mod:`reclaim.localstack.procs`
alike, including as another user) or through ``ip netns exec`` (:meth:`Host.argv`). Needs root and
iproute2. Names carry the creating process's pid, so parallel runs never collide and a later run
removes what an aborted one left (:func:`remove_leftovers`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import itertools
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from reclaim.localstack.procs import StackError, pid_alive

log = logging.getLogger(__name__)

#: Prefix of every namespace this module makes (``reclaim.<pid hex>.<run>.<host>``).
NAMESPACE_PREFIX = "reclaim."
#: Prefix of every link this module makes: the bridge ``rcl<pid hex>.<run>`` and its ports, the bridge's
#: name and the host's index in hex (interface names are at most 15 characters).
LINK_PREFIX = "rcl"
#: The interface of a host in its own namespace.
HOST_INTERFACE = "eth0"
_CLONE_NEWNET = 0x40000000
_NETNS_DIR = Path("/run/netns")
_MAX_HOSTS = 16
_runs = itertools.count()
_OWNER = re.compile(rf"^(?:{re.escape(NAMESPACE_PREFIX)}|{LINK_PREFIX})([0-9a-f]+)\.")


@dataclass(frozen=True)
class Host:
    """One host: its name, its namespace, its address and its link's end in the root namespace."""

    name: str
    namespace: str
    address: str
    link: str

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command`` run in this host (``ip netns exec``)."""
        return ["ip", "netns", "exec", self.namespace, *command]

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """While inside, the calling thread's sockets and every process it starts are in this host.

        A network namespace belongs to a thread, not to the process: other threads keep theirs, and a
        child inherits the namespace of the thread that started it (whatever user it then runs as).
        """
        own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
        try:
            target = os.open(_NETNS_DIR / self.namespace, os.O_RDONLY)
            try:
                _setns(target)
            finally:
                os.close(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(own)


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise StackError(f"could not enter a network namespace: {os.strerror(errno)}")


class HostNetwork:
    """Hosts named ``names`` on a bridge of their own; use it as a context manager, or :meth:`close` it.

    >>> with HostNetwork(["broker", "worker-a"]) as net:      # doctest: +SKIP
    ...     with net["broker"].entered():
    ...         server = start_something(host=net["broker"].address)
    ...     net.cut("worker-a"); net.restore("worker-a")
    """

    def __init__(self, names: Sequence[str]) -> None:
        _require_tools()
        if not names or len(names) >= _MAX_HOSTS or len(set(names)) != len(names):
            raise StackError(f"a host network has 1 to {_MAX_HOSTS - 1} hosts of distinct names, not {list(names)}")
        remove_leftovers()
        run = f"{os.getpid():x}.{next(_runs) % 256:02x}"
        self.bridge = f"{LINK_PREFIX}{run}"
        subnet = _free_subnet()
        addresses = list(subnet.hosts())
        self.gateway = str(addresses[0])
        self.hosts = {name: Host(name, f"{NAMESPACE_PREFIX}{run}.{name}", str(addresses[i + 1]),
                                 f"{self.bridge}{i:x}") for i, name in enumerate(names)}
        self._prefix = subnet.prefixlen
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/{self._prefix}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for host in self.hosts.values():
            _ip("netns", "add", host.namespace)
            _ip("link", "add", host.link, "type", "veth", "peer", "name", HOST_INTERFACE, "netns", host.namespace)
            _ip("link", "set", host.link, "master", self.bridge, "up")
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/{self._prefix}", "dev", HOST_INTERFACE)
            _ip("-n", host.namespace, "link", "set", HOST_INTERFACE, "up")
            _ip("-n", host.namespace, "link", "set", "lo", "up")
        log.info("hosts %s on bridge %s (%s/%d)", ", ".join(f"{h.name}={h.address}" for h in self.hosts.values()),
                 self.bridge, self.gateway, self._prefix)

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def __enter__(self) -> HostNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cut(self, name: str) -> None:
        """Take the host's link down: what it sends and what is sent to it is lost, with no reply."""
        _ip("link", "set", self.hosts[name].link, "down")
        log.info("link of host %s cut", name)

    def restore(self, name: str) -> None:
        """Bring the host's link up again (its connections resume where TCP left them)."""
        _ip("link", "set", self.hosts[name].link, "up")
        log.info("link of host %s restored", name)

    def close(self) -> None:
        """Kill what still runs in the hosts and remove the namespaces, links and bridge; never raises."""
        for host in self.hosts.values():
            _remove_link(host.link)  # the pair goes at once; a namespace goes when its last process has
            _remove_namespace(host.namespace)
        _remove_link(self.bridge)


def _require_tools() -> None:
    if os.geteuid() != 0:
        raise StackError("hosts on one machine need root (network namespaces, veth pairs, a bridge): run as root")
    if shutil.which("ip") is None:
        raise StackError("`ip` not found on PATH: install iproute2 (Debian's iproute2) to make hosts on one machine")


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StackError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no address or route of the root namespace overlaps."""
    taken = [ipaddress.ip_network(word, strict=False) for word in _ip("-4", "-o", "addr", "show").split()
             if re.fullmatch(r"\d+\.\d+\.\d+\.\d+/\d+", word)]
    taken += [ipaddress.ip_network(line.split()[0]) for line in _ip("-4", "route", "show").splitlines()
              if re.match(r"\d+\.\d+\.\d+\.\d+(/\d+)?\s", line)]
    chooser = random.SystemRandom()
    for _ in range(200):
        subnet = ipaddress.IPv4Network(f"10.{chooser.randrange(200, 255)}.{chooser.randrange(256)}.0/24")
        if not any(subnet.overlaps(other) for other in taken):
            return subnet
    raise StackError("no free 10.x.y.0/24 subnet for the hosts: the root namespace's routes cover them all")


def _pids_in(namespace: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False)
    return [int(word) for word in done.stdout.split() if word.isdigit()]


def _remove_namespace(namespace: str) -> None:
    for pid in _pids_in(namespace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)


def _remove_link(name: str) -> None:
    subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


def _owner(name: str) -> int | None:
    found = _OWNER.match(name)
    return int(found.group(1), 16) if found else None


def remove_leftovers() -> list[str]:
    """Remove the namespaces and links of runs whose process is gone (an aborted run); their names."""
    removed = []
    namespaces = [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]
    for namespace in namespaces:
        owner = _owner(namespace)
        if owner is not None and owner != os.getpid() and not pid_alive(owner):
            _remove_namespace(namespace)
            removed.append(namespace)
    links = re.findall(r"^\d+: ([^:@\s]+)", _ip("-o", "link", "show"), flags=re.MULTILINE)
    for link in links:
        owner = _owner(link)
        if owner is not None and owner != os.getpid() and not pid_alive(owner):
            _remove_link(link)
            removed.append(link)
    if removed:
        log.info("removed leftovers of aborted runs: %s", ", ".join(removed))
    return removed
