"""``reclaim deletions inflight | stalled``: the deletions not yet final (the worker group's lag), and the
chunks retired long ago whose objects are still there (their pending deletes lost on the way)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from reclaim.cli.common import (
    GROUP_EPILOG,
    Common,
    add_verb,
    add_verbs,
    duration,
    json_flag,
    print_json,
    store_flags,
)
from reclaim.exits import ExitCode
from reclaim.services import preflight
from reclaim.settings import Settings

if TYPE_CHECKING:
    from reclaim.storage.sql_store import SQLMetadataStore
    from reclaim.tools.stalled import Resend, StalledReport

DEFAULT_LIMIT = 20
#: How often ``inflight --wait`` reads the group's lag again.
WAIT_POLL_S = 1.0

_DESCRIPTION = """\
inflight  estimated deletions not yet final: the worker group's lag on the deletion topic and its tiers
stalled   chunks retired (handed to phase 2) longer than --older-than ago whose objects are still there
Exit status: 0 none found; 1 some found; 2 the store, a binding or the broker could not be used."""

_STALLED = """\
Chunks retired (handed to phase 2) longer than --older-than ago whose objects are still there: their
pending deletes were lost (dead-lettered and purged, acked as in use by a worker with a shorter mark
timeout than phase 1's, past the topic's retention). --resend publishes them again through phase 1
(needs the broker); the worker deletes them after its checks. Nothing is deleted here. Exit status: 0
none found; 1 some found; 2 the store, a binding or the broker could not be used."""


def cmd_inflight(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.consumers.lag import estimated_inflight
    from reclaim.services.runtime import topic_names

    address, inputs = preflight.bootstrap(settings), topic_names(settings).deletion_inputs
    preflight.require_topics(address, inputs)  # a lag of 0 on topics that do not exist would be a false all-clear
    deadline = time.monotonic() + (args.wait or 0.0)
    count = estimated_inflight(address, settings.group_id, inputs)
    while count and time.monotonic() < deadline:
        time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))
        count = estimated_inflight(address, settings.group_id, inputs)
    if args.json:
        print_json({"group": settings.group_id, "estimated_inflight": count})
    else:
        print(count)
    # Waited for and not reached: the deletions are still in flight, which a script must be able to tell.
    return ExitCode.FINDINGS if args.wait is not None and count else ExitCode.OK


def cmd_stalled(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.cli.audit import metrics_target, open_to_read
    from reclaim.tools.audit import auditable, probe
    from reclaim.tools.stalled import StalledReport, survey

    if args.metrics_file is not None:
        metrics_target(args.metrics_file, "deletions stalled check")
    with ExitStack() as stack:
        store, bindings = open_to_read(settings, stack)
        chosen = auditable(bindings)
        probe(chosen)
        report = StalledReport(args.older_than, args.limit)
        resend = stack.enter_context(_resend(settings, store, report)) if args.resend else None
        survey(store, {b.name: b for b in chosen}, report, resend=resend)
    if args.metrics_file is not None:
        from reclaim.storage.metrics import write_stalled_textfile

        counts = {b.name: 0 for b in chosen} | {name: found.count for name, found in report.found.items()}
        write_stalled_textfile(args.metrics_file, counts)
    if args.json:
        print_json(report.to_dict())
    else:
        _print(report, resent=args.resend)
    return ExitCode.FINDINGS if report.count else ExitCode.OK


@contextmanager
def _resend(settings: Settings, store: SQLMetadataStore, report: StalledReport) -> Iterator[Resend]:
    """Phase 1 on an idempotent producer, the broker and the deletion topic proven first."""
    from reclaim.producers.producer import RecordProducer
    from reclaim.services import runtime
    from reclaim.tools.stalled import Resend

    address = preflight.broker(settings)
    preflight.require_topics(address, [runtime.topic_names(settings).deletion])
    producer = RecordProducer(address, "idempotent-producer")
    try:
        yield Resend(runtime.deletion_service(settings, store, producer).prepare, report)
    finally:
        producer.close()


def _print(report: StalledReport, *, resent: bool) -> None:
    from reclaim.cli.audit import print_names
    from reclaim.durations import human

    for binding, sample in report.found.items():
        print(f"{binding}: {sample.count} chunks retired over {human(report.older_than_s)} ago, objects still there")
        print_names("stalled", sample)
    print(f"total: {report.count} stalled of {report.rows} chunk rows")
    if resent:
        print(f"resent: {report.resent.count} through phase 1, {report.failed.count} not confirmed by the broker")
        print_names("unsent", report.failed)


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    from reclaim.cli.audit import parse_grace, parse_limit
    from reclaim.durations import EXAMPLES
    from reclaim.tools.stalled import STALLED_AFTER_S

    deletions = sub.add_parser("deletions", help="inspect the deletion pipeline", description=_DESCRIPTION,
                               epilog=GROUP_EPILOG.format(group="deletions"),
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = add_verbs(deletions)
    json_flag(deletions)
    inflight = add_verb(verbs, "inflight", "estimated deletions not yet final (the group's lag)",
                        "Estimated deletions not yet final: the worker group's lag on the deletion topic and its "
                        "retry tiers. With --wait, reads it again each second until it is 0 or the time is up; "
                        "exit status 1 when deletions are still in flight then.",
                        ["reclaim deletions inflight", "reclaim deletions inflight --json",
                         "reclaim deletions inflight --wait 1m"])
    inflight.add_argument("--group-id", help="consumer group (default reclaim-deletion)")
    inflight.add_argument("--wait", type=duration(), metavar="DURATION",
                          help=f"wait up to DURATION for 0 deletions in flight: {EXAMPLES}; exit 1 if not reached")
    json_flag(inflight, "print the result as JSON")
    common(inflight)
    inflight.set_defaults(run=cmd_inflight)

    stalled = add_verb(verbs, "stalled", "retired chunks whose objects are still there long after",
                       _STALLED, ["reclaim deletions stalled", "reclaim deletions stalled --older-than 2d --json",
                                  "reclaim deletions stalled --resend"])
    json_flag(stalled, "print the result as JSON")
    stalled.add_argument("--older-than", type=parse_grace, default=STALLED_AFTER_S, metavar="DURATION",
                         help=f"how long ago a chunk must have been retired: {EXAMPLES} (default 1d)")
    stalled.add_argument("--limit", type=parse_limit, default=DEFAULT_LIMIT,
                         help=f"names listed per binding (default {DEFAULT_LIMIT})")
    stalled.add_argument("--resend", action="store_true",
                         help="publish their pending deletes again through phase 1 (needs the broker)")
    stalled.add_argument("--metrics-file", type=Path, metavar="PATH",
                         help="also write reclaim_stalled_chunks{binding} and "
                              "reclaim_stalled_last_run_timestamp_seconds to PATH (replaced atomically) for "
                              "node_exporter's textfile collector")
    store_flags(stalled)
    common(stalled)
    stalled.set_defaults(run=cmd_stalled)
