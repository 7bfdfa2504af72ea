"""``reclaim config show``: the settings in effect, every secret masked."""

from __future__ import annotations

import argparse
from pathlib import Path

from reclaim.cli.common import Common, print_json
from reclaim.services import client_security
from reclaim.settings import Settings, redact_password


def cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    values = {name: (str(value) if isinstance(value, Path) else value) for name, value in asdict(settings).items()}
    # The access key is an identifier, shown as configured; a secret's file shows as its path.
    for secret in ("s3_secret_key", "s3_session_token", "schema_registry_basic_auth"):
        if values[secret]:
            values[secret] = "********"
    for url in ("metadata_url", "schema_registry_url"):
        if values[url]:
            values[url] = redact_password(values[url])
    kafka = client_security.shown_kafka_properties()
    if args.json:
        print_json({**values, "kafka": kafka})
    else:
        for name, value in values.items():
            shown = ",".join(map(str, value)) if isinstance(value, tuple | list) else value
            print(f"{name} = {shown}")
        for name, value in kafka.items():
            print(f"kafka.{name} = {value}")
    return 0


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    config = sub.add_parser("config", help="show the settings in effect (flags, environment, config file, defaults)")
    config.add_argument("action", choices=["show"])
    config.add_argument("--json", action="store_true", help="print the settings as JSON")
    common(config)
    config.set_defaults(run=cmd_config)
