"""``reclaim keys new | list | public | retire | grant | ungrant``: the keyring files that sign and verify
reclaim's records, and the streams each subscriber key acts for."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

from reclaim.cli.common import GROUP_EPILOG, Common, add_verb, add_verbs
from reclaim.exits import Unavailable, UsageError
from reclaim.security.errors import KeyringError
from reclaim.security.keyring import ROLES, Algorithm, Keyring, KeyStatus, load_keyring, new_key
from reclaim.settings import Settings

DESCRIPTION = """\
new: add a freshly generated key to --keyring FILE (created mode 0600 when missing). The controller gets
two keys unless --algorithm is given: ID (ed25519: topologies, recorded cuts) and ID.deletes (hmac-sha256:
pending deletes, which every worker verifies per record). A subscriber key names its subscriber
(--subject) and the streams it acts for (--stream, once per stream name or pattern such as 'billing/*');
with none it acts for no stream. list: the keys of FILE and their grants, without key material. public:
what a verifier needs, to append to its own keyring: ed25519 public halves with their grants, and
hmac-sha256 secrets only with --with-secrets (whoever holds one can sign too: give it to the workers
alone). retire: mark --id retired; it then neither signs nor verifies (rotation: add the new key, roll it
out to the verifiers, then to the signer, then retire). grant, ungrant: add or remove --stream on the
subscriber key --id; ungrant removes a grant as listed, not the streams a pattern matches. A grant is
checked by the verifiers (the retention job), so change it in their keyrings: running processes follow
the file within seconds. Secret key material is never printed except by `public --with-secrets`."""


def cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    path = args.keyring or settings.keyring
    if path is None:
        raise UsageError("keys needs a keyring file: --keyring FILE (or RECLAIM_KEYRING)")
    path = Path(path)
    if args.action == "new":
        return _new(args, path)
    keyring = _load(path)
    if args.action in ("grant", "ungrant"):
        return _grant(args, path, keyring)
    if args.action == "list":
        rows = [{"id": k.id, "role": k.role, "subject": k.subject, "algorithm": k.algorithm.value,
                 "status": k.status.value, "signs": k.can_sign,
                 **({"streams": list(k.streams or ())} if k.role == "subscriber" else {})} for k in keyring]
        if args.json:
            print(json.dumps(rows, indent=2))
        for listed, row in [] if args.json else zip(keyring, rows, strict=True):
            subject = f" subject={row['subject']}" if row["subject"] else ""
            streams = f"  streams={','.join(listed.streams or ()) or '(none)'}" if listed.role == "subscriber" else ""
            print(f"{row['id']}  role={row['role']}{subject}  {row['algorithm']}  {row['status']}"
                  f"{'  (signs)' if row['signs'] else ''}{streams}")
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
    if args.stream and args.role != "subscriber":
        raise UsageError("--stream grants a subscriber key a stream (and only a subscriber key)")
    existing = _load(path) if path.exists() else Keyring()
    if args.algorithm:
        wanted = [(args.id, Algorithm(args.algorithm))]
    elif args.role == "controller":
        wanted = [(args.id, Algorithm.ED25519), (f"{args.id}.deletes", Algorithm.HMAC_SHA256)]
    else:
        wanted = [(args.id, Algorithm.ED25519)]
    try:
        streams = _unique(args.stream) if args.role == "subscriber" else None
        added = [new_key(key_id, args.role, algorithm, args.subject, streams) for key_id, algorithm in wanted]
        _write(path, Keyring([*existing, *added]))
    except KeyringError as exc:
        raise UsageError(f"keyring {path}: {exc}") from exc
    for key in added:
        granted = "" if key.streams is None else f", streams {','.join(key.streams) or '(none)'}"
        print(f"key {key.id} ({key.role}{' ' + key.subject if key.subject else ''}, {key.algorithm.value}"
              f"{granted}) added to {path}")
    return 0


def _grant(args: argparse.Namespace, path: Path, keyring: Keyring) -> int:
    """Add (grant) or remove (ungrant) ``--stream`` on the subscriber key ``--id``, the file replaced whole."""
    if not args.id or not args.stream:
        raise UsageError(f"keys {args.action} needs --id KEY and --stream NAME_OR_PATTERN")
    key = keyring.get(args.id)
    if key is None:
        raise UsageError(f"keyring {path} has no key {args.id!r}")
    if key.role != "subscriber":
        raise UsageError(f"key {args.id} is the {key.role} role's: only a subscriber key is granted streams")
    held = list(key.streams or ())
    if args.action == "grant":
        streams = _unique([*held, *args.stream])
    else:
        absent = [stream for stream in args.stream if stream not in held]
        if absent:
            raise UsageError(f"key {args.id} has no grant {absent[0]!r} (its grants: {','.join(held) or 'none'}); "
                             "ungrant removes a grant as listed")
        streams = [stream for stream in held if stream not in args.stream]
    try:
        _write(path, Keyring(replace(k, streams=tuple(streams)) if k.id == args.id else k for k in keyring))
    except KeyringError as exc:
        raise UsageError(f"keyring {path}: {exc}") from exc
    print(f"key {args.id} in {path}: streams {','.join(streams) or '(none)'}")
    return 0


def _unique(streams: list[str] | None) -> list[str]:
    """``streams`` in order, each once."""
    return list(dict.fromkeys(streams or ()))


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


def register(sub: argparse._SubParsersAction, common: Common) -> None:  # type: ignore[type-arg]
    keys = sub.add_parser("keys", help="create, list, export, retire or grant streams to the keys that sign "
                          "reclaim's records",
                          description=DESCRIPTION, epilog=GROUP_EPILOG.format(group="keys"),
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = add_verbs(keys)
    keys.add_argument("--keyring", type=Path, help=argparse.SUPPRESS)  # before the verb too
    new = add_verb(verbs, "new", "add a freshly generated key to the keyring",
                   "Add a freshly generated key to --keyring FILE (created mode 0600 when missing). The controller "
                   "gets two keys unless --algorithm is given: ID (ed25519) and ID.deletes (hmac-sha256). A "
                   "subscriber key names its subscriber (--subject) and the streams it acts for (--stream).",
                   ["reclaim keys new --role controller --id controller-2026-11 --keyring controller.toml",
                    "reclaim keys new --role subscriber --id billing-1 --subject billing --stream 'billing/*' "
                    "--keyring job.toml"])
    new.add_argument("--role", help=f"the key's role, one of {', '.join(ROLES)}")
    new.add_argument("--id", help="the key id (letters, digits, '.', '_', '-')")
    new.add_argument("--subject", help="the subscriber a subscriber key signs for")
    stream_flag(new)
    new.add_argument("--algorithm", choices=[a.value for a in Algorithm], help="one key of this algorithm")
    listing = add_verb(verbs, "list", "the keys and their grants, without key material",
                       "The keys of the keyring, their roles, algorithms, status and grants, without key material.",
                       ["reclaim keys list --keyring controller.toml", "reclaim keys list --json"])
    listing.add_argument("--json", action="store_true", help="print the keys as JSON")
    public = add_verb(verbs, "public", "what a verifier needs, to append to its own keyring",
                      "What a verifier needs, to append to its own keyring: ed25519 public halves with their grants, "
                      "and hmac-sha256 secrets only with --with-secrets (whoever holds one can sign too: give it to "
                      "the workers alone).",
                      ["reclaim keys public --keyring controller.toml >> verifier.toml",
                       "reclaim keys public --role controller --with-secrets --keyring controller.toml"])
    public.add_argument("--role", help="only this role's keys")
    public.add_argument("--with-secrets", action="store_true", help="include hmac-sha256 secrets")
    retire = add_verb(verbs, "retire", "mark a key retired: it then neither signs nor verifies",
                      "Mark --id retired; it then neither signs nor verifies. Rotation: add the new key, roll it out "
                      "to the verifiers, then to the signer, then retire the old one.",
                      ["reclaim keys retire --id controller-2026-10 --keyring controller.toml"])
    retire.add_argument("--id", help="the key to retire")
    changed = []
    for verb, what in (("grant", "add"), ("ungrant", "remove")):
        parser = add_verb(verbs, verb, f"{what} streams a subscriber key acts for",
                          f"{what.capitalize()} --stream on the subscriber key --id. ungrant removes a grant as "
                          "listed, not the streams a pattern matches. The verifiers (the retention job) check grants: "
                          "change them in their keyrings; running processes follow the file within seconds.",
                          [f"reclaim keys {verb} --id billing-1 --stream scope/orders --keyring job.toml"])
        parser.add_argument("--id", help="the subscriber key to change")
        stream_flag(parser)
        changed.append(parser)
    for parser in (new, listing, public, retire, *changed):
        parser.add_argument("--keyring", type=Path, default=argparse.SUPPRESS,
                            help="the keyring file (default RECLAIM_KEYRING)")
        common(parser, connects=False)
        parser.set_defaults(run=cmd_keys)


def stream_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stream", action="append", metavar="NAME_OR_PATTERN",
                        help="a stream the subscriber key acts for, by name (scope/orders) or fnmatch pattern "
                             "(billing/*); repeat for more")
