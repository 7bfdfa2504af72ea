"""``reclaim worker``: the phase-2 process, with clean shutdown on signals and optional metrics over HTTP."""

from __future__ import annotations

import logging
import os
import threading

from reclaim.consumers.deletion_worker import DeletionWorker, tune_interpreter
from reclaim.consumers.lag import estimated_inflight
from reclaim.deletion import metrics
from reclaim.exits import Unavailable
from reclaim.localstack.procs import exit_status, stop_on_signals
from reclaim.services import health, preflight, runtime
from reclaim.services.host_metrics import Endpoint
from reclaim.settings import Settings
from reclaim.storage import metrics as storage_metrics
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.sql_store import SQLMetadataStore

log = logging.getLogger(__name__)
INFLIGHT_REFRESH_S = 15.0


def _refresh_inflight(settings: Settings, stop: threading.Event) -> None:
    """Keep the estimated-inflight gauge current while the worker runs, from its start: the estimate
    ``reclaim deletions inflight`` prints (same function, group and topics)."""
    bootstrap = preflight.bootstrap(settings)
    topics = runtime.topic_names(settings).deletion_inputs
    while not stop.is_set():
        try:
            metrics.INFLIGHT.set(estimated_inflight(bootstrap, settings.group_id, topics))
        except Exception as exc:  # noqa: BLE001 - a failed estimate must never stop the worker
            log.warning("could not estimate in-flight deletions: %s", exc)
        stop.wait(INFLIGHT_REFRESH_S)


def _serve_metrics(settings: Settings, metrics_addr: str, port: int, stop: threading.Event) -> None:
    """Create the series a worker starts with (:func:`_start_series`), serve every metric, and keep the
    in-flight estimate and the dependency gauges current until ``stop``."""
    probes, binding_names = health.worker_probes(settings)
    _start_series(settings, binding_names)
    preflight.serve_metrics(port, metrics_addr)
    _watch(settings, probes, stop)


def _start_series(settings: Settings, binding_names: list[str]) -> None:
    """The series a worker serves from its start: the zero series of its topics and bindings, and the no-progress
    alert's threshold (``stall_after_s``)."""
    topics = runtime.topic_names(settings)
    metrics.initialise(topics.deletion_inputs, [topic for _, topic in topics.retries], binding_names)
    storage_metrics.initialise(binding_names)
    metrics.STALL_AFTER.set(settings.stall_after_s)


def _watch(settings: Settings, probes: list[health.Probe], stop: threading.Event) -> None:
    """Keep the in-flight estimate and the dependency gauges current until ``stop``."""
    threading.Thread(target=_refresh_inflight, args=(settings, stop), daemon=True).start()
    health.HealthMonitor(probes).start(stop)


def run_worker(settings: Settings, metrics_addr: str = "127.0.0.1") -> int:
    """Run phase 2 until SIGTERM (exit 0) or SIGINT (Ctrl-C, exit 130); the batch in flight finishes and its
    offsets are committed.

    With ``processes`` 1 this process is the worker; with more (or none given, and more fit the host) it
    checks the dependencies once and supervises that many worker processes (:mod:`reclaim.services.supervisor`).
    """
    preflight.bootstrap(settings)  # told where its broker is, or one line saying how to tell it, before anything
    stop = stop_on_signals("finishing the batch in flight, then stopping", log.info)
    tune_interpreter()
    if settings.processes == 1:
        if settings.metrics_port is not None:
            _serve_metrics(settings, metrics_addr, settings.metrics_port, stop)
        store, bindings = _checked_dependencies(settings)
        return exit_status(_run_one(settings, store, bindings, stop), stop)
    return exit_status(_run_sized(settings, metrics_addr, stop), stop)


def _run_sized(settings: Settings, metrics_addr: str, stop: threading.Event) -> int:
    """Check the dependencies, then run as one worker or supervise several, as the host and topic allow."""
    # The port is taken before the checks, as with one process; what it serves is known after them.
    endpoint = None
    if settings.metrics_port is not None:
        endpoint = Endpoint()
        preflight.serve_metrics(settings.metrics_port, metrics_addr, registry=endpoint.registry)
    store, bindings = _checked_dependencies(settings)
    try:
        processes = _explicit_processes(settings) if settings.processes else _default_processes(settings)
        if processes == 1 and endpoint is not None:
            probes, binding_names = health.worker_probes(settings)
            _start_series(settings, binding_names)
            _watch(settings, probes, stop)
    except BaseException:
        bindings.close()
        store.close()
        raise
    if processes == 1:
        return _run_one(settings, store, bindings, stop)
    bindings.close()
    store.close()
    from reclaim.services.supervised import run_supervised

    return run_supervised(settings, processes, stop, endpoint)


def run_child(settings: Settings, index: int, lifeline: int, stop: threading.Event) -> int:
    """Worker process ``index`` of a supervised worker: the supervisor checked the dependencies and serves the
    metrics (this process's go to prometheus-client's multiprocess files); ``lifeline`` is the file descriptor
    of the supervisor's pipe, whose end stops this process as SIGTERM does (``stop``)."""
    threading.Thread(target=_watch_lifeline, args=(lifeline, stop), name="lifeline", daemon=True).start()
    tune_interpreter()
    store = runtime.metadata_store(settings, create=False)
    bindings = runtime.storage_bindings(settings)
    if settings.metrics_port is not None:
        _start_series(settings, bindings.names())
    try:
        return _run_consumers(settings, store, bindings, stop)
    finally:
        bindings.close()
        store.close()


def _watch_lifeline(lifeline: int, stop: threading.Event) -> None:
    # os.read, not a file object's read: a daemon thread blocked inside a buffered reader holds its lock,
    # and the interpreter aborts at exit when it cannot take it.
    while os.read(lifeline, 4096):
        pass
    if not stop.is_set():
        log.warning("the supervisor is gone: finishing the batch in flight, then stopping")
        stop.set()


def _deletion_partitions(settings: Settings) -> tuple[str, int]:
    """The deletion topic and its partition count, as the broker reports them."""
    topic = runtime.topic_names(settings).deletion
    return topic, len(preflight.cluster_metadata(preflight.bootstrap(settings)).topics[topic].partitions)


def _explicit_processes(settings: Settings) -> int:
    """``--processes`` as given; a warning when the group would have more consumers than the deletion topic has
    partitions (those past that count wait idle for one: the operator may have meant fewer)."""
    assert settings.processes is not None
    topic, partitions = _deletion_partitions(settings)
    members = settings.processes * settings.consumers
    if members > partitions:
        log.warning("processes: %d x %d consumer(s) = %d consumers for the %d partition(s) of %s: %d will be "
                    "assigned none of them (leave --processes out for a count that fits)",
                    settings.processes, settings.consumers, members, partitions, topic, members - partitions)
    return settings.processes


def _default_processes(settings: Settings) -> int:
    """Processes for this host: :func:`~reclaim.services.supervisor.default_processes` of its usable cores and
    the deletion topic's partitions, as the broker reports them."""
    from reclaim.services.supervisor import default_processes, host_cores

    topic, partitions = _deletion_partitions(settings)
    cores = host_cores()
    processes = default_processes(cores, partitions, settings.consumers)
    log.info("processes: %d (usable cores: %d; partitions of %s: %d; consumers a process: %d)", processes, cores,
             topic, partitions, settings.consumers)
    return processes


def _run_one(settings: Settings, store: SQLMetadataStore, bindings: StorageBindings, stop: threading.Event) -> int:
    log.info("storage bindings: %s; metadata store: %s; consumers: %d", ", ".join(bindings.names()),
             settings.metadata_shown, settings.consumers)
    try:
        return _run_consumers(settings, store, bindings, stop)
    finally:
        bindings.close()
        store.close()


def _checked_dependencies(settings: Settings) -> tuple[SQLMetadataStore, StorageBindings]:
    """Everything a worker needs, proven before it joins its group, each in bounded time: the metadata
    store (never created here), every configured binding and every binding the store's rows name, the
    broker and every topic the worker reads or writes. The first that fails stops it in one line."""
    store = runtime.metadata_store(settings, create=False)
    bindings = runtime.storage_bindings(settings)
    try:
        unconfigured = sorted(store.binding_names() - set(bindings.names()))
        if unconfigured:
            raise Unavailable(f"the metadata store has chunks on storage binding {unconfigured[0]!r}, which is not "
                              f"configured: {runtime.how_to_configure(unconfigured[0])} so its records are deleted, "
                              "not dead-lettered")
        bindings.check()
        topics = runtime.topic_names(settings)
        address = preflight.bootstrap(settings)
        preflight.require_topics(address, [*topics.deletion_inputs, topics.dlq])
        preflight.require_deleting(address, [*topics.deletion_inputs, topics.dlq])
    except BaseException:
        bindings.close()
        store.close()
        raise
    return store, bindings


def _run_consumers(settings: Settings, store: SQLMetadataStore, bindings: StorageBindings,
                   stop: threading.Event) -> int:
    """One consumer per thread, all in one group: while one waits on storage, another decodes and judges."""
    workers = [runtime.deletion_worker(settings, store, bindings, index=i) for i in range(settings.consumers)]
    failures: list[BaseException] = []

    def consume(worker: DeletionWorker) -> None:
        try:
            worker.run(stop)
        except BaseException as exc:  # a dead consumer stops the whole worker: nothing runs half-staffed
            failures.append(exc)
            stop.set()
            raise

    threads = [threading.Thread(target=consume, args=(w,), name=f"consumer-{i}") for i, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        # In short joins, so the main thread stays free to take SIGTERM/SIGINT; not stop.wait, which
        # returns at once once stop is set and spun a core while the consumers finished their batches.
        while thread.is_alive():
            thread.join(0.5)
    if failures:
        log.error("worker stopped after a consumer failed: %s", failures[0])
        return 1
    return 0
