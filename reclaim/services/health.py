"""Dependency health as Prometheus gauges: ``reclaim_dependency_up{dependency}`` kept current by bounded probes.

A process names its dependencies as :class:`Probe` values (a name and a check that raises when the
dependency does not answer); a :class:`HealthMonitor` runs every check on a daemon thread of its own,
waits at most ``timeout_s`` for them, sets the gauge to 1 or 0 and logs a change of state once (down
with the reason, up again), never once per probe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.admin import AdminClient
from prometheus_client import Gauge

from reclaim.producers.config import kafka_config, quiet_logger
from reclaim.services import preflight, runtime
from reclaim.settings import Settings
from reclaim.storage.sql_store import SQLMetadataStore

log = logging.getLogger(__name__)

DEPENDENCY_UP = Gauge("reclaim_dependency_up", "1 when the dependency answered its last probe in time, else 0",
                      ["dependency"])

PROBE_INTERVAL_S = 15.0
PROBE_TIMEOUT_S = 5.0
#: A mark id no mark ever has: the metadata store's probe is one keyed read that finds nothing.
PROBE_MARK_ID = "reclaim-health-probe"

_QUIET = quiet_logger("health")


@dataclass(frozen=True)
class Probe:
    """A dependency's name (the gauge's label value) and a check that raises when it does not answer."""

    dependency: str
    check: Callable[[], object]


@dataclass(frozen=True)
class Status:
    """What one probe found: up, or down with a one-line reason."""

    up: bool
    reason: str = ""


def state_change(previous: Status | None, now: Status) -> str | None:
    """The log line a new status deserves, or None: a dependency is logged when it goes down (or is down
    at the first probe) and when it comes back, not on every probe."""
    if previous is None:
        return None if now.up else f"down: {now.reason}"
    if previous.up == now.up:
        return None
    return "up again" if now.up else f"down: {now.reason}"


@dataclass
class _Attempt:
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class HealthMonitor:
    """Probes every dependency each ``interval_s``; each probe is bounded by ``timeout_s``.

    A check that does not return in time is counted down and is not started again until it has
    returned, so a hung dependency costs one thread, not one per round.
    """

    def __init__(self, probes: Sequence[Probe], interval_s: float = PROBE_INTERVAL_S,
                 timeout_s: float = PROBE_TIMEOUT_S, gauge: Gauge = DEPENDENCY_UP) -> None:
        names = [p.dependency for p in probes]
        if len(set(names)) != len(names):
            raise ValueError(f"dependency names must be unique, got {names}")
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError(f"interval_s and timeout_s must be > 0, got {interval_s} and {timeout_s}")
        self.probes = tuple(probes)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._gauge = gauge
        self._running: dict[str, _Attempt] = {}
        self.statuses: dict[str, Status] = {}
        for name in names:
            gauge.labels(name).set(0)  # unknown until the first probe answers

    def probe_once(self) -> Mapping[str, Status]:
        """Run every probe once (at most ``timeout_s`` in all), set the gauges, log changes; the statuses."""
        attempts = {p.dependency: self._running.get(p.dependency) or self._start(p) for p in self.probes}
        deadline = time.monotonic() + self.timeout_s
        for name, attempt in attempts.items():
            answered = attempt.done.wait(max(0.0, deadline - time.monotonic()))
            if answered:
                self._running.pop(name, None)
                status = Status(False, attempt.error) if attempt.error is not None else Status(True)
            else:
                self._running[name] = attempt
                status = Status(False, f"no answer within {self.timeout_s:g} s")
            self._record(name, status)
        return dict(self.statuses)

    def run(self, stop: threading.Event) -> None:
        """Probe now and then every ``interval_s`` until ``stop`` is set."""
        while not stop.is_set():
            self.probe_once()
            stop.wait(self.interval_s)

    def start(self, stop: threading.Event) -> threading.Thread:
        """:meth:`run` on a daemon thread."""
        thread = threading.Thread(target=self.run, args=(stop,), name="health-probes", daemon=True)
        thread.start()
        return thread

    def _start(self, probe: Probe) -> _Attempt:
        attempt = _Attempt()

        def check() -> None:
            try:
                probe.check()
            except Exception as exc:  # noqa: BLE001 - any failure of a check means "down", with its reason
                attempt.error = _one_line(exc)
            finally:
                attempt.done.set()

        threading.Thread(target=check, name=f"probe-{probe.dependency}", daemon=True).start()
        return attempt

    def _record(self, name: str, status: Status) -> None:
        self._gauge.labels(name).set(1 if status.up else 0)
        change = state_change(self.statuses.get(name), status)
        self.statuses[name] = status
        if change is not None:
            (log.info if status.up else log.warning)("dependency %s %s", name, change)


class BrokerProbe:
    """The broker answers a metadata request; one admin client for the probe's life, its events kept
    out of the log (the monitor logs the change of state)."""

    def __init__(self, bootstrap: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._admin: AdminClient | None = None

    def __call__(self) -> None:
        if self._admin is None:
            config: dict[str, Any] = kafka_config(self.bootstrap, "admin")
            config.update({"logger": _QUIET, "error_cb": lambda error: None})
            self._admin = AdminClient(config)
        self._admin.list_topics(timeout=self.timeout_s)


class StoreProbe:
    """The metadata store answers a keyed read; opened on first use (never created), reopened after a failure."""

    def __init__(self, open_store: Callable[[], SQLMetadataStore]) -> None:
        self._open = open_store
        self._store: SQLMetadataStore | None = None

    def __call__(self) -> None:
        if self._store is None:
            self._store = self._open()
        try:
            self._store.get_mark(PROBE_MARK_ID)
        except Exception:
            store, self._store = self._store, None
            store.close()
            raise


def worker_probes(settings: Settings) -> tuple[list[Probe], list[str]]:
    """A worker's probes — the broker, the metadata store, every configured storage binding — and the
    bindings' names. The probes use clients of their own, built from ``settings``."""
    bindings = runtime.storage_bindings(settings)
    probes = [Probe("broker", BrokerProbe(preflight.bootstrap(settings))),
              Probe("metadata_store", StoreProbe(lambda: runtime.metadata_store(settings, create=False)))]
    probes += [Probe(f"binding:{binding.name}", binding.check) for binding in bindings]
    return probes, bindings.names()
