"""``reclaim local up | down | status``: the local stack (:mod:`reclaim.localstack.stack`)."""

from __future__ import annotations

import argparse
from typing import Any

from reclaim.cli.common import GROUP_EPILOG, Common, add_verb, add_verbs, print_json
from reclaim.exits import ExitCode
from reclaim.localstack import stack
from reclaim.localstack.emulators import TIER2_CHOICES
from reclaim.settings import Settings


def cmd_local(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "up":
        state = stack.up(settings, secure=args.secure, tier2=args.tier2)
        print(f"kafka  bootstrap={state.bootstrap} pid={state.kafka_pid}"
              + (" SASL_SSL (SCRAM-SHA-512), ACLs enforced" if state.kafka_secure else
                 " PLAINTEXT: no authentication, no ACLs (`reclaim local up --secure` for SASL_SSL)"))
        if state.kafka_secure:
            ca, admin, config = stack.secure_files(settings.state_dir)
            print(f"       CA certificate: {ca}")
            print(f"       the admin (a super user), password included, mode 0600: librdkafka properties {admin}, "
                  f"reclaim config file {config} (reclaim --config {config} ...)")
        print(f"s3     endpoint={state.s3_url} bucket={state.s3_bucket} pid={state.s3_pid}")
        for emulator in state.started():
            pid, url = state.emulator(emulator)
            store = emulator.store_setting.partition("_")[2]  # bucket, container
            print(f"{emulator.name:6} endpoint={url} {store}={getattr(state, emulator.store_setting)} pid={pid}")
        print(f"settings: reclaim --config {stack.local_config(settings.state_dir)} <command> (or RECLAIM_CONFIG): "
              "every command finds the stack through this file only")
    elif args.action == "down":
        stack.down(settings)
        print("local stack stopped")
    else:
        report = stack.status(settings)
        if args.json:
            print_json(report)
        elif all(facts["state"] == stack.STOPPED for facts in report.values()):
            print(f"local stack stopped ({settings.state_dir}): `reclaim local up` starts it")
        else:
            for part, facts in report.items():
                print(_status_line(part, facts))
        # A stack that is not running is 3 as well, as an init script's `status` says "not running".
        return ExitCode.OK if all(part["healthy"] for part in report.values()) else ExitCode.UNHEALTHY
    return 0


def _status_line(part: str, facts: dict[str, Any]) -> str:
    """One server's line: its state, then (unless stopped, when its pid and address mean nothing) its facts."""
    label = {stack.RUNNING: "healthy", stack.STOPPED: "stopped"}.get(facts["state"], "NOT HEALTHY")
    if facts["state"] == stack.STOPPED:
        return f"{part:6} {label}"
    details = " ".join(f"{key}={value}" for key, value in facts.items() if key not in ("healthy", "state"))
    return f"{part:6} {label:12} {details}"


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    local = sub.add_parser("local", help="start, stop or inspect the local Kafka broker, S3 endpoint and emulators",
                           description="The local stack: a Kafka broker and an S3 endpoint under --state-dir, for "
                                       "trying reclaim and for its tests. `local up --tier2 gcs` adds a GCS "
                                       "emulator (fake-gcs-server), `--tier2 azure` an Azure Blob one (Azurite).",
                           epilog=GROUP_EPILOG.format(group="local"))
    verbs = add_verbs(local)
    up = add_verb(verbs, "up", "start the broker, the S3 endpoint and any tier-2 emulator asked for",
                  "Start the local Kafka broker and S3 endpoint (or find them running) and write the config file "
                  "<state-dir>/local.toml that every command reads to find them. With --tier2 gcs or azure, a "
                  "GCS or Azure Blob emulator runs as well, and local.toml configures its binding.",
                  ["reclaim local up", "reclaim local up --secure --state-dir /tmp/reclaim-secure",
                   "reclaim local up --tier2 gcs"])
    up.add_argument("--secure", action="store_true",
                    help="run the broker with SASL_SSL (SCRAM-SHA-512), a CA of its own and ACLs enforced; "
                         "the default stack is PLAINTEXT")
    up.add_argument("--tier2", choices=TIER2_CHOICES, default="s3",
                    help="an emulator to run next to the S3 endpoint, which always runs: gcs is fake-gcs-server "
                         "(built with Go on first use), azure is Azurite (installed with npm on first use); "
                         "s3, the default, adds none")
    down = add_verb(verbs, "down", "stop the broker, the S3 endpoint and the emulators",
                    "Stop the processes the local stack started; its data stays under --state-dir.",
                    ["reclaim local down"])
    status = add_verb(verbs, "status", "each server's state: exit 0 all healthy, 3 otherwise",
                      "Each server's state, pid and address. Exit 0 when all are healthy, 3 when the stack is "
                      "stopped or part of it is not healthy.",
                      ["reclaim local status", "reclaim local status --json"])
    status.add_argument("--json", action="store_true", help="print the report as JSON")
    for verb in (up, down, status):
        common(verb)
        verb.set_defaults(run=cmd_local)
