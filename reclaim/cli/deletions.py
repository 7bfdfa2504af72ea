"""``reclaim deletions inflight``: the deletions not yet final (the worker group's lag)."""

from __future__ import annotations

import argparse

from reclaim.cli.common import Common, print_json
from reclaim.services import preflight
from reclaim.settings import Settings


def cmd_deletions(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.consumers.lag import estimated_inflight
    from reclaim.services.runtime import topic_names

    address, inputs = preflight.bootstrap(settings), topic_names(settings).deletion_inputs
    preflight.require_topics(address, inputs)  # a lag of 0 on topics that do not exist would be a false all-clear
    count = estimated_inflight(address, settings.group_id, inputs)
    if args.json:
        print_json({"group": settings.group_id, "estimated_inflight": count})
    else:
        print(count)
    return 0


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    deletions = sub.add_parser("deletions", help="inspect the deletion pipeline")
    deletions.add_argument("action", choices=["inflight"],
                           help="inflight: estimated deletions not yet final (the group's lag)")
    deletions.add_argument("--group-id", help="consumer group (default reclaim-deletion)")
    deletions.add_argument("--json", action="store_true", help="print the estimate as JSON")
    common(deletions)
    deletions.set_defaults(run=cmd_deletions)
