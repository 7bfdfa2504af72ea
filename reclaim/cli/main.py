"""The ``reclaim`` command line: one settings object built from flags, environment and config file,
then a command; an expected failure ends in one line and a documented exit status (:mod:`reclaim.exits`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import NoReturn

from confluent_kafka import KafkaException

from reclaim import config_file
from reclaim.errors import ReclaimError
from reclaim.exits import EXIT_CODES_HELP, CommandError, ExitCode, UsageError
from reclaim.localstack import stack
from reclaim.localstack.procs import StackError
from reclaim.logs import configure_logging
from reclaim.services import client_security, preflight
from reclaim.settings import METADATA_URL_HELP, Settings, redact_password

Command = Callable[[argparse.Namespace, Settings], int]

ENV_HELP = f"""\
Every flag has an environment variable RECLAIM_<NAME> (e.g. RECLAIM_BOOTSTRAP, RECLAIM_STATE_DIR,
RECLAIM_TOPIC_PREFIX, RECLAIM_S3_ENDPOINT, RECLAIM_S3_BUCKET) and a key <name> in the TOML config file
(--config, RECLAIM_CONFIG; e.g. bootstrap = "host:9092", retry_delays = [10, 60, 600]).
Precedence: flag, then environment, then config file, then default. The global options (-v, -q,
--log-format, --config) go before or after the command.
Kafka client properties (librdkafka's, for every client): the file's [kafka] table or RECLAIM_KAFKA_<PROP>,
upper case with _ for . and __ for _ (RECLAIM_KAFKA_SECURITY_PROTOCOL=SASL_SSL); a secret from a file
with <name>.file (RECLAIM_KAFKA_SASL_PASSWORD_FILE). S3 without RECLAIM_S3_ACCESS_KEY uses boto3's
credential chain (AWS_PROFILE, AWS_ACCESS_KEY_ID, web identity, instance role); RECLAIM_S3_ENDPOINT=aws
is AWS S3 itself. `reclaim config show` masks every secret.

{EXIT_CODES_HELP}
"""


class _Parser(argparse.ArgumentParser):
    """argparse with reclaim's exit status for bad usage (64) instead of 2, which means "could not run"."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message}\n")


def _globals(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The options every command takes; on a command they only override what was given before it."""
    default = None if top else argparse.SUPPRESS
    parser.add_argument("-v", "--verbose", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="log at debug level")
    parser.add_argument("-q", "--quiet", action="store_true", default=False if top else argparse.SUPPRESS,
                        help="log warnings and errors only")
    parser.add_argument("--log-format", choices=["text", "json"], default=default,
                        help="log lines as text (default) or one JSON object each (RECLAIM_LOG_FORMAT)")
    parser.add_argument("--config", type=Path, default=default, metavar="FILE",
                        help="TOML config file with the same keys as the environment (RECLAIM_CONFIG)")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, help="local stack data and logs (default .reclaim)")
    parser.add_argument("--cache-dir", type=Path, help="downloaded Kafka jars (default ~/.cache/reclaim)")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    parser.add_argument("--topic-prefix", help="prefix of every topic name (default 'reclaim.')")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL, or 'aws' for AWS S3 itself (default: the local "
                        "stack's endpoint)")
    parser.add_argument("--s3-bucket", help="tier-2 bucket (default reclaim-tier2)")
    _globals(parser, top=False)


def _version() -> str:
    try:
        return version("reclaim")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2, default=str))


def cmd_local(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "up":
        state = stack.up(settings, secure=args.secure)
        print(f"kafka  bootstrap={state.bootstrap} pid={state.kafka_pid}"
              + (" SASL_SSL (SCRAM-SHA-512), ACLs enforced" if state.kafka_secure else
                 " PLAINTEXT: no authentication, no ACLs (`reclaim local up --secure` for SASL_SSL)"))
        if state.kafka_secure:
            ca, admin, config = stack.secure_files(settings.state_dir)
            print(f"       CA certificate: {ca}")
            print(f"       the admin (a super user), password included, mode 0600: librdkafka properties {admin}, "
                  f"reclaim config file {config} (reclaim --config {config} ...)")
        print(f"s3     endpoint={state.s3_url} bucket={state.s3_bucket} pid={state.s3_pid}")
    elif args.action == "down":
        stack.down(settings)
        print("local stack stopped")
    else:
        report = stack.status(settings)
        if args.json:
            _print_json(report)
        else:
            for part, facts in report.items():
                health = "healthy" if facts["healthy"] else "NOT HEALTHY"
                details = " ".join(f"{key}={value}" for key, value in facts.items() if key != "healthy")
                print(f"{part:6} {health:12} {details}")
        return ExitCode.OK if all(part["healthy"] for part in report.values()) else ExitCode.UNHEALTHY
    return 0


def cmd_topics(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from reclaim.tools.topics import admin_client, create_topics, describe_topics, mismatches, topic_specs

    admin = admin_client(preflight.broker(settings))
    specs = topic_specs(settings)
    if args.action == "create":
        outcomes = create_topics(admin, specs, settings.replication_factor)
    rows = describe_topics(admin, specs)
    differ = mismatches(specs, rows)
    if args.json:
        if args.action == "create":
            rows = [{**row, "outcome": outcomes.get(str(row["topic"]))} for row in rows]
        _print_json([{**row, "mismatch": differ.get(str(row["topic"]))} for row in rows])
    elif args.action == "create":
        for topic, outcome in outcomes.items():
            print(f"{outcome:8} {topic}" + (f"  MISMATCH: {differ[topic]}" if topic in differ else ""))
    else:
        table = Table("topic", "partitions", "cleanup.policy", "retention.ms", "mismatch", box=None)
        for row in rows:
            if not row["exists"]:
                table.add_row(str(row["topic"]), "(missing)", "", "", "")
                continue
            table.add_row(str(row["topic"]), str(row["partitions"]), str(row["cleanup.policy"]),
                          str(row["retention.ms"]), differ.get(str(row["topic"]), ""))
        Console(width=200).print(table)
    for topic, problem in differ.items():
        print(f"reclaim: topic {topic} differs from its configuration: {problem} (an existing topic is never "
              "changed by reclaim: alter or recreate it)", file=sys.stderr)
    return ExitCode.FINDINGS if differ else ExitCode.OK


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.services.worker import run_worker

    return run_worker(settings, metrics_addr=args.metrics_addr)


def cmd_deletions(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.consumers.lag import estimated_inflight
    from reclaim.services.runtime import topic_names

    address, inputs = preflight.bootstrap(settings), topic_names(settings).deletion_inputs
    preflight.require_topics(address, inputs)  # a lag of 0 on topics that do not exist would be a false all-clear
    count = estimated_inflight(address, settings.group_id, inputs)
    if args.json:
        _print_json({"group": settings.group_id, "estimated_inflight": count})
    else:
        print(count)
    return 0


def cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    values = {name: (str(value) if isinstance(value, Path) else value) for name, value in asdict(settings).items()}
    for secret in ("s3_secret_key", "s3_session_token", "schema_registry_basic_auth"):
        if values[secret]:
            values[secret] = "********"
    for url in ("metadata_url", "schema_registry_url"):
        if values[url]:
            values[url] = redact_password(values[url])
    kafka = client_security.shown_kafka_properties()
    if args.json:
        _print_json({**values, "kafka": kafka})
    else:
        for name, value in values.items():
            shown = ",".join(map(str, value)) if isinstance(value, tuple | list) else value
            print(f"{name} = {shown}")
        for name, value in kafka.items():
            print(f"kafka.{name} = {value}")
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.demo.main import run_demo

    return int(run_demo(settings, keep_stack=args.keep_stack))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="reclaim", description="Safe deletion and retention for tiered stream storage.",
        epilog=ENV_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"reclaim {_version()}")
    _globals(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    local = sub.add_parser("local", help="start, stop or inspect the local Kafka broker and S3 endpoint")
    local.add_argument("action", choices=["up", "down", "status"])
    local.add_argument("--json", action="store_true", help="status: print the report as JSON")
    local.add_argument("--secure", action="store_true",
                       help="up: run the broker with SASL_SSL (SCRAM-SHA-512), a CA of its own and ACLs enforced; "
                            "the default stack is PLAINTEXT")
    _common(local)
    local.set_defaults(run=cmd_local)

    topics = sub.add_parser("topics", help="create or describe reclaim's topics (idempotent)")
    topics.add_argument("action", choices=["create", "describe"])
    topics.add_argument("--partitions", type=int, help="partitions per topic (default 4)")
    topics.add_argument("--json", action="store_true", help="print the topics as JSON")
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
    worker.add_argument("--metadata-url", help=METADATA_URL_HELP)
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
    deletions.add_argument("--json", action="store_true", help="print the estimate as JSON")
    _common(deletions)
    deletions.set_defaults(run=cmd_deletions)

    from reclaim.cli.dlq import register as register_dlq

    register_dlq(sub, _common)

    from reclaim.cli.audit import register as register_audit

    register_audit(sub, _common)

    from reclaim.cli.streams import register as register_streams

    register_streams(sub, _common)

    from reclaim.services.retention_job import register as register_retention_job

    register_retention_job(sub, _common)

    from reclaim.cli.acls import register as register_acls

    register_acls(sub, _common)

    from reclaim.cli.keys import register as register_keys

    register_keys(sub, _common)

    config = sub.add_parser("config", help="show the settings in effect (flags, environment, config file, defaults)")
    config.add_argument("action", choices=["show"])
    config.add_argument("--json", action="store_true", help="print the settings as JSON")
    _common(config)
    config.set_defaults(run=cmd_config)

    demo = sub.add_parser("demo", help="the end-to-end demo on the embedded default stack")
    demo.add_argument("--keep-stack", action="store_true", help="leave the local stack running afterwards")
    _common(demo)
    demo.set_defaults(run=cmd_demo)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings of this run: flags over ``RECLAIM_*`` variables over the config file over defaults."""
    names = ("state_dir", "cache_dir", "bootstrap", "topic_prefix", "s3_endpoint", "s3_bucket", "partitions",
             "group_id", "instance_id", "consumers", "batch_size", "poll_timeout_s", "delete_parallelism",
             "max_attempts", "mark_timeout_s", "commit_interval_ms", "metadata_path", "metadata_url", "fs_root",
             "fs_create_root", "metrics_port", "truncation_group_id", "record_every_s", "keyring")
    flags = {name: getattr(args, name, None) for name in names}
    if getattr(args, "retry_delays", None):
        flags["retry_delays"] = _retry_delays(args.retry_delays)
    try:
        return Settings.from_env(**flags)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _retry_delays(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--retry-delays: cannot read {text!r} as whole seconds, e.g. 10,60,600") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = args.config or (Path(os.environ["RECLAIM_CONFIG"]) if os.environ.get("RECLAIM_CONFIG") else None)
        if config is not None:
            config_file.apply(config)
        log_format = args.log_format or os.environ.get("RECLAIM_LOG_FORMAT") or "text"
        if log_format not in ("text", "json"):
            raise UsageError(f"RECLAIM_LOG_FORMAT must be text or json, got {log_format!r}")
        configure_logging(verbose=args.verbose, quiet=args.quiet, json_lines=log_format == "json")
        settings = settings_from(args)
        client_security.install_kafka_properties(settings)  # before any Kafka client is built
        client_security.registry_connection(settings)  # its secret file read, or one line now
        run: Command = args.run
        return run(args, settings)
    except KeyboardInterrupt:
        print("reclaim: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # The reader of our output went away (e.g. `| head`): nothing more to say, to nobody.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except CommandError as exc:
        return _fail(str(exc), exc.exit_code)
    except ValueError as exc:  # input that does not parse (a cut, a policy), raised where it is read
        return _fail(_one_line(exc), ExitCode.USAGE)
    except (StackError, ReclaimError, KafkaException, OSError) as exc:
        return _fail(_one_line(exc), ExitCode.UNAVAILABLE)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args:
        error = exc.args[0]
        return f"Kafka: {error.str() if hasattr(error, 'str') else error}"
    return " ".join(str(exc).split()) or type(exc).__name__


def _fail(message: str, code: int) -> int:
    print(f"reclaim: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
