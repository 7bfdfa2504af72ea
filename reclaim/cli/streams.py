"""``reclaim streams …``: streams, retention policies and truncation by hand."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from reclaim.cli.common import GROUP_EPILOG, Common, add_verb, add_verbs, store_flags
from reclaim.exits import Unavailable, UsageError
from reclaim.producers.producer import RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.producers.subscribers import SubscriberClient
from reclaim.retention.errors import InvalidPolicyError
from reclaim.retention.policy import check_policy
from reclaim.schemas.base import LONG_MAX, millis_now
from reclaim.schemas.streams import (
    LimitType,
    RetentionPolicy,
    RetentionType,
    StreamCut,
    TruncationEvent,
    TruncationReason,
)
from reclaim.security.signing import RecordSigner
from reclaim.segments.ids import split_stream
from reclaim.segments.streams import StreamController
from reclaim.services import preflight, runtime
from reclaim.services.controller import stream_controller
from reclaim.services.recorder import RetentionRecorder
from reclaim.settings import Settings
from reclaim.storage.metadata import DEFAULT_MAX_ROLLING_LENGTH

MAX_SEGMENTS = 10_000
"""The most segments ``streams create`` makes at once. Every segment is created before the command says
anything: 100000000 ran until it was killed, with no output, and is a typo rather than a stream."""

CHUNK_SIZES = (1024, 1024**3)
"""The smallest and largest ``streams create --chunk-size``: below a KiB a stream is mostly chunk rows."""
EVENT_SIZES = (1, 64 * 1024**2)
"""The smallest and largest ``streams write --event-size``: an event is held in memory whole."""
DEFAULT_EVENT_SIZE = 1024**2

log = logging.getLogger(__name__)


def parse_cut(text: str | None) -> StreamCut:
    """A cut from JSON ``{"<segment id>": offset, ...}``, as ``reclaim streams cut`` prints it."""
    if text is None:
        raise UsageError("streams truncate needs --cut, e.g. '{\"0\": 128}' (see `reclaim streams cut`)")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        # int() would read 1.5 as 1 and true as 1: a truncation must be at exactly the offset given.
        bad = [offset for offset in data.values() if isinstance(offset, bool) or not isinstance(offset, int)]
        if bad:
            raise ValueError(f"offset {json.dumps(bad[0])} is not a whole number")
        return StreamCut.from_mapping({int(segment): offset for segment, offset in data.items()})
    except (ValueError, TypeError) as exc:
        raise ValueError(f"--cut must be a JSON object of segment id to offset, e.g. '{{\"0\": 128}}': {exc}") \
            from exc


def format_cut(cut: StreamCut) -> str:
    return json.dumps({str(segment): offset for segment, offset in cut.as_dict().items()})


def policy_from(args: argparse.Namespace) -> RetentionPolicy:
    kind = RetentionType[args.type.upper()]
    limit = LimitType[args.limit_type.upper()] if args.limit_type else None
    policy = RetentionPolicy(kind, limit, args.min if args.min is not None else 0,
                             args.max if args.max is not None else LONG_MAX)
    # Before the policy is stored or published, by the check the retention job applies to what it reads: a
    # limit it would reject (above its type's largest, beyond a long) is never stored.
    try:
        check_policy(policy)
    except InvalidPolicyError as exc:
        raise UsageError(f"set-policy: {exc}") from exc
    return policy


def admin_signer(settings: Settings) -> RecordSigner | None:
    """The admin's key, the credential behind a manual truncation or a policy: a keyring without one is a
    refusal (one line). None when record authentication is off, where the metadata store's own
    credentials are all that stands behind the command."""
    signer = runtime.record_signer(settings, "admin")
    if signer is None:
        log.warning("record authentication is off (no keyring): nothing but access to the metadata store "
                    "authorizes this")
    return signer


def signed_by(signer: RecordSigner | None) -> str:
    return "record authentication off" if signer is None else f"admin/{signer.key.id}"


def check_stream(args: argparse.Namespace) -> None:
    """The verb's stream is a 'scope/name' that parses: refused before the broker or the store is touched."""
    if "/" not in args.stream:
        raise UsageError(f"streams {args.action} needs a stream as 'scope/name'")
    split_stream(args.stream)


def cmd_streams(args: argparse.Namespace, settings: Settings) -> int:
    if args.action != "record":  # record records every stream with a retention policy: it takes no stream
        check_stream(args)
    if args.action == "create" and not 1 <= args.segments <= MAX_SEGMENTS:
        raise UsageError(f"--segments must be between 1 and {MAX_SEGMENTS}, got {args.segments}")
    if args.action == "create":
        within("--chunk-size", args.chunk_size, CHUNK_SIZES)
    # Before anything is opened: a refusal changes nothing.
    if args.action == "set-policy":
        policy = policy_from(args)
    if args.action == "truncate":
        cut = parse_cut(args.cut)
    if args.action in ("set-policy", "truncate"):
        admin = admin_signer(settings)
    if args.action == "truncate" and args.publish:
        return publish_truncation(settings, args.stream, cut, admin)
    # set-policy publishes as the admin, cut and history publish nothing: no controller key needed.
    with stream_controller(settings, getattr(args, "chunk_size", None),
                           controller_key=args.action in ("create", "record", "truncate")) as (controller, publisher):
        if args.action == "create":
            scope, _, name = args.stream.partition("/")
            controller.create_stream(scope, name, args.segments)
            print(f"stream {args.stream} created with {args.segments} segment(s)")
        elif args.action == "set-policy":
            controller.set_policy(args.stream, policy)
            SubscriberClient(publisher.signed_by(admin), runtime.topic_names(settings),
                             incarnations=controller.incarnation).set_policy(args.stream, policy)
            print(f"stream {args.stream}: policy {policy.describe()}")
        elif args.action == "cut":
            tail, size = controller.tail_cut(args.stream)
            print(json.dumps({"stream": args.stream, "cut": json.loads(format_cut(tail)), "size": size,
                              "head": json.loads(format_cut(controller.head(args.stream))),
                              "incarnation": controller.incarnation(args.stream)}))
        elif args.action == "record":
            recorder = RetentionRecorder(controller, publisher, runtime.topic_names(settings).stream_cuts, 0)
            recorded = recorder.tick(force=True)
            for record in recorded:
                print(f"recorded {record.stream} size={record.recording_size} cut={format_cut(record.cut)}")
            if recorder.skipped:
                first, why = next(iter(recorder.skipped.items()))
                raise Unavailable(f"{len(recorder.skipped)} stream(s) not recorded, e.g. {first}: {why}")
            if not recorded:
                print("no stream with a retention policy: nothing recorded")
        elif args.action == "history":
            print_history(controller, args.stream, as_json=args.json)
        else:
            source = f"reclaim streams truncate at {datetime.now(UTC).isoformat(timespec='milliseconds')}"
            done = controller.truncate_journaled(args.stream, cut, source=source, reason="MANUAL",
                                                 signer=signed_by(admin))
            log.info("manual truncation signed by %s stream=%s applied=%s", signed_by(admin), args.stream, done)
            print(f"stream {args.stream}: {'truncated' if done else 'already at or past that cut: nothing to do'}")
    return 0


def within(flag: str, value: int, bounds: tuple[int, int]) -> None:
    """One usage line unless ``bounds[0] <= value <= bounds[1]``."""
    if not bounds[0] <= value <= bounds[1]:
        raise UsageError(f"{flag} must be between {bounds[0]} and {bounds[1]} bytes, got {value}")


def cmd_write(args: argparse.Namespace, settings: Settings) -> int:
    """``streams write``: the bytes of stdin (or ``--file``) appended as events of at most ``--event-size``
    bytes, one active segment after the other, through the controller's writer."""
    check_stream(args)
    within("--event-size", args.event_size, EVENT_SIZES)
    if args.file is None and sys.stdin.isatty():
        raise UsageError("streams write appends the bytes of its input: pipe them in, or give --file PATH")
    with ExitStack() as stack:
        source = stack.enter_context(args.file.open("rb")) if args.file is not None else sys.stdin.buffer
        controller, _ = stack.enter_context(stream_controller(settings))
        names = [controller.segment_name(args.stream, s.id) for s in controller.active_segments(args.stream)]
        if not names:  # sealed: nothing more is written to it
            raise Unavailable(f"stream {args.stream} has no active segment to write to")
        written = events = 0
        while event := source.read(args.event_size):
            written += controller.append(names[events % len(names)], event)
            events += 1
        chunks = sum(len(controller.segments.layout(name)) for name in names)
        tail, size = controller.tail_cut(args.stream)
    log.info("stream written stream=%s bytes=%d events=%d", args.stream, written, events)
    print(f"stream {args.stream}: {written} bytes written in {events} event(s); {chunks} chunk(s) in its active "
          f"segments, size {size}, tail cut {format_cut(tail)}")
    return 0


def publish_truncation(settings: Settings, stream: str, cut: StreamCut, admin: RecordSigner | None) -> int:
    """``streams truncate --publish``: a MANUAL truncation event signed with the admin's key, for the truncation
    applier to apply; the admin needs the broker and the key, not the controller's store or its key."""
    topic, address = runtime.topic_names(settings).truncation, preflight.broker(settings)
    preflight.require_topics(address, [topic])
    event = TruncationEvent(stream, cut, TruncationReason.MANUAL, millis_now(), RetentionPolicy(RetentionType.NONE))
    publisher = ConfirmedPublisher(RecordProducer(address, "idempotent-producer"), runtime.codec(settings),
                                   signer=admin)
    try:
        publisher.publish(topic, event, stream)
    finally:
        publisher.close()
    print(f"stream {stream}: truncation published on {topic} signed by {signed_by(admin)}; the truncation applier "
          "applies it (see `reclaim streams history`)")
    return 0


def print_history(controller: StreamController, stream: str, *, as_json: bool) -> None:
    """The truncation journal of the stream as it is now (not of a deleted one of the same name): when, why,
    signed by whom, at which cut, from which record."""
    entries = controller.journal(stream)
    rows = [{"recorded_at": datetime.fromtimestamp(e.recorded_at, UTC).isoformat(timespec="seconds"),
             "reason": e.reason, "signer": e.signer, "cut": {str(s): o for s, o in e.cut}, "source": e.source,
             "state": e.state.value, "incarnation": e.incarnation} for e in entries]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        print(f"stream {stream}: no truncation applied")
    for row in rows:
        applying = "" if row["state"] == "applied" else " (applying: interrupted, applied when read again)"
        print(f"{row['recorded_at']}  {row['reason']:11}  signer={row['signer']}  cut={json.dumps(row['cut'])}  "
              f"from {row['source']}{applying}")


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    streams = sub.add_parser(
        "streams", help="create streams, set retention policies, read tail cuts, record cuts, truncate by hand",
        description="Streams over segments in the metadata store, their retention policies and their truncation "
                    "by hand. A truncation hands the chunks before the cut to phase 1; a running worker deletes "
                    "them from tier-2.", epilog=GROUP_EPILOG.format(group="streams"))
    verbs = add_verbs(streams)
    create = add_verb(verbs, "create", "a stream over N segments",
                      "Create a stream over --segments segments; a writer creates the metadata store when missing.",
                      ["reclaim streams create scope/orders",
                       "reclaim streams create scope/orders --segments 2 --chunk-size 1048576"])
    create.add_argument("--segments", type=int, default=1, help=f"initial segments, 1 to {MAX_SEGMENTS} (default 1)")
    create.add_argument("--chunk-size", type=int, default=DEFAULT_MAX_ROLLING_LENGTH, metavar="BYTES",
                        help=f"the most bytes a chunk of its segments takes before the next one starts, "
                             f"{CHUNK_SIZES[0]} to {CHUNK_SIZES[1]} (default {DEFAULT_MAX_ROLLING_LENGTH}); a "
                             "segment keeps it for life")
    policy = _policy_verb(verbs)
    cut = add_verb(verbs, "cut", "the stream's tail cut, size and head as JSON",
                   "The stream's tail cut (every active segment's length), its size and its head (the cut it was "
                   "last truncated at), as one JSON line: give its cut to `streams truncate --cut`.",
                   ["reclaim streams cut scope/orders"])
    record = add_verb(verbs, "record", "record every stream's cut now (the retention recorder's work, once)",
                      "Record the tail cut and size of every stream with a retention policy now, as the truncation "
                      "applier's recorder does on its own.", ["reclaim streams record"])
    truncate = add_verb(verbs, "truncate", "truncate at --cut, signed and journaled (or --publish it)",
                        "Truncate the stream at --cut, idempotent, signed with the admin key of the keyring "
                        "(RECLAIM_KEYRING) and kept in the stream's journal; with --publish, sent as a signed event "
                        "for the truncation applier instead.",
                        ["reclaim streams truncate scope/orders --cut '{\"0\": 1048576, \"1\": 1048576}'",
                         "reclaim streams truncate scope/orders --publish "
                         "--cut \"$(reclaim streams cut scope/orders | jq -c .cut)\""])
    truncate.add_argument("--cut", help="JSON object of segment id to offset, as `streams cut` prints it")
    truncate.add_argument("--publish", action="store_true",
                          help="publish the signed event on the truncation topic instead of applying it")
    history = add_verb(verbs, "history", "the stream's truncation journal",
                       "The stream's truncation journal: every truncation applied, when, its reason and signer.",
                       ["reclaim streams history scope/orders", "reclaim streams history scope/orders --json"])
    history.add_argument("--json", action="store_true", help="print the journal as JSON")
    write = _write_verb(verbs)
    for verb in (create, policy, cut, truncate, history, write):
        verb.add_argument("stream", metavar="STREAM", help="the stream, 'scope/name'")
    for verb in (create, policy, cut, record, truncate, history):
        verb.set_defaults(run=cmd_streams)
    for verb in (create, policy, cut, record, truncate, history, write):
        store_flags(verb)
        common(verb)


def _policy_verb(verbs: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    policy = add_verb(verbs, "set-policy", "store and publish a retention policy (needs the admin key)",
                      "Store the stream's retention policy and publish it for the retention job, signed with the "
                      "admin key of the keyring (RECLAIM_KEYRING). --min/--max are ms for time limits, bytes for "
                      "size limits.",
                      ["reclaim streams set-policy scope/orders --type time --min 3600000",
                       "reclaim streams set-policy scope/orders --type size --max 1073741824"])
    policy.add_argument("--type", default="none", choices=["none", "time", "size", "consumption"],
                        help="retention type (default none)")
    policy.add_argument("--limit-type", choices=["time", "size"], help="unit of --min/--max")
    policy.add_argument("--min", type=int, help="keep at least this much: ms (at most 100 years) or bytes (at most "
                                                "2^62)")
    policy.add_argument("--max", type=int, help="keep at most this much: ms (at most 100 years) or bytes (at most "
                                                "2^62); no max when left out")
    return policy


def _write_verb(verbs: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    write = add_verb(verbs, "write", "append the bytes of stdin (or --file) to the stream as events",
                     "Append the bytes of stdin (or --file) to the stream, as events of at most --event-size bytes "
                     "that go to its active segments in turn. A segment's chunks roll over at the size the stream "
                     "was created with (`streams create --chunk-size`). Prints the bytes and events written, the "
                     "chunks of the active segments and the new tail cut.",
                     ["head -c 3000000 /dev/urandom | reclaim streams write scope/orders",
                      "reclaim streams write scope/orders --file orders.bin --event-size 65536"])
    write.add_argument("--file", type=Path, metavar="PATH", help="read the bytes from PATH instead of stdin")
    write.add_argument("--event-size", type=int, default=DEFAULT_EVENT_SIZE, metavar="BYTES",
                       help=f"the most bytes an event takes, {EVENT_SIZES[0]} to {EVENT_SIZES[1]} (default "
                            f"{DEFAULT_EVENT_SIZE})")
    write.set_defaults(run=cmd_write)
    return write
