"""``reclaim topics create | describe``: reclaim's topics (:mod:`reclaim.tools.topics`)."""

from __future__ import annotations

import argparse
import sys

from reclaim.cli.common import GROUP_EPILOG, Common, add_verb, add_verbs, json_flag, print_json
from reclaim.cli.topic_retention import register_verbs
from reclaim.exits import ExitCode
from reclaim.services import preflight
from reclaim.settings import Settings


def cmd_topics(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from reclaim.tools.topics import admin_client, create_topics, describe_topics, mismatches, topic_specs

    admin = admin_client(preflight.broker(settings))
    specs = topic_specs(settings)
    if args.action == "create":
        outcomes = create_topics(admin, specs, settings.replication_factor)
    rows = describe_topics(admin, specs)
    differ = mismatches(specs, rows)
    if args.json:
        if args.action == "create":
            rows = [{**row, "outcome": outcomes.get(str(row["topic"]))} for row in rows]
        print_json([{**row, "mismatch": differ.get(str(row["topic"]))} for row in rows])
    elif args.action == "create":
        for topic, outcome in outcomes.items():
            print(f"{outcome:8} {topic}" + (f"  MISMATCH: {differ[topic]}" if topic in differ else ""))
    else:
        table = Table("topic", "partitions", "cleanup.policy", "retention.ms", "mismatch", box=None)
        for row in rows:
            if not row["exists"]:
                table.add_row(str(row["topic"]), "(missing)", "", "", "")
                continue
            table.add_row(str(row["topic"]), str(row["partitions"]), str(row["cleanup.policy"]),
                          str(row["retention.ms"]), differ.get(str(row["topic"]), ""))
        Console(width=200).print(table)
    for topic, problem in differ.items():
        print(f"reclaim: topic {topic} differs from its configuration: {problem} (an existing topic is never "
              "changed by reclaim: alter or recreate it)", file=sys.stderr)
    return ExitCode.FINDINGS if differ else ExitCode.OK


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    topics = sub.add_parser("topics", help="create or describe reclaim's topics; consumption retention of any topic",
                            description="reclaim's topics under --topic-prefix: the deletion topic, its retry tiers, "
                                        "the DLQ and the streams' topics (create, describe; exit 1 when a topic "
                                        "differs from its configuration: an existing topic is never changed). And "
                                        "consumption retention for any Kafka topic: its consumer groups hold its "
                                        "records until they have read them (retain, retention).",
                            epilog=GROUP_EPILOG.format(group="topics"))
    verbs = add_verbs(topics)
    json_flag(topics)
    create = add_verb(verbs, "create", "create the topics that are missing, then describe them all",
                      "Create the topics that are missing (idempotent) and print each one's outcome.",
                      ["reclaim topics create", "reclaim topics create --partitions 8 --bootstrap kafka-1:9092"])
    describe = add_verb(verbs, "describe", "each topic's partitions, cleanup policy and retention",
                        "Each topic's partitions, cleanup.policy and retention.ms, and how it differs from its "
                        "configuration.", ["reclaim topics describe", "reclaim topics describe --json"])
    for verb in (create, describe):
        verb.add_argument("--partitions", type=int, help="partitions per topic (default 4)")
        json_flag(verb, "print the topics as JSON")
        common(verb)
        verb.set_defaults(run=cmd_topics)
    register_verbs(verbs, common)
