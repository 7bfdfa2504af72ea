"""``reclaim topic-applier``: the Kafka-topic applier (:mod:`reclaim.services.topic_applier`) as a process."""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from reclaim.cli.common import Common, metrics_flags
from reclaim.logs import log_as_service
from reclaim.settings import METADATA_URL_HELP, Settings

log = logging.getLogger(__name__)

_DESCRIPTION = """\
Apply the retention job's DeleteRecords decisions for Kafka topics under consumption retention until SIGTERM
or SIGINT. A decision is obeyed only when it is signed by the retention job's key, the topic is under the
same active policy it was decided under (an admin's, on the topic-retention topic) and the topic still has
the id it was decided for. Each partition moved is journaled in the metadata store (`reclaim topics
retention history TOPIC`). A broker that does not answer is retried in place; a DeleteRecords that keeps
failing goes to the topic-truncation dead-letter topic with its reason. Run one or more: they share the
decisions as one consumer group. With --once it applies the decisions on the topic now, prints how each
ended and exits."""


def cmd_topic_applier(args: argparse.Namespace, settings: Settings) -> int:
    from reclaim.localstack.procs import exit_status, stop_on_signals
    from reclaim.services import preflight, runtime
    from reclaim.services.topic_applier import TopicApplier, TopicApplierConfig
    from reclaim.tools.topic_retention import PolicyFollower
    from reclaim.tools.topics import admin_client

    runtime.require_record_auth(settings, "the Kafka-topic applier")
    if not args.once:  # one pass prints what it did; a service logs each step
        log_as_service()
    names = runtime.topic_names(settings)
    address = preflight.broker(settings)
    preflight.require_topics(address, [names.topic_retention, names.topic_truncation, names.topic_truncation_dlq])
    stop = stop_on_signals("finishing the decision in hand", log.info)
    if settings.metrics_port is not None:
        preflight.serve_metrics(settings.metrics_port, args.metrics_addr)
    with ExitStack() as stack:
        store = runtime.metadata_store(settings)
        stack.callback(store.close)
        verifier = runtime.record_verifier(settings)
        follower = PolicyFollower(address, names.topic_retention, runtime.codec(settings), verifier)
        stack.callback(follower.close)
        config = TopicApplierConfig(address, names.topic_truncation, names.topic_truncation_dlq)
        applier = TopicApplier(config, admin_client(address), store, runtime.codec(settings), follower.refresh,
                               verifier)
        if args.once:
            try:
                outcomes = Counter(outcome.name.lower().replace("_", " ") for outcome in applier.catch_up())
            finally:
                applier.close()
            print(f"{sum(outcomes.values())} decision(s) applied" + "".join(
                f", {count} {outcome}" for outcome, count in sorted(outcomes.items())))
            return 0
        log.info("Kafka-topic applier: decisions from %s, dead letters to %s", config.topic, config.dlq)
        applier.run(stop)
    return exit_status(0, stop)


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    applier = sub.add_parser("topic-applier", help="apply DeleteRecords decisions to Kafka topics, as a service",
                             description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    applier.add_argument("--once", action="store_true",
                         help="apply the decisions on the topic now, then exit")
    applier.add_argument("--metadata-path", type=Path,
                         help="SQLite metadata store, where the journal is kept (default <state-dir>/metadata.db)")
    applier.add_argument("--metadata-url", help=METADATA_URL_HELP)
    metrics_flags(applier)
    common(applier)
    applier.set_defaults(run=cmd_topic_applier)
