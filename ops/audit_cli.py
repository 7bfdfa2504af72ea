"""``reclaim audit``: tier-2 listed against the metadata store."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ops.settings import Settings


def cmd_audit(args: argparse.Namespace, settings: Settings) -> int:
    from ops.audit import audit_binding
    from ops.runtime import metadata_store, storage_bindings

    store, bindings = metadata_store(settings), storage_bindings(settings)
    clean = True
    try:
        for name in bindings.names():
            result = audit_binding(store, bindings, name)
            clean = clean and result.clean
            print(f"{name}: {result.live} live, {result.pending} pending deletion, {len(result.orphans)} orphans, "
                  f"{len(result.missing)} missing")
            for orphan in result.orphans[: args.limit]:
                print(f"  orphan  {orphan}")
            for missing in result.missing[: args.limit]:
                print(f"  missing {missing}")
    finally:
        bindings.close()
        store.close()
    return 0 if clean else 1


def register(sub: argparse._SubParsersAction, common: Callable[[argparse.ArgumentParser], None]) -> None:  # type: ignore[type-arg]
    audit = sub.add_parser(
        "audit", help="list tier-2 against the metadata store: live, pending deletion, orphans, missing",
        description="Exit 0 when every object is claimed by a chunk row and every live chunk has its object; "
                    "1 otherwise. Objects whose row is inactive are pending deletion (phase 2 has them).")
    audit.add_argument("--limit", type=int, default=20, help="orphans and missing chunks to list (default 20)")
    audit.add_argument("--metadata-path", type=Path, help="SQLite metadata store (default <state-dir>/metadata.db)")
    audit.add_argument("--fs-root", type=Path, help="filesystem tier-2 root (default <state-dir>/tier2)")
    common(audit)
    audit.set_defaults(run=cmd_audit)
