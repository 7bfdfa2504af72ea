"""A supervised ``reclaim worker``: its children started with their settings, and the host's one metrics endpoint."""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import threading
from pathlib import Path

from reclaim.deletion import metrics
from reclaim.logs import JsonLines
from reclaim.services import health, host_metrics
from reclaim.services.supervisor import ChildSpec, Supervisor, child_settings, launch_child
from reclaim.services.worker import _watch
from reclaim.settings import Settings

log = logging.getLogger(__name__)


def run_supervised(settings: Settings, processes: int, stop: threading.Event,
                   endpoint: host_metrics.Endpoint | None = None) -> int:
    """Run ``processes`` worker processes of the group until ``stop``; 0 when each stopped cleanly. The
    ``endpoint`` the worker serves its metrics on, when it does, serves the host's from now on."""
    with host_metrics.metrics_dir() as path:
        supervisor = Supervisor(processes, stop, functools.partial(_launch, settings, processes, path),
                                on_exit=functools.partial(host_metrics.child_exited, path),
                                on_restart=host_metrics.RESTARTS.inc)
        if endpoint is not None:
            _serve(settings, endpoint, path, supervisor, stop)
        log.info("storage bindings checked; metadata store: %s; worker processes: %d of %d consumers each, group %s",
                 settings.metadata_shown, processes, settings.consumers, settings.group_id)
        try:
            return supervisor.run()
        finally:
            stop.set()  # the probes and the in-flight estimate end with the children


def _launch(settings: Settings, processes: int, path: Path, index: int) -> subprocess.Popen[bytes]:
    root = logging.getLogger()
    spec = ChildSpec(child_settings(settings, index, processes), index, root.level,
                     json_lines=any(isinstance(handler.formatter, JsonLines) for handler in root.handlers))
    return launch_child(spec, {**os.environ, host_metrics.MULTIPROC_ENV: str(path)})


def _serve(settings: Settings, endpoint: host_metrics.Endpoint, path: Path, supervisor: Supervisor,
           stop: threading.Event) -> None:
    """Serve the children's series with the supervisor's own: the in-flight estimate, the dependency probes
    (each computed once for the host), the no-progress alert's threshold, the children running and restarted."""
    probes, _ = health.worker_probes(settings)
    host_metrics.CHILDREN.set_function(supervisor.alive)
    metrics.STALL_AFTER.set(settings.stall_after_s)
    own = [metrics.INFLIGHT, health.DEPENDENCY_UP, metrics.STALL_AFTER, host_metrics.CHILDREN, host_metrics.RESTARTS]
    endpoint.source = host_metrics.HostCollector(path, own)
    _watch(settings, probes, stop)
