"""``reclaim keys new | list | public | retire``: the keyring files that sign and verify reclaim's records."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from reclaim.exits import Unavailable, UsageError
from reclaim.security.errors import KeyringError
from reclaim.security.keyring import ROLES, Algorithm, Keyring, KeyStatus, load_keyring, new_key
from reclaim.settings import Settings

DESCRIPTION = """\
new: add a freshly generated key to --keyring FILE (created mode 0600 when missing). The controller gets
two keys unless --algorithm is given: ID (ed25519: topologies, recorded cuts) and ID.deletes (hmac-sha256:
pending deletes, which every worker verifies per record). A subscriber key names its subscriber
(--subject). list: the keys of FILE, without key material. public: what a verifier needs, to append to
its own keyring: ed25519 public halves, and hmac-sha256 secrets only with --with-secrets (whoever holds
one can sign too: give it to the workers alone). retire: mark --id retired; it then neither signs nor
verifies (rotation: add the new key, roll it out to the verifiers, then to the signer, then retire).
Secret key material is never printed except by `public --with-secrets`."""


def cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    path = args.keyring or settings.keyring
    if path is None:
        raise UsageError("keys needs a keyring file: --keyring FILE (or RECLAIM_KEYRING)")
    path = Path(path)
    if args.action == "new":
        return _new(args, path)
    keyring = _load(path)
    if args.action == "list":
        rows = [{"id": k.id, "role": k.role, "subject": k.subject, "algorithm": k.algorithm.value,
                 "status": k.status.value, "signs": k.can_sign} for k in keyring]
        if args.json:
            print(json.dumps(rows, indent=2))
        for row in [] if args.json else rows:
            subject = f" subject={row['subject']}" if row["subject"] else ""
            print(f"{row['id']}  role={row['role']}{subject}  {row['algorithm']}  {row['status']}"
                  f"{'  (signs)' if row['signs'] else ''}")
        return 0
    if args.action == "public":
        roles = {args.role} if args.role else set(ROLES)
        shown = [k.public_only() for k in keyring if k.role in roles
                 and (k.algorithm is Algorithm.ED25519 or args.with_secrets)]
        print(Keyring(shown).to_toml(), end="")
        return 0
    if not args.id:
        raise UsageError("keys retire needs --id")
    key = keyring.get(args.id)
    if key is None:
        raise UsageError(f"keyring {path} has no key {args.id!r}")
    _write(path, Keyring(replace(k, status=KeyStatus.RETIRED) if k.id == args.id else k for k in keyring))
    print(f"key {args.id} retired in {path}")
    return 0


def _new(args: argparse.Namespace, path: Path) -> int:
    if args.role not in ROLES:
        raise UsageError(f"--role must be one of {', '.join(ROLES)}, got {args.role!r}")
    if not args.id:
        raise UsageError("keys new needs --id, e.g. --id controller-2026-11")
    if (args.role == "subscriber") != bool(args.subject):
        raise UsageError("--subject names the subscriber of a subscriber key (and only of one)")
    existing = _load(path) if path.exists() else Keyring()
    if args.algorithm:
        wanted = [(args.id, Algorithm(args.algorithm))]
    elif args.role == "controller":
        wanted = [(args.id, Algorithm.ED25519), (f"{args.id}.deletes", Algorithm.HMAC_SHA256)]
    else:
        wanted = [(args.id, Algorithm.ED25519)]
    try:
        added = [new_key(key_id, args.role, algorithm, args.subject) for key_id, algorithm in wanted]
        _write(path, Keyring([*existing, *added]))
    except KeyringError as exc:
        raise UsageError(f"keyring {path}: {exc}") from exc
    for key in added:
        print(f"key {key.id} ({key.role}{' ' + key.subject if key.subject else ''}, {key.algorithm.value}) "
              f"added to {path}")
    return 0


def _load(path: Path) -> Keyring:
    try:
        return load_keyring(path)
    except KeyringError as exc:
        raise Unavailable(str(exc)) from exc


def _write(path: Path, keyring: Keyring) -> None:
    """Replace ``path`` with ``keyring`` at once, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".keyring-", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(keyring.to_toml())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def register(sub: argparse._SubParsersAction, common: Callable[[argparse.ArgumentParser], None]) -> None:  # type: ignore[type-arg]
    keys = sub.add_parser("keys", help="create, list, export or retire the keys that sign reclaim's records",
                          description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    keys.add_argument("action", choices=["new", "list", "public", "retire"])
    keys.add_argument("--keyring", type=Path, help="the keyring file (default RECLAIM_KEYRING)")
    keys.add_argument("--role", help=f"new: the key's role, one of {', '.join(ROLES)}; public: only this role's keys")
    keys.add_argument("--id", help="new: the key id (letters, digits, '.', '_', '-'); retire: the key to retire")
    keys.add_argument("--subject", help="new: the subscriber a subscriber key signs for")
    keys.add_argument("--algorithm", choices=[a.value for a in Algorithm], help="new: one key of this algorithm")
    keys.add_argument("--with-secrets", action="store_true", help="public: include hmac-sha256 secrets")
    keys.add_argument("--json", action="store_true", help="list: as JSON")
    common(keys)
    keys.set_defaults(run=cmd_keys)

