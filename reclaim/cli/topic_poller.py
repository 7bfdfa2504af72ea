"""``reclaim topic-poller``: the topic poller (:mod:`reclaim.services.topic_poller`) as a process."""

from __future__ import annotations

import argparse
import logging
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING

from reclaim.cli.common import Common, duration, metrics_flags
from reclaim.exits import ExitCode
from reclaim.logs import log_as_service
from reclaim.settings import Settings

if TYPE_CHECKING:
    from reclaim.services.topic_poller import TopicPoller

log = logging.getLogger(__name__)

_DESCRIPTION = """\
Observe every Kafka topic under consumption retention (reclaim topics retain) until SIGTERM or SIGINT: every
--every, its partitions' start and end, where its policy's time limits fall, and its required groups' committed
offsets (and Spark queries' checkpoints), published on the topic-cuts topic when they changed, signed with
the topic-retention key of the keyring (RECLAIM_KEYRING). The retention job decides on them; the Kafka-topic
applier deletes. One poller is enough for a cluster: its passes are a few Admin API requests per topic.
Between passes it follows the groups' commits on __consumer_offsets (which group committed where, when it may
read that topic) and observes a topic as soon as one of its groups moves; --no-follow-commits, or no Read on
__consumer_offsets, leaves it to the passes.
With --once it makes one pass (every topic's cut published), prints what it did and exits: 2 when a topic
could not be observed."""


def cmd_topic_poller(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.localstack.procs import exit_status, stop_on_signals
    from reclaim.producers.producer import RecordProducer
    from reclaim.producers.publisher import ConfirmedPublisher
    from reclaim.services import preflight, runtime
    from reclaim.services.topic_poller import TopicPoller
    from reclaim.tools.group_commits import CommitWatch
    from reclaim.tools.log_dirs import LogDirSizes
    from reclaim.tools.topic_retention import POLLER_GROUP, Checkpoints, PolicyFollower
    from reclaim.tools.topics import admin_client

    runtime.require_record_auth(settings, "the topic poller")
    if not args.once:  # one pass prints what it did; a service logs each step
        log_as_service()
    names = runtime.topic_names(settings)
    address = preflight.broker(settings)
    preflight.require_topics(address, [names.topic_retention, names.topic_cuts])
    signer = runtime.record_signer(settings, "topic-retention")
    stop = stop_on_signals("finishing the pass in hand", log.info)
    if settings.metrics_port is not None:
        preflight.serve_metrics(settings.metrics_port, args.metrics_addr)
    with ExitStack() as stack:
        follower = PolicyFollower(address, names.topic_retention, runtime.codec(settings),
                                  runtime.record_verifier(settings))
        stack.callback(follower.close)
        publisher = ConfirmedPublisher(RecordProducer(address, "idempotent-producer"), runtime.codec(settings),
                                       signer=signer)
        stack.callback(publisher.close)
        s3 = runtime.s3_binding(settings)
        if s3 is not None:
            stack.callback(s3.close)
        sizes = LogDirSizes(address)
        stack.callback(sizes.close)
        poller = TopicPoller(admin_client(address), follower.refresh, publisher, names.topic_cuts,
                             heartbeat_s=args.heartbeat, checkpoints=Checkpoints(None if s3 is None else s3.client),
                             sizes=sizes)
        if args.once:
            return _one_pass(poller)
        watch = None
        if args.follow_commits:
            watch = CommitWatch(address, POLLER_GROUP, lambda topic: topic in poller.watched)
            stack.callback(watch.close)
        log.info("topic poller: a pass every %g s%s, cuts on %s%s", args.every,
                 " and the groups' commits followed" if watch else "", names.topic_cuts,
                 "" if signer is None else f", signed by topic-retention/{signer.key.id}")
        poller.run(stop, args.every, watch)
    return exit_status(0, stop)


def _one_pass(poller: TopicPoller) -> int:
    report = poller.tick()
    for cut in report.published:
        groups = ", ".join(f"{g.group} {g.committed.as_dict()}" for g in cut.groups) or "no required group"
        print(f"{cut.topic}: cut published ({groups})")
    for topic in report.unchanged:
        print(f"{topic}: unchanged")
    for topic, reason in sorted(report.failed.items()):
        print(f"{topic}: not observed: {reason}", file=sys.stderr)
    if not (report.published or report.unchanged or report.failed):
        print("no topic under consumption retention (reclaim topics retain TOPIC ...)")
    return ExitCode.UNAVAILABLE if report.failed else ExitCode.OK


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    poller = sub.add_parser("topic-poller", help="observe Kafka topics under consumption retention, as a service",
                            description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    poller.add_argument("--every", type=duration(positive=True), default=10.0, metavar="DURATION",
                        help="a pass starts this often, or at once after a pass that took longer (default 10s)")
    poller.add_argument("--once", action="store_true", help="one pass, then exit")
    poller.add_argument("--no-follow-commits", dest="follow_commits", action="store_false",
                        help="observe topics on passes only, not as their groups commit (needs no Read on "
                             "__consumer_offsets)")
    poller.add_argument("--heartbeat", type=duration(positive=True), default=60.0, metavar="DURATION",
                        help="publish a topic's cut at least this often, changed or not (default 60s)")
    metrics_flags(poller)
    common(poller)
    poller.set_defaults(run=cmd_topic_poller)
