"""``reclaim streams …``: streams, retention policies and truncation by hand."""

from __future__ import annotations

import argparse
import json
import logging
from datetime import UTC, datetime

from reclaim.cli.common import Common, store_flags
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

MAX_SEGMENTS = 10_000
"""The most segments ``streams create`` makes at once. Every segment is created before the command says
anything: 100000000 ran until it was killed, with no output, and is a typo rather than a stream."""

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


def cmd_streams(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "record" and args.stream:  # it recorded every stream, not the one named
        raise UsageError(f"streams record records every stream with a retention policy; it takes no stream, "
                         f"got {args.stream!r}")
    if args.action != "record":
        if "/" not in args.stream:
            raise UsageError(f"streams {args.action} needs a stream as 'scope/name'")
        split_stream(args.stream)  # a bad name is refused before the broker or the store is touched
    if args.action == "create" and not 1 <= args.segments <= MAX_SEGMENTS:
        raise UsageError(f"--segments must be between 1 and {MAX_SEGMENTS}, got {args.segments}")
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
    with stream_controller(settings, controller_key=args.action in ("create", "record", "truncate")
                           ) as (controller, publisher):
        if args.action == "create":
            scope, _, name = args.stream.partition("/")
            controller.create_stream(scope, name, args.segments)
            print(f"stream {args.stream} created with {args.segments} segment(s)")
        elif args.action == "set-policy":
            controller.set_policy(args.stream, policy)
            SubscriberClient(publisher.signed_by(admin), runtime.topic_names(settings),
                             incarnations=controller.incarnation).set_policy(args.stream, policy)
            print(f"stream {args.stream}: policy {policy.to_avro()}")
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
        description="create: a stream over N segments. set-policy: store and publish a retention policy "
                    "(--type none|time|size|consumption; --min/--max in ms for time limits, bytes for size limits). "
                    "cut: the stream's tail cut, size and head as JSON. record: record every stream's cut now "
                    "(the retention recorder's work, once). truncate: truncate at --cut, idempotent, signed with "
                    "the admin key of the keyring (RECLAIM_KEYRING) and kept in the stream's journal; with "
                    "--publish, sent as a signed event for the truncation applier instead. history: the "
                    "stream's truncation journal (every truncation applied, its reason and signer). set-policy "
                    "also needs the admin key.")
    streams.add_argument("action", choices=["create", "set-policy", "cut", "record", "truncate", "history"])
    streams.add_argument("stream", nargs="?", default="", help="the stream, 'scope/name'")
    streams.add_argument("--segments", type=int, default=1,
                         help=f"create: initial segments, 1 to {MAX_SEGMENTS} (default 1)")
    streams.add_argument("--type", default="none", choices=["none", "time", "size", "consumption"],
                         help="set-policy: retention type")
    streams.add_argument("--limit-type", choices=["time", "size"], help="set-policy: unit of --min/--max")
    streams.add_argument("--min", type=int, help="set-policy: keep at least this much: ms (at most 100 years) or "
                                                 "bytes (at most 2^62)")
    streams.add_argument("--max", type=int, help="set-policy: keep at most this much: ms (at most 100 years) or "
                                                 "bytes (at most 2^62); no max when left out")
    streams.add_argument("--cut", help="truncate: JSON object of segment id to offset, as 'cut' prints it")
    streams.add_argument("--publish", action="store_true",
                         help="truncate: publish the signed event on the truncation topic instead of applying it")
    streams.add_argument("--json", action="store_true", help="history: as JSON")
    store_flags(streams)
    common(streams)
    streams.set_defaults(run=cmd_streams)
