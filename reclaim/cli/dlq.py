"""``reclaim dlq list | show | stats | replay | purge``: the dead-letter topic for operators.

Each record is counted and shown once however often it was dead-lettered (see :mod:`reclaim.tools.dlq.selection`);
``replay`` and ``purge`` are described in :mod:`reclaim.tools.dlq.replay` and :mod:`reclaim.tools.dlq.purge`.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from reclaim.cli.common import GROUP_EPILOG, add_verbs, examples, json_flag
from reclaim.exits import ExitCode, UsageError
from reclaim.settings import Settings

if TYPE_CHECKING:
    from reclaim.tools.dlq.reader import DlqScan
    from reclaim.tools.dlq.records import DeadLetter, Placed
    from reclaim.tools.dlq.selection import Filters, Selection

T = TypeVar("T")
Held = TypeVar("Held")
L = TypeVar("L", bound="Placed")

_DESCRIPTION = """\
Read the dead-letter topic by assignment (no group joined, nothing committed). list, stats, replay and
purge take the same filters; a record dead-lettered more than once (by two consumer groups, say) is
listed, counted and replayed once, its other copies counted as duplicates. Ages are by when a record
was dead-lettered: 3600 (seconds), 90s, 10m, 2h, 3d, 1w."""


def now_ms() -> int:
    return int(time.time() * 1000)


def whole(flag: str, raw: str | None, minimum: int) -> int | None:
    """``raw`` as a whole number of at least ``minimum`` (None stays None); one usage line otherwise."""
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{flag}: cannot read {raw!r} as a whole number") from None
    if value < minimum:
        raise UsageError(f"{flag} must be at least {minimum}, got {value}")
    return value


def parsed(flag: str, raw: str | None, parse: Callable[[str], T]) -> T | None:
    """``parse(raw)`` (None stays None); its ValueError as one usage line naming ``flag``."""
    if raw is None:
        return None
    try:
        return parse(raw)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def text_filter(flag: str, raw: str | None) -> str | None:
    """``raw`` unless it is blank: an empty ``--reason`` would match every record (a purge of all), an
    empty ``--stream`` none; one usage line instead."""
    if raw is not None and not raw.strip():
        raise UsageError(f"{flag} must not be empty: give the text to match")
    return raw


def filters_of(args: argparse.Namespace) -> Filters:
    """The filters the flags ask for; one usage line for a bad value or filters no record can match."""
    from reclaim.tools.dlq.selection import Filters, parse_age

    chosen = Filters(stream=text_filter("--stream", args.stream), reason=text_filter("--outcome/--reason", args.reason),
                     error_class=text_filter("--error-class", args.error_class),
                     older_than_ms=parsed("--older-than", args.older_than, parse_age),
                     newer_than_ms=parsed("--newer-than", args.newer_than, parse_age),
                     min_attempt=whole("--attempt", args.attempt, 1),
                     partition=whole("--partition", args.partition, 0),
                     from_offset=whole("--from-offset", args.from_offset, 0),
                     to_offset=whole("--to-offset", args.to_offset, 0))
    if chosen.from_offset is not None and chosen.to_offset is not None and chosen.from_offset > chosen.to_offset:
        raise UsageError(f"--from-offset {chosen.from_offset} is after --to-offset {chosen.to_offset}: "
                         "no record is in that range")
    if (chosen.newer_than_ms is not None and chosen.older_than_ms is not None
            and chosen.newer_than_ms <= chosen.older_than_ms):
        raise UsageError(f"--newer-than {args.newer_than} and --older-than {args.older_than}: no record is both "
                         "(give --newer-than the larger age)")
    return chosen


def matching(filters: Filters, now: int, *, to_send: bool = False) -> Callable[[DeadLetter], DeadLetter | None]:
    """What a command that lists (or, ``to_send``, sends) the records ``filters`` choose holds of each record
    it reads: nothing of one that does not match; of one that does, what a listing shows, or (to send) the
    whole record. ``stats`` holds less: a :class:`~reclaim.tools.dlq.selection.Brief`."""

    def keep(letter: DeadLetter) -> DeadLetter | None:
        if not filters.matches(letter, now):
            return None
        if to_send:
            return letter
        # A listing shows neither the value, the headers nor the decoded record beyond its stream and chunk
        # (most of a record's size): not held. The names that come back record after record are shared.
        return replace(letter, value=None, headers=(), stack="", info=None, outcome=sys.intern(letter.outcome),
                       error_class=sys.intern(letter.error_class), group=sys.intern(letter.group),
                       stream=sys.intern(letter.stream))

    return keep


def scan_dlq(settings: Settings, filters: Filters, keep: Callable[[DeadLetter], Held | None],
             *more_topics: str) -> tuple[str, DlqScan[Held]]:
    """The broker address, once it answers with the DLQ and ``more_topics``, and the DLQ records ``keep`` keeps
    as they are read (a command holds no more); one usage line when ``filters`` name a partition the DLQ does
    not have."""
    from reclaim.services.runtime import codec, topic_names
    from reclaim.tools.dlq.reader import connect, scan

    dlq = topic_names(settings).dlq
    address = connect(settings, [dlq, *more_topics])
    found = scan(address, dlq, codec(settings), keep)
    if filters.partition is not None and filters.partition not in found.watermarks:
        raise UsageError(f"{found.topic} has no partition {filters.partition} (it has {len(found.watermarks)})")
    return address, found


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.tools.dlq.render import print_json, print_list
    from reclaim.tools.dlq.selection import select

    filters, limit = filters_of(args), whole("--limit", args.limit, 1)
    now = now_ms()
    _, found = scan_dlq(settings, filters, matching(filters, now))
    chosen = select(found.letters, filters, now, newest_first=not args.oldest_first, limit=limit, total=found.total)
    if args.json:
        print_json({"topic": found.topic, **chosen.counts(), "records": [d.summary() for d in chosen.records]})
    else:
        print_list(found.topic, chosen, now, newest_first=not args.oldest_first)
    return ExitCode.OK


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.services.runtime import codec, topic_names
    from reclaim.tools.dlq.reader import connect, read_one
    from reclaim.tools.dlq.render import print_json, print_show
    from reclaim.tools.dlq.selection import parse_coordinates

    if args.coordinates is not None:
        if args.partition is not None or args.offset is not None:
            raise UsageError("give PARTITION:OFFSET or --partition and --offset, not both")
        partition, offset = parsed("PARTITION:OFFSET", args.coordinates, parse_coordinates) or (0, 0)
    elif args.partition is not None and args.offset is not None:
        partition, offset = whole("--partition", args.partition, 0) or 0, whole("--offset", args.offset, 0) or 0
    else:
        raise UsageError("name the record: PARTITION:OFFSET, or --partition P --offset O")
    dlq = topic_names(settings).dlq
    letter = read_one(connect(settings, [dlq]), dlq, codec(settings), partition, offset)
    if args.json:
        print_json(letter.detail())
    else:
        print_show(letter)
    return ExitCode.OK


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.tools.dlq.render import print_json, print_stats
    from reclaim.tools.dlq.selection import Brief, count

    filters, now = filters_of(args), now_ms()
    # Of each matching record only what is counted is held (a Brief), not what a listing shows.
    _, found = scan_dlq(settings, filters, lambda letter: Brief.of(letter) if filters.matches(letter, now) else None)
    counted = count(found.letters, now, total=found.total)
    if args.json:
        print_json({"topic": found.topic, **counted.as_json()})
    else:
        print_stats(found.topic, counted)
    return ExitCode.OK


def filter_flags(parser: argparse.ArgumentParser) -> None:
    chosen = parser.add_argument_group("filters (all that are given must hold)")
    chosen.add_argument("--stream", help="the record's stream, scope/stream")
    chosen.add_argument("--outcome", "--reason", dest="reason", metavar="TEXT",
                        help="text in the outcome or the error message (case-insensitive), e.g. fatal, injected")
    chosen.add_argument("--error-class", help="the error class, e.g. StorageUnavailableError")
    chosen.add_argument("--older-than", metavar="AGE", help="dead-lettered more than AGE ago, e.g. 2h")
    chosen.add_argument("--newer-than", metavar="AGE", help="dead-lettered less than AGE ago, e.g. 10m")
    chosen.add_argument("--attempt", metavar="N", help="dead-lettered on attempt N or later")
    chosen.add_argument("--partition", metavar="P", help="DLQ partition")
    chosen.add_argument("--from-offset", metavar="O", help="DLQ offsets from O (inclusive)")
    chosen.add_argument("--to-offset", metavar="O", help="DLQ offsets up to O (inclusive)")


def register(sub: argparse._SubParsersAction, common: Callable[[argparse.ArgumentParser], None]) -> None:  # type: ignore[type-arg]
    dlq = sub.add_parser("dlq", help="list, show, count, replay or purge dead-lettered records",
                         description=_DESCRIPTION, epilog=GROUP_EPILOG.format(group="dlq"))
    actions = add_verbs(dlq)
    json_flag(dlq)

    listing = actions.add_parser("list", help="dead letters, newest first, with counts", description=_DESCRIPTION,
                                 **examples("reclaim dlq list", "reclaim dlq list --older-than 1d --reason "
                                            "storage-unavailable --json"))
    filter_flags(listing)
    listing.add_argument("--oldest-first", action="store_true", help="oldest first instead")
    listing.add_argument("--limit", default="100", metavar="N", help="records to show, at least 1 (default 100)")
    json_flag(listing, "one JSON document: the records and the counts")
    common(listing)
    listing.set_defaults(run=cmd_list)

    show = actions.add_parser("show", help="one dead letter fully decoded, with every header",
                              **examples("reclaim dlq show 0:42", "reclaim dlq show --partition 0 --offset 42 --json"))
    show.add_argument("coordinates", nargs="?", metavar="PARTITION:OFFSET", help="where it sits in the DLQ, e.g. 0:42")
    show.add_argument("--partition", metavar="P", help="its DLQ partition (with --offset)")
    show.add_argument("--offset", metavar="O", help="its DLQ offset (with --partition)")
    json_flag(show, "print it as JSON")
    common(show)
    show.set_defaults(run=cmd_show)

    counting = actions.add_parser("stats", help="counts by outcome, error class, stream and age",
                                  description=_DESCRIPTION, **examples("reclaim dlq stats", "reclaim dlq stats --json"))
    filter_flags(counting)
    json_flag(counting, "print the counts as JSON")
    common(counting)
    counting.set_defaults(run=cmd_stats)

    register_replay_purge(actions, common)


_REPLAY = """\
Send dead letters back to the deletion topic (after fixing what made them fail), each once: a record
sent is remembered in the compacted topic <prefix>ledger-deletion.dlq-replayed (created by `reclaim
topics create`), shared by every operator, and not sent again by a later replay (one that dies between
a delivery and its memo sends that record once more; phase 2 finds it already gone). A replayed
record starts again at attempt 1 and names its DLQ coordinates in the header reclaim.replayed-from.
The DLQ is read twice: once to choose, holding only where each chosen record sits, and once to send;
a chosen record purged in between is not sent (counted as gone)."""

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

    from reclaim.services.runtime import codec, topic_names
    from reclaim.tools.dlq.render import console, counts_line, letters_table, print_json
    from reclaim.tools.dlq.replay import Pacer, ReplaySource, ReplayTopics, replay
    from reclaim.tools.dlq.selection import Sendable
    from reclaim.tools.topics import dlq_replayed_topic

    filters, limit, rate = filters_of(args), whole("--limit", args.limit, 1), _rate(args.rate)
    names = topic_names(settings)
    topics = ReplayTopics(names.deletion, dlq_replayed_topic(names))
    now = now_ms()
    if args.dry_run:
        # What a listing shows of each matching record: the dry run prints the records it would send.
        address, listed = scan_dlq(settings, filters, matching(filters, now), topics.deletion, topics.replayed)
        chosen, shown, counts = _unsent(address, topics.replayed, listed, limit)
        if args.json:
            print_json({"topic": listed.topic, "dry_run": True, **counts, "records": [d.summary() for d in shown]})
            return ExitCode.OK
        if shown:
            console().print(letters_table(shown, now))
        print(f"would send {len(shown)} record(s) to {topics.deletion} ({counts['already_replayed']} already "
              "replayed); " + counts_line(listed.topic, chosen, newest_first=False))
        return ExitCode.OK

    def sendable(letter: DeadLetter) -> Sendable | None:
        # Only where a matching record sits: the records are read again to be sent.
        return Sendable.of(letter) if filters.matches(letter, now) else None

    address, found = scan_dlq(settings, filters, sendable, topics.deletion, topics.replayed)
    chosen_sendables, to_send, counts = _unsent(address, topics.replayed, found, limit)
    sent = gone = 0
    if to_send:
        columns = (TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=console(stderr=True)) as progress:
            task = progress.add_task("replay", total=len(to_send))
            sent, gone = replay(ReplaySource(address, found.topic, codec(settings)), topics, to_send, Pacer(rate),
                                on_sent=lambda n: progress.advance(task, n))
    if args.json:
        print_json({"topic": found.topic, **counts, "sent": sent, "gone": gone})
    else:
        left = f"; {gone} chosen record(s) left the DLQ before they were sent" if gone else ""
        print(f"sent {sent} record(s) to {topics.deletion} ({counts['already_replayed']} already replayed, "
              "skipped); " + counts_line(found.topic, chosen_sendables, newest_first=False) + left)
    return ExitCode.OK


def _unsent(address: str, memos: str, found: DlqScan[L], limit: int | None
            ) -> tuple[Selection[L], list[L], dict[str, int]]:
    """Of the matching records a replay read, each once, oldest first: those no replay has sent (at most
    ``limit``), with the counts a replay prints."""
    from reclaim.tools.dlq.replay import read_replayed
    from reclaim.tools.dlq.selection import pick

    chosen = pick(found.letters, newest_first=False, total=found.total)
    replayed = read_replayed(address, memos)
    fresh = [letter for letter in chosen.records if letter not in replayed]
    to_send = fresh if limit is None else fresh[:limit]
    counts = {**chosen.counts(), "already_replayed": len(chosen.records) - len(fresh), "to_send": len(to_send)}
    return chosen, to_send, counts


def cmd_purge(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.tools.dlq.purge import FilteredPlan, UpToPlan, plan_json, purge
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
    # Planned as the records are read: none of them is held.
    planner = UpToPlan(*up_to) if up_to is not None else FilteredPlan(filters, now_ms())
    scanned: tuple[str, DlqScan[object]] = scan_dlq(settings, filters, planner.add)
    address, found = scanned
    try:
        plans = planner.plans(found.watermarks)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
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
                                   description=_REPLAY, **examples("reclaim dlq replay --error-class "
                                                                   "StorageUnavailableError --dry-run",
                                                                   "reclaim dlq replay --stream scope/orders"))
    filter_flags(replaying)
    replaying.add_argument("--limit", metavar="N", help="send at most N records (at least 1)")
    replaying.add_argument("--rate", default=str(DEFAULT_RATE), metavar="N",
                           help=f"records per second (default {DEFAULT_RATE})")
    replaying.add_argument("--dry-run", action="store_true", help="show what would be sent; send nothing")
    json_flag(replaying, "print the counts (and, dry, the records) as JSON")
    common(replaying)
    replaying.set_defaults(run=cmd_replay)

    purging = actions.add_parser("purge", help="drop dead letters for good (the oldest of each partition)",
                                 description=_PURGE, **examples("reclaim dlq purge --older-than 30d --dry-run",
                                                                "reclaim dlq purge --up-to 0:1000 --yes"))
    filter_flags(purging)
    purging.add_argument("--up-to", metavar="PARTITION:OFFSET",
                         help="drop this partition's records up to and including OFFSET")
    purging.add_argument("--all", action="store_true", help="drop every record")
    purging.add_argument("--yes", action="store_true", help="carry out the plan without asking")
    purging.add_argument("--dry-run", action="store_true", help="print the plan; drop nothing")
    json_flag(purging, "print the plan as JSON")
    common(purging)
    purging.set_defaults(run=cmd_purge)
