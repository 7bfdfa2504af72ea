"""``reclaim offload run | status``: offload a stream's sealed chunks from the tier-1 binding to tier-2 by hand,
and show where every offload stands (docs/concepts/offload.md)."""

from __future__ import annotations

import argparse
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from reclaim.cli.common import (
    GROUP_EPILOG,
    Common,
    add_verb,
    add_verbs,
    byte_size,
    duration,
    json_flag,
    print_json,
    store_flags,
)
from reclaim.exits import ExitCode, UsageError
from reclaim.services import preflight
from reclaim.settings import Settings

if TYPE_CHECKING:
    from reclaim.storage.metadata import OffloadPolicy, OffloadRecord

_DESCRIPTION = """\
run           offload a stream's sealed chunks to the offload binding: intent, upload, switch; then release
              the hot copies past the release lag and hand every cancelled or expired offload's copy to phase 1
set-policy    when the offloader service (reclaim offloader) offloads a stream: thresholds in bytes and age
clear-policy  the service stops offloading the stream (what it offloaded stays where it is)
status        every stream's policy, and every offload on its way or waiting for phase 2, by state
Exit status: 0 done; 1 (run) an offload stopped on a failure (the next run finishes it); 2 the store, a
binding or the broker could not be used."""

_RUN = """\
Offload every sealed chunk of the stream that has one copy, on another binding than the offload binding
(--to, RECLAIM_OFFLOAD_BINDING, default s3-tier2): the intent is recorded, the bytes uploaded and the chunk's
reads switched to the new copy in one compare-and-set. Then, for every stream: the hot copies switched longer
than --release-after ago are published as pending deletes (phase 1), and the copies of offloads cancelled by
a truncation or past their deadline too. A running worker deletes them. The last chunk of an unsealed
segment stays: it may still grow."""


_SET_POLICY = """\
Store the stream's offload policy for the offloader service (reclaim offloader): walking from the stream's
newest chunk to its oldest, a sealed chunk is offloaded once the hot bytes walked so far, its own included,
pass --after-bytes, or once it was last written longer than --after ago; every older chunk with it (Pulsar's
managedLedgerOffloadThresholdInBytes and ...InSeconds). --after-bytes 0 offloads every sealed chunk. At least
one threshold is needed. Setting a policy again replaces it."""


def cmd_offload(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "run":
        return _run(args, settings)
    if args.action in ("set-policy", "clear-policy"):
        return _policy(args, settings)
    return _status(args, settings)


def _stream_arg(args: argparse.Namespace) -> str:
    from reclaim.segments.ids import split_stream

    if "/" not in args.stream:
        raise UsageError(f"offload {args.action} needs a stream as 'scope/name'")
    split_stream(args.stream)
    return str(args.stream)


def _policy(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.services import runtime
    from reclaim.storage.metadata import OffloadPolicy

    stream = _stream_arg(args)
    policy = None
    if args.action == "set-policy":
        if args.after_bytes is None and args.after is None:
            raise UsageError("offload set-policy needs --after-bytes, --after or both")
        policy = OffloadPolicy(stream, args.to or settings.offload_binding, args.after_bytes, args.after,
                               settings.offload_release_after_s if args.release_after is None else args.release_after)
    with ExitStack() as stack:
        store = runtime.metadata_store(settings, create=False)
        stack.callback(store.close)
        if policy is None:
            with store.transaction() as txn:
                removed = txn.delete_offload_policy(stream)
            print(f"stream {stream}: " + ("offload policy cleared" if removed else "had no offload policy"))
            return ExitCode.OK
        configured = runtime.binding_names(settings)
        if policy.target not in configured:
            raise UsageError(f"no storage binding named {policy.target!r} to offload to (configured: "
                             f"{', '.join(configured)})")
        if not store.segment_names(f"{stream}/"):
            raise UsageError(f"no stream {stream!r} in the metadata store {settings.metadata_shown}")
        with store.transaction() as txn:
            current = txn.get_offload_policy(stream)
            txn.put_offload_policy(policy, expected_version=0 if current is None else current.version)
    print(f"stream {stream}: {policy.describe()}")
    return ExitCode.OK


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.producers.producer import RecordProducer
    from reclaim.segments.offload import Offloader
    from reclaim.services import runtime

    _stream_arg(args)
    target_name = args.to or settings.offload_binding
    release_after = settings.offload_release_after_s if args.release_after is None else args.release_after
    address = preflight.broker(settings)
    preflight.require_topics(address, [runtime.topic_names(settings).deletion])
    with ExitStack() as stack:
        store = runtime.metadata_store(settings, create=False)
        stack.callback(store.close)
        bindings = runtime.storage_bindings(settings, writer=True)
        stack.callback(bindings.close)
        if target_name not in bindings:
            raise UsageError(f"no storage binding named {target_name!r} to offload to (configured: "
                             f"{', '.join(bindings.names())})")
        producer = RecordProducer(address, "idempotent-producer")
        stack.callback(producer.close)
        offloader = Offloader(store, bindings, bindings.get(target_name), runtime.deletion_service(settings, store,
                                                                                               producer),
                              release_after_s=release_after)
        resumed = offloader.resume()
        segments = store.segment_names(f"{args.stream}/")
        if not segments:
            raise UsageError(f"no stream {args.stream!r} in the metadata store {settings.metadata_shown}")
        reports = [resumed, *(offloader.offload_segment(segment) for segment in segments)]
        released, reaped = offloader.release_due(), offloader.reap()
    switched = [chunk for report in reports for chunk in report.switched]
    cancelled = [chunk for report in reports for chunk in report.cancelled]
    skipped = [item for report in reports for item in report.skipped]
    stopped = [(chunk, why) for chunk, why in skipped if why.startswith("stopped")]
    if args.json:
        print_json({"stream": args.stream, "to": target_name, "switched": switched, "cancelled": cancelled,
                    "skipped": [{"chunk": c, "reason": why} for c, why in skipped], "released": released,
                    "handed_to_phase_1": len(reaped)})
    else:
        _print_run(args.stream, target_name, switched, cancelled, skipped, released, reaped)
    return ExitCode.FINDINGS if stopped else ExitCode.OK


def _print_run(stream: str, target: str, switched: list[str], cancelled: list[str], skipped: list[tuple[str, str]],
               released: list[str], reaped: list[str]) -> None:
    print(f"{stream}: {len(switched)} chunks switched to {target}, {len(cancelled)} offloads cancelled, "
          f"{len(skipped)} chunks left where they are")
    for reason, count in sorted(Counter(why for _, why in skipped).items()):
        print(f"  left: {count} ({reason})")
    print(f"released: {len(released)} hot copies handed to phase 1; {len(reaped)} copies of cancelled or expired "
          "offloads handed to phase 1")


def _status(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.cli.audit import open_to_read
    from reclaim.segments.offload import every_offload
    from reclaim.storage.metadata import OffloadState

    with ExitStack() as stack:
        store, _ = open_to_read(settings, stack)
        offloads = every_offload(store)
        policies = store.offload_policies()
    states = Counter(o.state.value for o in offloads)
    if args.json:
        print_json({"policies": [_policy_dict(p) for p in policies],
                    "states": {state.value: states.get(state.value, 0) for state in OffloadState},
                    "offloads": [_offload_dict(o) for o in offloads[:args.limit]]})
        return ExitCode.OK
    print(f"{len(policies)} stream(s) with an offload policy")
    for policy in policies:
        print(f"  {policy.stream}: {policy.describe()}")
    print(", ".join(f"{states.get(state.value, 0)} {state.value.lower()}" for state in OffloadState))
    for offload in offloads[:args.limit]:
        print(f"  {offload.state.value:<9} {offload.chunk} -> {offload.target.binding} (copy {offload.copy})")
    return ExitCode.OK


def _policy_dict(policy: OffloadPolicy) -> dict[str, object]:
    return {"stream": policy.stream, "to": policy.target, "after_bytes": policy.after_bytes,
            "after_s": policy.after_s, "release_after_s": policy.release_after_s}


def _offload_dict(offload: OffloadRecord) -> dict[str, object]:
    return {"copy": offload.copy, "chunk": offload.chunk, "state": offload.state.value,
            "source": offload.source.binding, "target": offload.target.binding, "length": offload.length,
            "deadline": offload.deadline, "switched_at": offload.switched_at, "mark_id": offload.mark_id}


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    from reclaim.cli.audit import parse_limit
    from reclaim.durations import EXAMPLES

    offload = sub.add_parser("offload", help="offload a stream's sealed chunks from tier-1 to tier-2",
                             description=_DESCRIPTION, epilog=GROUP_EPILOG.format(group="offload"),
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = add_verbs(offload)
    json_flag(offload)
    run = add_verb(verbs, "run", "offload a stream's sealed chunks now, then release and reap", _RUN,
                   ["reclaim offload run scope/orders", "reclaim offload run scope/orders --to s3-tier2 --json",
                    "reclaim offload run scope/orders --release-after 0"])
    run.add_argument("stream", help="the stream, as 'scope/name'")
    run.add_argument("--to", metavar="BINDING", help="the binding to offload to (default RECLAIM_OFFLOAD_BINDING, "
                                                     "else s3-tier2)")
    run.add_argument("--release-after", type=duration(0.0), metavar="DURATION",
                     help=f"how long a hot copy is kept after its switch: {EXAMPLES} (default 4h, "
                          "RECLAIM_OFFLOAD_RELEASE_AFTER_S)")
    run.add_argument("--fs-tier1-root", type=Path, metavar="PATH",
                     help="filesystem tier-1 root (RECLAIM_FS_TIER1_ROOT; the fs-tier1 binding exists only when set)")
    json_flag(run, "print the result as JSON")
    store_flags(run)
    common(run)
    set_policy = add_verb(verbs, "set-policy", "when the offloader service offloads the stream", _SET_POLICY,
                          ["reclaim offload set-policy scope/orders --after-bytes 10GiB",
                           "reclaim offload set-policy scope/orders --after 1h --to s3-tier2",
                           "reclaim offload set-policy scope/orders --after-bytes 0 --release-after 10m"])
    set_policy.add_argument("stream", help="the stream, as 'scope/name'")
    set_policy.add_argument("--after-bytes", type=byte_size, metavar="SIZE",
                            help="offload once the newer hot bytes pass this: 1073741824, 512MiB, 10GB")
    set_policy.add_argument("--after", type=duration(0.0), metavar="DURATION",
                            help=f"offload a chunk last written longer ago than this: {EXAMPLES}")
    set_policy.add_argument("--to", metavar="BINDING", help="the binding to offload to (default "
                                                            "RECLAIM_OFFLOAD_BINDING, else s3-tier2)")
    set_policy.add_argument("--release-after", type=duration(0.0), metavar="DURATION",
                            help="how long a hot copy is kept after its switch (default 4h, "
                                 "RECLAIM_OFFLOAD_RELEASE_AFTER_S)")
    clear_policy = add_verb(verbs, "clear-policy", "the service stops offloading the stream",
                            "Remove the stream's offload policy: the offloader service offloads none of its chunks "
                            "from now on. Chunks offloaded stay on tier-2, and offloads on their way are finished.",
                            ["reclaim offload clear-policy scope/orders"])
    clear_policy.add_argument("stream", help="the stream, as 'scope/name'")
    for parser in (set_policy, clear_policy):
        parser.add_argument("--fs-tier1-root", type=Path, metavar="PATH",
                            help="filesystem tier-1 root (RECLAIM_FS_TIER1_ROOT)")
        store_flags(parser)
        common(parser)
    status = add_verb(verbs, "status", "every policy, and every offload on its way or waiting for phase 2",
                      "Every stream's offload policy, then every offload the metadata store holds, counted by "
                      "state, and the first --limit of them.",
                      ["reclaim offload status", "reclaim offload status --json"])
    status.add_argument("--limit", type=parse_limit, default=20, help="offloads listed (default 20)")
    json_flag(status, "print the result as JSON")
    store_flags(status)
    common(status)
    for parser in (run, set_policy, clear_policy, status):
        parser.set_defaults(run=cmd_offload)

