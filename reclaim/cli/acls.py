"""``reclaim acls plan | apply``: show or grant, through the Admin API, the ACLs of one reclaim role."""

from __future__ import annotations

import argparse
import json

from reclaim.cli.common import GROUP_EPILOG, Common, add_verb, add_verbs, json_flag
from reclaim.services import preflight
from reclaim.settings import Settings
from reclaim.tools.acls import ROLES, Names, apply, binding_rows, check_principal, plan

DESCRIPTION = """\
plan: print the ACLs a reclaim role needs for --principal (nothing is contacted). apply: create those the
principal lacks on the broker (idempotent; nothing is revoked); it needs a principal that may alter ACLs.
Topic and group names follow --topic-prefix, --retry-delays, --group-id and --truncation-group-id as the
role's processes are run with. Roles:
""" + "\n".join(f"  {role:19} {what}" for role, what in ROLES.items())


def cmd_acls(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    principal = check_principal(args.acl_principal)
    names = Names.from_settings(settings, args.retained_topic or (), args.retained_group or (), args.retained_sizes)
    grants = plan(args.role, names)  # refusals come before the broker is contacted
    rows = binding_rows(principal, grants)
    if args.action == "apply":
        admin = _admin(settings)
        outcome = apply(admin, principal, grants)
        rows = [{**row, "outcome": outcome[grant]} for row, grant in zip(rows, grants, strict=True)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    columns = ["resource", "pattern", "name", "operation", *(["outcome"] if args.action == "apply" else []), "why"]
    table = Table(*columns, box=None, title=f"{args.role} as {principal} (ALLOW, any host)", title_justify="left")
    for row in rows:
        table.add_row(*(row[column] for column in columns))
    Console(width=200).print(table)
    return 0


def _admin(settings: Settings) -> object:
    from reclaim.tools.topics import admin_client

    return admin_client(preflight.broker(settings))


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    acls = sub.add_parser("acls", help="plan or apply the Kafka ACLs of a reclaim role for a principal",
                          description=DESCRIPTION, epilog=GROUP_EPILOG.format(group="acls"),
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = add_verbs(acls)
    json_flag(acls)
    planning = add_verb(verbs, "plan", "print the ACLs a role needs (nothing is contacted)", DESCRIPTION,
                        ["reclaim acls plan --role worker --principal User:reclaim-worker",
                         "reclaim acls plan --role admin --principal User:ops --json"])
    applying = add_verb(verbs, "apply", "create on the broker the ACLs the principal lacks (idempotent)",
                        DESCRIPTION, ["reclaim acls apply --role worker --principal User:reclaim-worker "
                                      "--config admin.toml"])
    for verb in (planning, applying):
        # Checked by the command (one line, exit 64), not by argparse's choices (usage and error, two lines).
        verb.add_argument("--role", required=True, help=f"one of {', '.join(ROLES)}")
        verb.add_argument("--principal", dest="acl_principal", required=True, metavar="User:NAME",
                          help="the Kafka principal to grant, e.g. User:reclaim-worker")
        verb.add_argument("--retry-delays", help="retry tier delays in seconds, e.g. 10,60,600 (RECLAIM_RETRY_DELAYS)")
        verb.add_argument("--group-id", help="the workers' consumer group (RECLAIM_GROUP_ID, default reclaim-deletion)")
        verb.add_argument("--truncation-group-id",
                          help="the truncation applier's consumer group (default reclaim-truncation)")
        verb.add_argument("--retained-topic", action="append", metavar="NAME",
                          help="topic-retention and admin: a Kafka topic under consumption retention (NAME* for a "
                               "prefix); repeatable")
        verb.add_argument("--retained-group", action="append", metavar="NAME",
                          help="topic-retention and admin: a consumer group that holds one (NAME* for a prefix); "
                               "repeatable")
        verb.add_argument("--retained-sizes", action="store_true",
                          help="topic-retention: Describe on the cluster, for the partition sizes a policy's "
                               "--max-bytes needs (DescribeLogDirs; it also lets the principal list ACLs)")
        json_flag(verb, "print the bindings as JSON")
        common(verb)
        verb.set_defaults(run=cmd_acls)
