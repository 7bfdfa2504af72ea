"""``reclaim audit``: tier-2 listed against the metadata store; ``--repair`` sends orphans through phase 1."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from reclaim.cli.common import duration, store_flags
from reclaim.durations import EXAMPLES, human
from reclaim.exits import ExitCode, Unavailable, UsageError
from reclaim.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from reclaim.storage.bindings import StorageBindings
    from reclaim.storage.sql_store import SQLMetadataStore
    from reclaim.tools.audit import AuditReport, OrphanRepair, Sample


def open_to_read(settings: Settings, stack: ExitStack) -> tuple[SQLMetadataStore, StorageBindings]:
    """The metadata store and the storage bindings of a command that only reads them (the audit, ``deletions
    stalled``), both closed with ``stack``: the store neither made nor migrated, and the root of a filesystem
    binding never made, whatever RECLAIM_FS_CREATE_ROOT says."""
    from reclaim.services import runtime

    settings = replace(settings, fs_create_root=False)
    store = runtime.metadata_store(settings, create=False)
    stack.callback(store.close)
    bindings = runtime.storage_bindings(settings)
    stack.callback(bindings.close)
    return store, bindings


#: Seconds of a ``--grace`` or ``--older-than``: a duration of 0 or more.
parse_grace = duration(0.0)


def cmd_audit(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.tools.audit import AuditHooks, audit, auditable

    if not args.spark:
        given = [flag for flag, value in (("--inventory", args.inventory), ("--executor-python", args.executor_python),
                                          ("--master", args.master != "local[*]")) if value]
        if given:
            raise UsageError(f"{', '.join(given)} only go(es) with --spark")
    if args.metrics_file is not None:
        metrics_target(args.metrics_file)
    with ExitStack() as stack:
        store, bindings = open_to_read(settings, stack)
        chosen = auditable(bindings)
        if args.spark:
            spark = stack.enter_context(_spark_session(settings, args))
        repair = stack.enter_context(_repair(settings, store, args)) if args.repair else None
        if args.spark:
            from reclaim.tools.audit_spark import SparkAuditSources, spark_audit

            work = stack.enter_context(tempfile.TemporaryDirectory(prefix="reclaim-audit-"))
            sources = SparkAuditSources(Path(work), settings.metadata_url, tuple(args.inventory))
            report = spark_audit(spark, store, chosen, bindings, sources=sources, grace_s=args.grace,
                                 limit=args.limit, hooks=AuditHooks(orphans=repair))
        else:
            listed, rows = stack.enter_context(_progress(args.progress or sys.stderr.isatty()))
            report = audit(store, chosen, bindings, grace_s=args.grace, limit=args.limit,
                           hooks=AuditHooks(listed=listed, rows=rows, orphans=repair))
    from reclaim.services.runtime import bindings_not_configured

    # A binding left out of the settings is no finding, but a clean report must say it was not audited.
    report.not_configured = bindings_not_configured(settings)
    if args.metrics_file is not None:
        from reclaim.storage.metrics import write_textfile

        write_textfile(args.metrics_file, {b.binding: b.orphans.count for b in report.bindings})
    if args.json:
        document = report.to_dict()
        if repair is not None:
            document["repair"] = repair.report.to_dict()
        print(json.dumps(document, indent=2))
    else:
        _print_report(report, repair)
    return ExitCode.OK if report.clean else ExitCode.FINDINGS


def metrics_target(path: Path, command: str = "audit") -> None:
    """Refuse, before anything is audited or repaired, a ``--metrics-file`` the ``command`` could not replace
    with a file at the end: one in no writable directory, or a path that is no regular file (a directory,
    or a device such as /dev/null, which the atomic replace would swap for a plain file)."""
    nothing = "nothing was audited" if command == "audit" else "nothing was checked"
    if path.exists() and not path.is_file():
        raise Unavailable(f"--metrics-file {path} is not a regular file (the {command} replaces it whole): name a "
                          f"file in node_exporter's textfile directory; {nothing}")
    directory = path.parent
    if not directory.is_dir():
        raise Unavailable(f"--metrics-file {path}: there is no directory {directory}; {nothing}")
    if not os.access(directory, os.W_OK):
        raise Unavailable(f"--metrics-file {path}: the directory {directory} is not writable; {nothing}")


@contextmanager
def _spark_session(settings: Settings, args: argparse.Namespace) -> Iterator[SparkSession]:
    """The Spark session of ``--spark`` (with the PostgreSQL JDBC driver when the store is PostgreSQL)."""
    from reclaim.extras import require

    require("spark", "reclaim audit --spark")
    from reclaim.retention.spark_output import spark_log_path
    from reclaim.retention.spark_session import build_spark_session
    from reclaim.tools.audit_spark import JDBC_DRIVER

    packages = [JDBC_DRIVER] if settings.metadata_url else []
    # Spark's JVM would print Ivy's lines and its own on this process's stdout and stderr: stdout is the
    # report's (--json), stderr the operator's.
    log_file = spark_log_path(settings.state_dir)
    print(f"reclaim: Spark's log: {log_file}", file=sys.stderr, flush=True)
    spark = build_spark_session("reclaim-audit", settings.cache_dir, master=args.master, packages=packages,
                                executor_python=args.executor_python, log_file=log_file)
    try:
        yield spark
    finally:
        spark.stop()


def _inventory(text: str) -> tuple[str, str]:
    binding, _, manifest = text.partition("=")
    if not binding or not manifest:
        raise argparse.ArgumentTypeError(f"expected BINDING=MANIFEST (e.g. s3-tier2=s3://inventory/.../"
                                         f"manifest.json), got {text!r}")
    return binding, manifest


@contextmanager
def _repair(settings: Settings, store: SQLMetadataStore, args: argparse.Namespace) -> Iterator[OrphanRepair]:
    """Phase 1 on an idempotent producer, the broker and the deletion topic proven first."""
    from reclaim.producers.producer import RecordProducer
    from reclaim.services import preflight, runtime
    from reclaim.tools.audit import OrphanRepair

    address = preflight.broker(settings)
    preflight.require_topics(address, [runtime.topic_names(settings).deletion])
    producer = RecordProducer(address, "idempotent-producer")
    try:
        service = runtime.deletion_service(settings, store, producer)
        on_sent = None if args.json else _print_sent
        yield OrphanRepair(service.prepare, limit=args.limit, on_sent=on_sent, store=store)
    finally:
        producer.close()


def _print_sent(binding: str, name: str) -> None:
    print(f"sent     {binding} {name}", flush=True)


Listed = Callable[[str, int], None] | None
Walked = Callable[[int], None] | None


@contextmanager
def _progress(enabled: bool) -> Iterator[tuple[Listed, Walked]]:
    """Progress on stderr while the listings and the row walk run: objects and rows counted so far."""
    if not enabled:
        yield None, None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), TextColumn("{task.completed:,.0f}"),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        tasks: dict[str, TaskID] = {}

        def advance(description: str, count: int) -> None:
            if description not in tasks:
                tasks[description] = progress.add_task(description, total=None)
            progress.advance(tasks[description], count)

        yield (lambda binding, count: advance(f"objects listed on {binding}", count),
               lambda count: advance("chunk rows checked", count))


def _print_report(report: AuditReport, repair: OrphanRepair | None) -> None:
    grace = human(report.grace_s)
    print(f"audited: {', '.join(b.binding for b in report.bindings) or 'no binding'}")
    for name, why in report.not_configured.items():
        print(f"{name}: not configured, not audited ({why})")
    for result in report.bindings:
        print(f"{result.binding}: {result.live} live, {result.pending} pending deletion, {result.orphans.count} "
              f"orphans, {result.missing.count} missing, {result.dangling.count} dangling; within the {grace} "
              f"grace: {result.recent} recent objects, {result.cleaning} rows in cleanup")
        print_names("orphan", result.orphans)
        print_names("missing", result.missing)
        print_names("dangling", result.dangling)
    for where, rows in report.unconfigured.items():
        print(f"{where}: not configured, {rows.count} chunk rows name it (dangling)")
        print_names("dangling", rows)
    totals = report.totals()
    print("total: " + ", ".join(f"{count} {name}" for name, count in totals.items()))
    if repair is not None:
        sent = repair.report
        print(f"repair: {sent.sent.count} orphans sent through phase 1, {sent.unattributed.count} left (no "
              f"readable reclaim ownership tags), {sent.failed.count} not confirmed by the broker")
        print_names("left", sent.unattributed)
        print_names("unsent", sent.failed)


def shown(name: str) -> str:
    """An object name as a report line shows it: quoted and escaped when it holds a newline or another
    unprintable character, so a name cannot split into lines that read as other findings."""
    return name if name.isprintable() else repr(name)


def print_names(label: str, sample: Sample) -> None:
    for name in sample.names:
        print(f"  {label:8} {shown(name)}")
    if sample.count > len(sample.names):
        print(f"  ... and {sample.count - len(sample.names)} more (--limit)")


def parse_limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"cannot read {text!r} as a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def register(sub: argparse._SubParsersAction, common: Callable[[argparse.ArgumentParser], None]) -> None:  # type: ignore[type-arg]
    audit = sub.add_parser(
        "audit", help="list tier-2 against the metadata store: live, pending deletion, orphans, missing, dangling",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Every configured binding is listed against the chunk rows, and every chunk row is checked\n"
                    "against its binding:\n"
                    "  orphan    an object no row claims, older than --grace (younger: 'recent', no finding)\n"
                    "  missing   an active row whose object is gone\n"
                    "  dangling  an inactive row whose object is gone and whose mark is older than --grace,\n"
                    "            or a row naming a binding (or bucket) that is not configured\n"
                    "Exit status: 0 clean; 1 findings; 2 a binding, the store, the --metrics-file or (--repair)\n"
                    "the broker could not be used, and nothing is reported. The audit creates and deletes\n"
                    "nothing; --repair publishes pending deletes for the orphans (phase 1), which the worker\n"
                    "deletes after its checks.")
    audit.add_argument("--limit", type=parse_limit, default=20, help="names listed per finding (default 20)")
    audit.add_argument("--grace", type=parse_grace, default=3600.0, metavar="DURATION",
                       help=f"how old an object with no row must be to count as an orphan: {EXAMPLES} "
                            "(default 1h)")
    audit.add_argument("--json", action="store_true", help="print one JSON document: per binding counts and "
                       "names, the unconfigured bindings' rows, the bindings not configured, totals (and what "
                       "--repair sent)")
    audit.add_argument("--repair", action="store_true",
                       help="send the orphans with reclaim ownership tags through phase 1 (needs the broker); "
                            "nothing is deleted here")
    audit.add_argument("--metrics-file", type=Path, metavar="PATH",
                       help="also write reclaim_audit_orphans{binding} and reclaim_audit_last_run_timestamp_seconds "
                            "to PATH (replaced atomically) for node_exporter's textfile collector")
    audit.add_argument("--progress", action="store_true", help="progress on stderr even when it is no terminal")
    audit.add_argument("--spark", action="store_true",
                       help="run the audit as a Spark job (the spark extra): listings split by prefix into tasks, "
                            "the chunk rows read over JDBC (PostgreSQL) or exported (SQLite), anti-joined on "
                            "Spark; same findings, report and exit status")
    audit.add_argument("--master", default="local[*]",
                       help="with --spark: Spark master URL, e.g. local[4], spark://host:7077, yarn (default "
                            "local[*]); a filesystem binding's root must be at the same path on the executors")
    audit.add_argument("--executor-python", help="with --spark on a cluster: the executors' Python (with pandas, "
                       "pyarrow, fastavro, boto3); reclaim itself is shipped to them")
    audit.add_argument("--inventory", type=_inventory, action="append", default=[], metavar="BINDING=MANIFEST",
                       help="with --spark: read BINDING's objects from an S3 Inventory report (its manifest.json, "
                            "s3:// or s3a:// or a local path; CSV or Parquet) instead of listing the bucket; "
                            "findings are still confirmed against the bucket")
    store_flags(audit)
    common(audit)
    audit.set_defaults(run=cmd_audit)
