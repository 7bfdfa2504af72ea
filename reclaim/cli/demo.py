"""``reclaim demo``: the end-to-end demo on the local stack (:mod:`reclaim.demo.main`)."""

from __future__ import annotations

import argparse

from reclaim.cli.common import Common
from reclaim.settings import Settings


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.demo.main import run_demo

    return int(run_demo(settings, keep_stack=args.keep_stack))


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    demo = sub.add_parser("demo", help="the end-to-end demo on the embedded default stack")
    demo.add_argument("--keep-stack", action="store_true", help="leave the local stack running afterwards")
    common(demo)
    demo.set_defaults(run=cmd_demo)
