"""``reclaim truncation-applier``: the process of :mod:`reclaim.services.applier`."""

from __future__ import annotations

import argparse

from reclaim.cli.common import Common, duration, metrics_flags, store_flags
from reclaim.logs import log_as_service
from reclaim.services.applier import run_applier
from reclaim.settings import Settings


def cmd_applier(args: argparse.Namespace, settings: Settings) -> int:
    log_as_service()
    return run_applier(settings, metrics_addr=args.metrics_addr)


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    applier = sub.add_parser(
        "truncation-applier", help="apply truncation events to streams, and record retention cuts",
        description="Consume the truncation topic as a consumer group and truncate each stream at its event's "
                    "cut (duplicates and cuts behind the head are no-ops; offsets stored once the truncation is "
                    "durable). Every --record-every-s it also records each stream's tail cut and size onto the "
                    "stream-cuts topic: both are the controller's side of retention and need its store.")
    applier.add_argument("--record-every-s", type=duration(0.0), metavar="DURATION",
                         help="retention period of the recorder (RECLAIM_RECORD_EVERY_S, default 1m; 0: never)")
    applier.add_argument("--truncation-group-id", help="consumer group (default reclaim-truncation)")
    applier.add_argument("--poll-timeout-s", type=duration(positive=True), metavar="DURATION",
                         help="poll timeout (default 1s)")
    store_flags(applier)
    metrics_flags(applier)
    common(applier)
    applier.set_defaults(run=cmd_applier)
