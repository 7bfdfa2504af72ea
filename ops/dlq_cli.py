"""``reclaim dlq …``: the dead-letter topic for operators."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ops import stack
from ops.settings import Settings


def cmd_dlq(args: argparse.Namespace, settings: Settings) -> int:
    from ops.dlq import read_dlq
    from ops.runtime import codec, topic_names

    rows = read_dlq(stack.require_bootstrap(settings), topic_names(settings).dlq, codec(settings), limit=args.limit)
    count = 0
    for row in rows:
        count += 1
        print(f"{row.partition}@{row.offset} outcome={row.outcome} attempt={row.attempt} origin={row.origin} "
              f"chunk={row.chunk} error={row.error_class}: {row.error}")
    print(f"{count} dead-lettered record(s) shown", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction, common: Callable[[argparse.ArgumentParser], None]) -> None:  # type: ignore[type-arg]
    dlq = sub.add_parser("dlq", help="inspect the dead-letter topic")
    dlq.add_argument("action", choices=["list"])
    dlq.add_argument("--limit", type=int, default=100, help="records to show (default 100)")
    common(dlq)
    dlq.set_defaults(run=cmd_dlq)
