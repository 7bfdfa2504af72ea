"""Network-fault scenarios for the chaos suite: a broker behind toxiproxy and phases of toxics."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from devtools.toxiproxy import Proxy, Toxic, Toxiproxy
from reclaim.localstack.kafka_broker import BrokerPorts, start_broker
from reclaim.localstack.procs import free_port, stop_pid
from reclaim.producers.topics import TopicNames
from reclaim.settings import Settings
from reclaim.tools.topics import admin_client, create_topics, topic_specs
from tests.support.chaos import Backlog


class ProxiedBroker:
    """A Kafka broker of the tests' own whose client listener advertises a Toxiproxy proxy: a client that
    bootstraps there (the worker) reaches the broker only through the proxy, every connection of it.
    ``direct_bootstrap`` is a second listener for the test's own clients, which the faults do not touch."""

    def __init__(self, data_dir: Path, cache_dir: Path, toxi: Toxiproxy) -> None:
        client_port = free_port()
        self.proxy = toxi.create("kafka", f"127.0.0.1:{client_port}")
        self.ports = BrokerPorts(client=client_port, controller=free_port(), advertised=self.proxy.listen,
                                 direct=free_port())
        self.pid = start_broker(data_dir, cache_dir, self.ports).pid

    @property
    def proxied_bootstrap(self) -> str:
        return self.proxy.listen

    @property
    def direct_bootstrap(self) -> str:
        return self.ports.direct_bootstrap

    def topics(self, prefix: str) -> TopicNames:
        """reclaim's topics under ``prefix`` (retry tiers of 1, 2 and 4 s; two partitions each)."""
        settings = Settings(topic_prefix=prefix, retry_delays=(1, 2, 4), partitions=2)
        create_topics(admin_client(self.direct_bootstrap), topic_specs(settings))
        return TopicNames.for_prefix(prefix, settings.retry_delays)

    def stop(self) -> None:
        stop_pid(self.pid)


@contextmanager
def proxy_to(toxi: Toxiproxy, name: str, upstream: str) -> Iterator[Proxy]:
    """A proxy to ``upstream`` for the ``with`` block, deleted after it."""
    proxy = toxi.create(name, upstream)
    try:
        yield proxy
    finally:
        toxi.delete(proxy)


@dataclass(frozen=True)
class Phase:
    """Toxics on proxies for a while; ``draining`` when deletes must go on through them."""

    what: str
    toxics: tuple[tuple[Proxy, Toxic], ...]
    seconds: float
    draining: bool = False
    rest_s: float = 2.0
    """How long the network is left whole after the phase, before the next one."""


def on(proxies: Proxy | tuple[Proxy, ...], *toxics: Toxic) -> tuple[tuple[Proxy, Toxic], ...]:
    """Each of ``toxics`` on each of ``proxies``."""
    return tuple((proxy, toxic) for proxy in (proxies if isinstance(proxies, tuple) else (proxies,))
                 for toxic in toxics)


@dataclass(frozen=True)
class PhaseResult:
    phase: Phase
    marked: int
    deleted: int


def left(backlog: Backlog) -> int:
    """How many marked chunks are still on tier-2, from one listing (not a request per chunk)."""
    names = set(backlog.binding.iter_names())
    return sum(c.name in names for c in backlog.doomed)


def mark_more(backlog: Backlog, count: int) -> None:
    """Phase 1 for ``count`` more chunks of a new segment, through the test's own (unfaulted) clients."""
    segment = f"scope/stream/{1000 + len(backlog.doomed)}.#epoch.0"
    batch = backlog.pipe.write_chunks(backlog.binding, segment, count)
    backlog.pipe.service.mark(batch)
    backlog.doomed.extend(batch)


def run_phases(toxi: Toxiproxy, backlog: Backlog, worker: subprocess.Popen[bytes], log: Path,
               phases: list[Phase], feed: int = 10, feed_every_s: float = 1.0) -> list[PhaseResult]:
    """Apply each phase's toxics, the worker alive throughout, while ``feed`` more chunks are marked every
    ``feed_every_s``: every fault meets records arriving and records in hand. A draining phase must
    delete some."""
    results = []
    for phase in phases:
        before, marked = left(backlog), 0
        with ExitStack() as faults:
            for proxy, toxic in phase.toxics:
                faults.enter_context(toxi.faults(proxy, toxic))
            started = next_feed = time.monotonic()
            while time.monotonic() < started + phase.seconds:
                assert worker.poll() is None, f"the worker died during {phase.what}: {log.read_text()[-3000:]}"
                if time.monotonic() >= next_feed:
                    mark_more(backlog, feed)
                    marked += feed
                    next_feed += feed_every_s
                time.sleep(0.1)
        result = PhaseResult(phase, marked, before + marked - left(backlog))
        results.append(result)
        if phase.draining:
            assert result.deleted > 0, f"nothing deleted through {phase.what}: {log.read_text()[-3000:]}"
        alive_for(phase.rest_s, worker, log, f"the rest after {phase.what}")
    return results


def alive_for(seconds: float, worker: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert worker.poll() is None, f"the worker died during {what}: {log.read_text()[-3000:]}"
        time.sleep(0.2)


def described(results: list[PhaseResult]) -> str:
    """The faults as the chaos table shows them, in order, with what was deleted during each."""
    return "; ".join(f"{r.phase.what} {r.phase.seconds:g} s ({r.deleted} deleted)" for r in results)
