"""The ``reclaim`` command line: one settings object built from flags, environment and config file,
then a command; an expected failure ends in one line and a documented exit status (:mod:`reclaim.exits`).

Each command lives in a module of its own under :mod:`reclaim.cli` with a ``register(sub, common)``
function; this module only registers them, in the order of :data:`COMMANDS`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from confluent_kafka import KafkaException

from reclaim import config_file
from reclaim.cli.common import Command, Parser, common_options, connection_options, global_options
from reclaim.errors import ReclaimError
from reclaim.exits import EXIT_CODES_HELP, CommandError, ExitCode, UsageError
from reclaim.extras import missing_extra
from reclaim.localstack.procs import StackError
from reclaim.logs import configure_logging
from reclaim.services import client_security
from reclaim.settings import Settings

#: The command modules under reclaim.cli, in the order ``reclaim --help`` lists them.
COMMANDS = ("local", "topics", "topic_poller", "topic_applier", "worker", "deletions", "dlq", "audit", "streams",
            "offload", "offloader", "truncation_applier", "retention_job", "acls", "keys", "config", "demo",
            "completion")

ENV_HELP = f"""\
Every flag has an environment variable RECLAIM_<NAME> (e.g. RECLAIM_BOOTSTRAP, RECLAIM_STATE_DIR,
RECLAIM_TOPIC_PREFIX, RECLAIM_S3_ENDPOINT, RECLAIM_S3_BUCKET) and a key <name> in the TOML config file
(--config, RECLAIM_CONFIG; e.g. bootstrap = "host:9092", retry_delays = [10, 60, 600]).
Precedence: flag, then environment, then config file, then default. The global options (-v, -q,
--log-format, --config) and the connection options (--bootstrap, --state-dir, ...) go before or after the
command and its verb: `reclaim --bootstrap host:9092 topics describe` is `reclaim topics describe
--bootstrap host:9092`. `reclaim` alone, or a command without its verb (`reclaim streams`), prints that help.
Kafka client properties (librdkafka's, for every client): the file's [kafka] table or RECLAIM_KAFKA_<PROP>,
upper case with _ for . and __ for _ (RECLAIM_KAFKA_SECURITY_PROTOCOL=SASL_SSL); a secret from a file
with <name>.file (RECLAIM_KAFKA_SASL_PASSWORD_FILE), and the S3 keys from files with
RECLAIM_S3_ACCESS_KEY_FILE, RECLAIM_S3_SECRET_KEY_FILE, RECLAIM_S3_SESSION_TOKEN_FILE. S3 without an access
key uses boto3's credential chain (AWS_PROFILE, AWS_ACCESS_KEY_ID, web identity, instance role);
RECLAIM_S3_ENDPOINT=aws is AWS S3 itself. `reclaim config show` masks every secret.

{EXIT_CODES_HELP}
"""





def _version() -> str:
    try:
        return version("reclaim")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="reclaim", description="Safe deletion and retention for tiered stream storage.",
        epilog=ENV_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"reclaim {_version()}")
    global_options(parser, top=True)
    connection_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        import_module(f"reclaim.cli.{command}").register(sub, common_options)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings of this run: flags over ``RECLAIM_*`` variables over the config file over defaults."""
    names = ("state_dir", "cache_dir", "bootstrap", "topic_prefix", "s3_endpoint", "s3_bucket", "partitions",
             "group_id", "instance_id", "assignment", "stall_after_s", "consumers", "processes", "batch_size",
             "poll_timeout_s", "delete_parallelism", "max_attempts", "mark_timeout_s", "commit_interval_ms",
             "metadata_path", "metadata_url", "fs_root", "fs_tier1_root",
             "fs_create_root", "metrics_port", "truncation_group_id", "record_every_s", "keyring",
             "offload_every_s", "offload_lease_s")
    flags = {name: getattr(args, name, None) for name in names}
    if getattr(args, "retry_delays", None):
        flags["retry_delays"] = _retry_delays(args.retry_delays)
    try:
        return Settings.from_env(spelled=spelled(args, flags), **flags)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def spelled(args: argparse.Namespace, flags: dict[str, object]) -> dict[str, str]:
    """How the user gave each setting a refusal may name: the flag given, else the config file's key for a
    variable the file set (the environment's own are named ``RECLAIM_<NAME>`` by the settings)."""
    given = {name: flag_of(name) for name, value in flags.items() if value is not None}
    file, applied = getattr(args, "config_applied", None) or (None, {})
    for variable in applied:
        name = variable.removeprefix("RECLAIM_").lower()
        given.setdefault(name, f"{name} (config file {file})")
    return given


def flag_of(name: str) -> str:
    """The flag of the setting ``name``: ``--metrics-port`` for ``metrics_port``."""
    return "--create-fs-root" if name == "fs_create_root" else f"--{name.replace('_', '-')}"


def _retry_delays(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--retry-delays: cannot read {text!r} as whole seconds, e.g. 10,60,600") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    reached: argparse.ArgumentParser = args.reached
    if unknown:  # told by the (sub-)command's parser, which names the command and its --help
        reached.error(f"unrecognized arguments: {' '.join(unknown)}")
    if getattr(args, "run", None) is None and getattr(args, "standalone", None) is None:
        reached.print_help()  # `reclaim`, `reclaim streams`: no command to run, so its help
        return ExitCode.OK
    try:
        code = _run(args)
        sys.stdout.flush()  # a reader gone away shows here, not as a traceback when the interpreter exits
        return code
    except KeyboardInterrupt:
        print("reclaim: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # The reader of our output went away (e.g. `| head`): nothing more to say, to nobody.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE


def _run(args: argparse.Namespace) -> int:
    if getattr(args, "standalone", None) is not None:  # a command that needs no settings (completion)
        code: int = args.standalone(args)
        return code
    try:
        config = args.config or (Path(os.environ["RECLAIM_CONFIG"]) if os.environ.get("RECLAIM_CONFIG") else None)
        if config is not None:
            # What the file set is kept for `config show --sources`, which names where each value came from.
            args.config_applied = (config, config_file.apply(config))
        log_format = args.log_format or os.environ.get("RECLAIM_LOG_FORMAT") or "text"
        if log_format not in ("text", "json"):
            raise UsageError(f"RECLAIM_LOG_FORMAT must be text or json, got {log_format!r}")
        configure_logging(verbose=args.verbose, quiet=args.quiet, json_lines=log_format == "json")
        settings = settings_from(args)
        client_security.install_kafka_properties(settings)  # before any Kafka client is built
        client_security.registry_connection(settings)  # its secret file read, or one line now
        run: Command = args.run
        return run(args, settings)
    except BrokenPipeError:
        raise  # an OSError, but no failure to report: main's exit 141
    except CommandError as exc:
        return _fail(str(exc), exc.exit_code)
    except ValueError as exc:  # input that does not parse (a cut, a policy), raised where it is read
        return _fail(_one_line(exc), ExitCode.USAGE)
    except ModuleNotFoundError as exc:  # an optional part whose extra is not installed: one line naming it
        missing = missing_extra(exc, f"reclaim {args.command}")
        if missing is None:
            raise
        return _fail(str(missing), ExitCode.UNAVAILABLE)
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
