"""One metrics endpoint for a supervised worker: the children's series summed, the supervisor's own beside them.

Each child runs prometheus-client in its multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``: every value in a
memory-mapped file of the child's pid); the supervisor serves :class:`HostCollector`, which reads them all
with the library's ``MultiProcessCollector``. Counters and histograms are summed over every child of this
run, the dead ones included, so a restart never takes a counter back. The gauges are the supervisor's: the
in-flight estimate and the dependency probes describe the group and the host, not a child, so the
supervisor computes them once and the children's copies of those families are left out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from reclaim.localstack.procs import pid_alive

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
DIR_PREFIX = "reclaim-worker-metrics-"

CHILDREN = Gauge("reclaim_worker_processes", "Worker processes running under the supervisor")
RESTARTS = Counter("reclaim_worker_restarts", "Worker processes the supervisor started again after they died")


class Endpoint(Collector):
    """What a worker's metrics port serves: the process's own registry, until a supervisor turns it to the
    host's :class:`HostCollector` (the port is taken before the worker knows whether it supervises)."""

    def __init__(self) -> None:
        self.source: Collector = REGISTRY
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def collect(self) -> Iterable[Metric]:
        return self.source.collect()


class HostCollector(Collector):
    """The supervisor's own families (``own``), then every other family of the children's files."""

    def __init__(self, path: Path, own: Sequence[Collector]) -> None:
        self._children = MultiProcessCollector(None, path=str(path))  # type: ignore[no-untyped-call]
        self._own = own

    def collect(self) -> Iterable[Metric]:
        owned: set[str] = set()
        for collector in self._own:
            for family in collector.collect():
                owned.add(family.name)
                yield family
        for family in self._children.collect():  # type: ignore[no-untyped-call]
            if family.name not in owned and not _per_process(family):
                yield family


def _per_process(family: Metric) -> bool:
    """A gauge of the library's default multiprocess mode (``all``): one series per pid, which no sum or
    maximum merges. A gauge a child sets for the host declares its mode (``livesum``, ``max``, ...); the
    others are there only because a module defining them was imported (the audit's, the supervisor's)."""
    return family.type == "gauge" and any("pid" in sample.labels for sample in family.samples)


def child_exited(path: Path, pid: int) -> None:
    """The library's bookkeeping for a dead child: its live-mode gauge files go (its counters stay)."""
    mark_process_dead(pid, str(path))  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def metrics_dir(parent: Path | None = None) -> Iterator[Path]:
    """A fresh, empty directory for this run's files, removed at the end: no file of an earlier run is ever
    summed. Directories that supervisors killed before their cleanup left behind are removed first."""
    root = Path(parent or tempfile.gettempdir())
    _remove_abandoned(root)
    path = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _remove_abandoned(root: Path) -> None:
    for path in root.glob(f"{DIR_PREFIX}*"):
        pid = path.name.removeprefix(DIR_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)) and _ours(path):
            shutil.rmtree(path, ignore_errors=True)
            log.info("removed the metrics files of a supervisor that is gone: %s", path)


def _ours(path: Path) -> bool:
    try:
        return path.is_dir() and path.stat().st_uid == os.getuid()
    except OSError:
        return False
