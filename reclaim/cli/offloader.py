"""``reclaim offloader``: the offloader service (:mod:`reclaim.services.offloader`) as a process."""

from __future__ import annotations

import argparse
import logging
from contextlib import ExitStack
from pathlib import Path

from reclaim.cli.common import Common, duration, metrics_flags, store_flags
from reclaim.logs import log_as_service
from reclaim.settings import Settings

log = logging.getLogger(__name__)

_DESCRIPTION = """\
Offload streams by their offload policies (reclaim offload set-policy) until SIGTERM or SIGINT. Every
--offload-every-s each process heartbeats a lease in the metadata store and takes the streams rendezvous
hashing gives it among the live processes; for each it hands the copies of cancelled or expired offloads
and the hot copies past their release lag to phase 1, finishes the offloads a crash left, and offloads the
chunks its policy makes due. Run as many as you like, on any hosts that share the metadata store
(PostgreSQL) and the bindings: a process that stops lets go of its streams, one that dies loses them after
--offload-lease-s. A running worker deletes what is handed to phase 1."""


def cmd_offloader(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.localstack.procs import exit_status, stop_on_signals
    from reclaim.producers.producer import RecordProducer
    from reclaim.segments.offload_policy import StreamLeases, new_owner_id
    from reclaim.services import preflight, runtime
    from reclaim.services.offloader import OffloaderService

    log_as_service()
    address = preflight.broker(settings)
    preflight.require_topics(address, [runtime.topic_names(settings).deletion])
    stop = stop_on_signals("finishing the chunk in hand, then letting go of the leases", log.info)
    if settings.metrics_port is not None:
        preflight.serve_metrics(settings.metrics_port, args.metrics_addr)
    with ExitStack() as stack:
        store = runtime.metadata_store(settings, create=False)
        stack.callback(store.close)
        bindings = runtime.storage_bindings(settings, writer=True)
        stack.callback(bindings.close)
        producer = RecordProducer(address, "idempotent-producer")
        stack.callback(producer.close)
        leases = StreamLeases(store, args.owner or new_owner_id(), ttl_s=settings.offload_lease_s)
        service = OffloaderService(store, bindings, runtime.deletion_service(settings, store, producer), leases,
                                   default_release_after_s=settings.offload_release_after_s)
        log.info("offloader %s: a pass every %g s, leases of %g s, bindings %s", leases.owner,
                 settings.offload_every_s, settings.offload_lease_s, ", ".join(bindings.names()))
        service.run(stop, settings.offload_every_s)
    return exit_status(0, stop)


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    offloader = sub.add_parser("offloader", help="offload streams by their offload policies, as a service",
                               description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    offloader.add_argument("--offload-every-s", type=duration(positive=True), metavar="DURATION",
                           help="time between two passes (RECLAIM_OFFLOAD_EVERY_S, default 30s)")
    offloader.add_argument("--offload-lease-s", type=duration(positive=True), metavar="DURATION",
                           help="how long a stream's lease lasts unrenewed (RECLAIM_OFFLOAD_LEASE_S, default 90s; "
                                "longer than --offload-every-s)")
    offloader.add_argument("--owner", help="this process's name among the offloaders, unique among them (default "
                                           "host:pid:random)")
    offloader.add_argument("--fs-tier1-root", type=Path, metavar="PATH",
                           help="filesystem tier-1 root (RECLAIM_FS_TIER1_ROOT)")
    store_flags(offloader)
    metrics_flags(offloader)
    common(offloader)
    offloader.set_defaults(run=cmd_offloader)
