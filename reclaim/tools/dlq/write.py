"""``reclaim dlq replay`` and ``reclaim dlq purge``: the two commands that change something."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

from reclaim.cli.dlq import filter_flags, filters_of, now_ms, parsed, scan_dlq, whole
from reclaim.exits import ExitCode, UsageError
from reclaim.settings import Settings

_REPLAY = """\
Send dead letters back to the deletion topic (after fixing what made them fail), each once: a record
sent is remembered in the compacted topic <prefix>ledger-deletion.dlq-replayed (created by `reclaim
topics create`), shared by every operator, and not sent again by a later replay (one that dies between
a delivery and its memo sends that record once more; phase 2 finds it already gone). A replayed
record starts again at attempt 1 and names its DLQ coordinates in the header reclaim.replayed-from."""

_PURGE = """\
Drop dead letters for good with delete-records, which can only drop the oldest records of a partition:
with filters, each partition loses the longest run of records from its start that all match, and the
first record that does not match stays, with everything after it. --up-to P:O drops partition P up to
and including offset O. The plan is printed first; --yes (or an answer at the terminal) carries it out."""


def _rate(raw: str) -> float:
    try:
        rate = float(raw)
    except ValueError:
        raise UsageError(f"--rate: cannot read {raw!r} as records per second") from None
    if not (rate > 0 and math.isfinite(rate)):
        raise UsageError(f"--rate must be a positive number of records per second, got {raw}")
    return rate


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from reclaim.services.runtime import topic_names
    from reclaim.tools.dlq.render import console, counts_line, letters_table, print_json
    from reclaim.tools.dlq.replay import Pacer, ReplayTopics, read_replayed, replay
    from reclaim.tools.dlq.selection import select
    from reclaim.tools.topics import dlq_replayed_topic

    filters, limit, rate = filters_of(args), whole("--limit", args.limit, 1), _rate(args.rate)
    names = topic_names(settings)
    topics = ReplayTopics(names.deletion, dlq_replayed_topic(names))
    address, found = scan_dlq(settings, filters, topics.deletion, topics.replayed)
    now = now_ms()
    chosen = select(found.letters, filters, now, newest_first=False)
    replayed = read_replayed(address, topics.replayed)
    fresh = [letter for letter in chosen.records if letter not in replayed]
    to_send = fresh if limit is None else fresh[:limit]
    skipped = len(chosen.records) - len(fresh)
    counts = {**chosen.counts(), "already_replayed": skipped, "to_send": len(to_send)}
    if args.dry_run:
        if args.json:
            print_json({"topic": found.topic, "dry_run": True, **counts,
                        "records": [letter.summary() for letter in to_send]})
            return ExitCode.OK
        if to_send:
            console().print(letters_table(to_send, now))
        print(f"would send {len(to_send)} record(s) to {topics.deletion} ({skipped} already replayed); "
              + counts_line(found.topic, chosen, newest_first=False))
        return ExitCode.OK
    sent = 0
    if to_send:
        columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=console(stderr=True)) as progress:
            task = progress.add_task("replay", total=len(to_send))
            sent = replay(address, topics, to_send, Pacer(rate), on_sent=lambda n: progress.advance(task, n))
    if args.json:
        print_json({"topic": found.topic, **counts, "sent": sent})
    else:
        print(f"sent {sent} record(s) to {topics.deletion} ({skipped} already replayed, skipped); "
              + counts_line(found.topic, chosen, newest_first=False))
    return ExitCode.OK


def cmd_purge(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.tools.dlq.purge import plan_filtered, plan_json, plan_up_to, purge
    from reclaim.tools.dlq.render import print_json
    from reclaim.tools.dlq.selection import parse_coordinates

    filters = filters_of(args)
    up_to = parsed("--up-to", args.up_to, parse_coordinates)
    if up_to is not None and (filters.active or args.all):
        raise UsageError("--up-to drops one partition's oldest records: give it without filters or --all")
    if args.all and filters.active:
        raise UsageError("--all drops every record: give it without filters (with them, only matching records go)")
    if up_to is None and not filters.active and not args.all:
        raise UsageError("purge needs filters, --up-to PARTITION:OFFSET, or --all to drop every record")
    address, found = scan_dlq(settings, filters)
    if up_to is not None:
        try:
            plans = plan_up_to(found.letters, found.watermarks, *up_to)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    else:
        plans = plan_filtered(found.letters, found.watermarks, filters, now_ms())
    dropping = sum(plan.dropped for plan in plans)
    if args.json:
        print_json({**plan_json(found.topic, plans), "dry_run": bool(args.dry_run)})
    else:
        for plan in plans:
            print(plan.describe())
    if not dropping or args.dry_run:
        if not args.json:
            print("nothing to purge" if not dropping else f"dry run: {dropping} record(s) would be dropped")
        return ExitCode.OK
    if not args.yes and not confirmed(dropping, found.topic):
        print("purge cancelled: nothing dropped", file=sys.stderr)
        return ExitCode.OK
    starts = purge(address, found.topic, plans)
    for partition, start in sorted(starts.items()):
        print(f"purged partition {partition} of {found.topic}: it now starts at offset {start}",
              file=sys.stderr if args.json else sys.stdout)
    return ExitCode.OK


def confirmed(dropping: int, topic: str) -> bool:
    """The operator's answer at the terminal; without one, a usage line asking for ``--yes``.

    The question goes to stderr, so it is seen when stdout is a file (``--json > plan.json``) and
    never lands in it; end of input (Ctrl-D) is no.
    """
    if not sys.stdin.isatty():
        raise UsageError(f"purge drops {dropping} record(s) from {topic} for good: confirm with --yes "
                         "(there is no terminal to ask)")
    print(f"drop {dropping} record(s) from {topic} for good? [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if not answer:
        print(file=sys.stderr)
    return answer.strip().lower() in {"y", "yes"}


def register_replay_purge(actions: argparse._SubParsersAction,  # type: ignore[type-arg]
                          common: Callable[[argparse.ArgumentParser], None]) -> None:
    """The ``replay`` and ``purge`` parsers, under ``reclaim dlq``."""
    from reclaim.tools.dlq.replay import DEFAULT_RATE

    replaying = actions.add_parser("replay", help="send dead letters back to the deletion topic, each once",
                                   description=_REPLAY)
    filter_flags(replaying)
    replaying.add_argument("--limit", metavar="N", help="send at most N records (at least 1)")
    replaying.add_argument("--rate", default=str(DEFAULT_RATE), metavar="N",
                           help=f"records per second (default {DEFAULT_RATE})")
    replaying.add_argument("--dry-run", action="store_true", help="show what would be sent; send nothing")
    replaying.add_argument("--json", action="store_true", help="print the counts (and, dry, the records) as JSON")
    common(replaying)
    replaying.set_defaults(run=cmd_replay)

    purging = actions.add_parser("purge", help="drop dead letters for good (the oldest of each partition)",
                                 description=_PURGE)
    filter_flags(purging)
    purging.add_argument("--up-to", metavar="PARTITION:OFFSET",
                         help="drop this partition's records up to and including OFFSET")
    purging.add_argument("--all", action="store_true", help="drop every record")
    purging.add_argument("--yes", action="store_true", help="carry out the plan without asking")
    purging.add_argument("--dry-run", action="store_true", help="print the plan; drop nothing")
    purging.add_argument("--json", action="store_true", help="print the plan as JSON")
    common(purging)
    purging.set_defaults(run=cmd_purge)
