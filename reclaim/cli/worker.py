"""``reclaim worker``: phase 2 as a process (:mod:`reclaim.services.worker`)."""

from __future__ import annotations

import argparse

from reclaim.cli.common import Common, duration, metrics_flags, store_flags
from reclaim.logs import log_as_service
from reclaim.settings import Settings


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.services.worker import run_worker

    log_as_service()
    return run_worker(settings, metrics_addr=args.metrics_addr)


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    worker = sub.add_parser(
        "worker", help="run phase 2: delete pending chunks from the deletion topic and its retry tiers",
        description="Consume the deletion topic and its retry tiers as one consumer group, verify ownership, "
                    "delete chunks from tier-2 in batches, route failures to retry tiers and the DLQ. "
                    "Stops cleanly on SIGTERM/SIGINT: the batch in flight finishes and its offsets are committed. "
                    "With several processes (--processes) a supervisor passes the signal on to each of them.")
    common(worker)
    worker.add_argument("--group-id", help="consumer group (RECLAIM_GROUP_ID, default reclaim-deletion)")
    worker.add_argument("--instance-id", help="static group membership id (RECLAIM_INSTANCE_ID)")
    worker.add_argument("--assignment", choices=("eager", "cooperative-sticky"),
                        help="how the group shares partitions (RECLAIM_ASSIGNMENT, default eager): eager revokes every "
                        "partition at each rebalance, cooperative-sticky only those that move")
    worker.add_argument("--processes", type=int,
                        help="worker processes under one supervisor, one group (RECLAIM_PROCESSES; default: the "
                        "host's usable cores, at most the deletion topic's partitions / --consumers). 1 runs no "
                        "supervisor. A child that dies is restarted with backoff; --instance-id ID becomes ID-0, "
                        "ID-1, ...; --metrics-port serves the children's metrics summed")
    worker.add_argument("--consumers", type=int,
                        help="consumer threads in each worker process, one group (RECLAIM_CONSUMERS, default 1)")
    worker.add_argument("--batch-size", type=int, help="records per polled batch (RECLAIM_BATCH_SIZE, default 1000)")
    worker.add_argument("--poll-timeout-s", type=duration(positive=True), metavar="DURATION",
                        help="poll timeout (RECLAIM_POLL_TIMEOUT_S, default 1s)")
    worker.add_argument("--delete-parallelism", type=int,
                        help="filesystem unlink threads (RECLAIM_DELETE_PARALLELISM, default 8)")
    worker.add_argument("--retry-delays", help="retry tier delays in seconds, e.g. 10,60,600 (RECLAIM_RETRY_DELAYS)")
    worker.add_argument("--max-attempts", type=int, help="attempts before the DLQ (RECLAIM_MAX_ATTEMPTS, default 10)")
    worker.add_argument("--mark-timeout-s", type=duration(positive=True), metavar="DURATION",
                        help="how long an uncommitted mark is waited for (RECLAIM_MARK_TIMEOUT_S, default 5m)")
    worker.add_argument("--stall-after-s", type=duration(positive=True), metavar="DURATION",
                        help="how long without a final offset, with lag and no retry tier held, before the alert "
                        "ReclaimDeletionNoProgress fires (RECLAIM_STALL_AFTER_S, default 10m; exported as "
                        "reclaim_deletion_stall_after_seconds)")
    worker.add_argument("--commit-interval-ms", type=int,
                        help="how often final offsets are committed (RECLAIM_COMMIT_INTERVAL_MS, default 1000)")
    store_flags(worker, "; it must exist (an unmounted volume is refused), see --create-fs-root")
    worker.add_argument("--create-fs-root", dest="fs_create_root", action="store_true", default=None,
                        help="create the filesystem tier-2 root when missing (a first start on a fresh volume; "
                        "env RECLAIM_FS_CREATE_ROOT)")
    metrics_flags(worker)
    worker.set_defaults(run=cmd_worker)
