"""The ``reclaim`` command line: one settings object built from flags and environment, then a command."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ops import stack
from ops.procs import StackError
from ops.settings import Settings
from schemas.errors import ReclaimError

Command = Callable[[argparse.Namespace, Settings], int]

ENV_HELP = """\
Every flag has an environment variable RECLAIM_<NAME> (e.g. RECLAIM_BOOTSTRAP, RECLAIM_STATE_DIR,
RECLAIM_TOPIC_PREFIX, RECLAIM_S3_ENDPOINT, RECLAIM_S3_BUCKET); a flag wins over its variable.
"""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, help="local stack data and logs (default .reclaim)")
    parser.add_argument("--cache-dir", type=Path, help="downloaded Kafka jars (default ~/.cache/reclaim)")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    parser.add_argument("--topic-prefix", help="prefix of every topic name (default 'reclaim.')")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL (default: the local stack's endpoint)")
    parser.add_argument("--s3-bucket", help="tier-2 bucket (default reclaim-tier2)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2, default=str))


def cmd_local(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "up":
        state = stack.up(settings)
        print(f"kafka  bootstrap={state.bootstrap} pid={state.kafka_pid}")
        print(f"s3     endpoint={state.s3_url} bucket={state.s3_bucket} pid={state.s3_pid}")
    elif args.action == "down":
        stack.down(settings)
        print("local stack stopped")
    else:
        report = stack.status(settings)
        _print_json(report)
        return 0 if all(part["healthy"] for part in report.values()) else 3
    return 0


def cmd_topics(args: argparse.Namespace, settings: Settings) -> int:
    from ops.topics import admin_client, create_topics, describe_topics, topic_specs

    admin = admin_client(stack.require_bootstrap(settings))
    specs = topic_specs(settings)
    if args.action == "create":
        for topic, outcome in create_topics(admin, specs, settings.replication_factor).items():
            print(f"{outcome:8} {topic}")
    else:
        rows = describe_topics(admin, specs)
        print(f"{'topic':48} {'partitions':>10} {'cleanup.policy':>15} {'retention.ms':>14}")
        for row in rows:
            if not row["exists"]:
                print(f"{row['topic']:48} {'(missing)':>10}")
                continue
            print(f"{row['topic']!s:48} {row['partitions']!s:>10} {row['cleanup.policy']!s:>15} "
                  f"{row['retention.ms']!s:>14}")
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from ops.worker import run_worker

    return run_worker(settings, metrics_addr=args.metrics_addr)


def cmd_deletions(args: argparse.Namespace, settings: Settings) -> int:
    from consumers.lag import estimated_inflight
    from ops.runtime import topic_names

    count = estimated_inflight(stack.require_bootstrap(settings), settings.group_id,
                               topic_names(settings).deletion_inputs)
    print(count)
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from ops.demo import run_demo

    return int(run_demo(settings, keep_stack=args.keep_stack))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reclaim", description="Safe deletion and retention for tiered stream storage.",
        epilog=ENV_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    local = sub.add_parser("local", help="start, stop or inspect the local Kafka broker and S3 endpoint")
    local.add_argument("action", choices=["up", "down", "status"])
    _common(local)
    local.set_defaults(run=cmd_local)

    topics = sub.add_parser("topics", help="create or describe reclaim's topics (idempotent)")
    topics.add_argument("action", choices=["create", "describe"])
    topics.add_argument("--partitions", type=int, help="partitions per topic (default 4)")
    _common(topics)
    topics.set_defaults(run=cmd_topics)

    worker = sub.add_parser(
        "worker", help="run phase 2: delete pending chunks from the deletion topic and its retry tiers",
        description="Consume the deletion topic and its retry tiers as one consumer group, verify ownership, "
                    "delete chunks from tier-2 in batches, route failures to retry tiers and the DLQ. "
                    "Stops cleanly on SIGTERM/SIGINT: the batch in flight finishes and its offsets are committed.")
    _common(worker)
    worker.add_argument("--group-id", help="consumer group (RECLAIM_GROUP_ID, default reclaim-deletion)")
    worker.add_argument("--instance-id", help="static group membership id (RECLAIM_INSTANCE_ID)")
    worker.add_argument("--consumers", type=int,
                        help="consumer threads in this process, one group (RECLAIM_CONSUMERS, default 1)")
    worker.add_argument("--batch-size", type=int, help="records per polled batch (RECLAIM_BATCH_SIZE, default 1000)")
    worker.add_argument("--poll-timeout-s", type=float, help="poll timeout (RECLAIM_POLL_TIMEOUT_S, default 1.0)")
    worker.add_argument("--delete-parallelism", type=int,
                        help="filesystem unlink threads (RECLAIM_DELETE_PARALLELISM, default 8)")
    worker.add_argument("--retry-delays", help="retry tier delays in seconds, e.g. 10,60,600 (RECLAIM_RETRY_DELAYS)")
    worker.add_argument("--max-attempts", type=int, help="attempts before the DLQ (RECLAIM_MAX_ATTEMPTS, default 10)")
    worker.add_argument("--mark-timeout-s", type=float,
                        help="how long an uncommitted mark is waited for (RECLAIM_MARK_TIMEOUT_S, default 300)")
    worker.add_argument("--commit-interval-ms", type=int,
                        help="how often final offsets are committed (RECLAIM_COMMIT_INTERVAL_MS, default 1000)")
    worker.add_argument("--metadata-path", type=Path, help="SQLite metadata store (default <state-dir>/metadata.db)")
    worker.add_argument("--fs-root", type=Path, help="filesystem tier-2 root (default <state-dir>/tier2); it must "
                        "exist (an unmounted volume is refused), see --create-fs-root")
    worker.add_argument("--create-fs-root", dest="fs_create_root", action="store_true", default=None,
                        help="create the filesystem tier-2 root when missing (a first start on a fresh volume; "
                        "env RECLAIM_FS_CREATE_ROOT)")
    worker.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (RECLAIM_METRICS_PORT)")
    worker.add_argument("--metrics-addr", default="127.0.0.1", help="address for --metrics-port (default 127.0.0.1)")
    worker.set_defaults(run=cmd_worker)

    deletions = sub.add_parser("deletions", help="inspect the deletion pipeline")
    deletions.add_argument("action", choices=["inflight"],
                           help="inflight: estimated deletions not yet final (the group's lag)")
    deletions.add_argument("--group-id", help="consumer group (default reclaim-deletion)")
    _common(deletions)
    deletions.set_defaults(run=cmd_deletions)

    from ops.dlq_cli import register as register_dlq

    register_dlq(sub, _common)

    from ops.audit_cli import register as register_audit

    register_audit(sub, _common)

    from ops.streams_cli import register as register_streams

    register_streams(sub, _common)

    from ops.retention_job import register as register_retention_job

    register_retention_job(sub, _common)

    demo = sub.add_parser("demo", help="the end-to-end demo on the embedded default stack")
    demo.add_argument("--keep-stack", action="store_true", help="leave the local stack running afterwards")
    _common(demo)
    demo.set_defaults(run=cmd_demo)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    names = ("state_dir", "cache_dir", "bootstrap", "topic_prefix", "s3_endpoint", "s3_bucket", "partitions",
             "group_id", "instance_id", "consumers", "batch_size", "poll_timeout_s", "delete_parallelism",
             "max_attempts", "mark_timeout_s", "commit_interval_ms", "metadata_path", "fs_root", "fs_create_root",
             "metrics_port", "truncation_group_id", "record_every_s", "principal")
    flags = {name: getattr(args, name, None) for name in names}
    if getattr(args, "retry_delays", None):
        flags["retry_delays"] = tuple(int(part) for part in args.retry_delays.split(","))
    return Settings.from_env(**flags)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    try:
        settings = settings_from(args)
        run: Command = args.run
        return run(args, settings)
    except (StackError, ReclaimError, ValueError) as exc:
        print(f"reclaim: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
