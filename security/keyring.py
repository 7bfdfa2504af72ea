"""Keyrings: the keys a process signs records with and the keys it verifies them by, from a TOML file.

A keyring file lists keys as ``[[key]]`` tables::

    [[key]]
    id = "controller-2026-11"      # ASCII letters, digits, '.', '_', '-'; at most 64
    role = "controller"            # who signs with it (see ROLES)
    algorithm = "hmac-sha256"      # or "ed25519"
    secret = "base64..."           # hmac-sha256: the shared secret (32 bytes or more)
    status = "active"              # or "retired": a retired key neither signs nor verifies

    [[key]]
    id = "alice-1"
    role = "subscriber"
    subject = "alice"              # a subscriber key signs for this subscriber only
    streams = ["scope/orders", "billing/*"]   # and acts for these streams only (fnmatch patterns)
    algorithm = "ed25519"
    public = "base64..."           # 32 bytes; a signer's file has ``private`` (the 32-byte seed) instead

A key with a secret or private half can sign; every key can verify. Several keys of one role may be
active at once (rotation): a signer signs with the last active one listed that it can sign with. The
controller signs pending deletes with an hmac-sha256 key when it has one (the worker verifies every
record, so the cheaper check; see docs/operations/security.md) and everything else with an ed25519
key, so that the retention job, which verifies topologies and recorded cuts, holds no secret of it.

A subscriber key's ``streams`` are its grants: a verifier refuses its cuts and registrations for any other
stream, and a subscriber key without ``streams`` acts for no stream. The grant lives in the keyring, the
verifier's trust anchor, so it travels and changes with the keys (docs/operations/security.md, "Grants").
"""

from __future__ import annotations

import base64
import binascii
import enum
import fnmatch
import logging
import os
import re
import stat
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from reclaim.secret_files import read_secret_bytes
from reclaim.security.errors import KeyringError

log = logging.getLogger(__name__)

ROLES = ("controller", "worker", "truncation-applier", "retention-job", "subscriber", "operator", "admin",
         "topic-retention")
"""The roles a reclaim principal has: the same names as ``reclaim acls --role``."""

MIN_SECRET_BYTES = 32
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_FIELDS = frozenset({"id", "role", "subject", "streams", "algorithm", "secret", "private", "public", "status"})
MAX_GRANTS = 1000
"""The most stream names or patterns one subscriber key may be granted."""
MAX_GRANT_CHARS = 255


class Algorithm(enum.Enum):
    """How a key signs: a shared secret (fast; whoever verifies could sign) or a key pair (a verifier
    holding only the public half cannot sign)."""

    HMAC_SHA256 = "hmac-sha256"
    ED25519 = "ed25519"


class KeyStatus(enum.Enum):
    ACTIVE = "active"
    RETIRED = "retired"


@dataclass(frozen=True)
class Key:
    """One key of a keyring. ``secret`` (HMAC) or ``private`` (Ed25519 seed) makes it a signing key."""

    id: str
    role: str
    algorithm: Algorithm
    status: KeyStatus = KeyStatus.ACTIVE
    subject: str | None = None
    secret: bytes | None = field(default=None, repr=False)
    private: bytes | None = field(default=None, repr=False)
    public: bytes | None = None
    streams: tuple[str, ...] | None = None
    """A subscriber key's grants: the stream names or ``fnmatch`` patterns it acts for (None: not given, none)."""

    def __post_init__(self) -> None:
        if not _KEY_ID.fullmatch(self.id):
            raise KeyringError(f"key id {self.id!r} must be 1 to 64 ASCII letters, digits, '.', '_' or '-'")
        if self.role not in ROLES:
            raise KeyringError(f"key {self.id}: unknown role {self.role!r} (one of {', '.join(ROLES)})")
        if self.role == "subscriber" and not self.subject:
            raise KeyringError(f"key {self.id}: a subscriber key names its subscriber (subject = \"...\")")
        if self.streams is not None:
            _check_grants(self.id, self.role, self.streams)
        if self.algorithm is Algorithm.HMAC_SHA256:
            if self.secret is None or len(self.secret) < MIN_SECRET_BYTES:
                raise KeyringError(f"key {self.id}: an hmac-sha256 key needs a secret of at least "
                                   f"{MIN_SECRET_BYTES} bytes (base64)")
            if self.private is not None or self.public is not None:
                raise KeyringError(f"key {self.id}: an hmac-sha256 key has a secret, not a private or public half")
            return
        if self.secret is not None:
            raise KeyringError(f"key {self.id}: an ed25519 key has a private or public half, not a secret")
        if self.private is not None:
            if len(self.private) != 32:
                raise KeyringError(f"key {self.id}: an ed25519 private half is 32 bytes")
            derived = public_of(self.private)
            if self.public is not None and self.public != derived:
                raise KeyringError(f"key {self.id}: its public half is not the private half's")
            object.__setattr__(self, "public", derived)
        if self.public is None or len(self.public) != 32:
            raise KeyringError(f"key {self.id}: an ed25519 key needs a 32-byte public half (or the private one)")

    @property
    def can_sign(self) -> bool:
        return self.status is KeyStatus.ACTIVE and (self.secret is not None or self.private is not None)

    def grants(self, stream: str) -> bool:
        """Whether this key acts for ``stream``: one of its ``streams`` names it or matches it as a pattern."""
        if self.streams is None:
            return False
        return stream in self.streams or any(fnmatch.fnmatchcase(stream, pattern) for pattern in self.streams)

    def public_only(self) -> Key:
        """This key as a verifier of an Ed25519 key should hold it: without its private half, with its grants.

        An HMAC key has no public half: its verifiers hold the secret (and so could sign)."""
        if self.algorithm is Algorithm.ED25519:
            return Key(self.id, self.role, self.algorithm, self.status, self.subject, public=self.public,
                       streams=self.streams)
        return self

    def to_toml(self, *, public_only: bool = False) -> str:
        """The key as a ``[[key]]`` table of a keyring file."""
        key = self.public_only() if public_only else self
        lines = ["[[key]]", f'id = "{key.id}"', f'role = "{key.role}"']
        if key.subject is not None:
            lines.append(f"subject = {_toml_string(key.subject)}")
        if key.streams is not None:
            lines.append(f"streams = [{', '.join(_toml_string(stream) for stream in key.streams)}]")
        lines += [f'algorithm = "{key.algorithm.value}"', f'status = "{key.status.value}"']
        for name in ("secret", "private", "public"):
            value = getattr(key, name)
            if value is not None and not (name == "public" and key.private is not None):
                lines.append(f'{name} = "{base64.b64encode(value).decode()}"')
        return "\n".join(lines) + "\n"


def _check_grants(key_id: str, role: str, streams: object) -> None:
    if role != "subscriber":
        raise KeyringError(f"key {key_id}: only a subscriber key is granted streams (streams = [...])")
    if not isinstance(streams, tuple):
        raise KeyringError(f"key {key_id}: streams is a list of stream names or patterns")
    if len(streams) > MAX_GRANTS:
        raise KeyringError(f"key {key_id}: at most {MAX_GRANTS} streams may be granted, got {len(streams)}")
    for stream in streams:
        if not isinstance(stream, str) or not 0 < len(stream) <= MAX_GRANT_CHARS:
            raise KeyringError(f"key {key_id}: each of streams is a stream name or pattern of 1 to "
                               f"{MAX_GRANT_CHARS} characters, got {str(stream)[:64]!r}")


def public_of(seed: bytes) -> bytes:
    """The raw public half of the Ed25519 key whose 32-byte seed is ``seed``."""
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def new_key(key_id: str, role: str, algorithm: Algorithm, subject: str | None = None,
            streams: Iterable[str] | None = None) -> Key:
    """A freshly generated signing key (a subscriber's granted ``streams``)."""
    granted = None if streams is None else tuple(streams)
    if algorithm is Algorithm.HMAC_SHA256:
        return Key(key_id, role, algorithm, subject=subject, secret=os.urandom(MIN_SECRET_BYTES), streams=granted)
    return Key(key_id, role, algorithm, subject=subject, private=os.urandom(32), streams=granted)


class Keyring:
    """Keys by id; the signing key of a role (and subject) is the last active one listed that can sign."""

    def __init__(self, keys: Iterable[Key] = ()) -> None:
        self._keys: dict[str, Key] = {}
        for key in keys:
            if key.id in self._keys:
                raise KeyringError(f"key id {key.id!r} is listed twice")
            self._keys[key.id] = key
        self._verifiers: dict[str, Ed25519PublicKey] = {
            key.id: Ed25519PublicKey.from_public_bytes(key.public)
            for key in self._keys.values() if key.algorithm is Algorithm.ED25519 and key.public is not None}
        self._signers: dict[str, Ed25519PrivateKey] = {
            key.id: Ed25519PrivateKey.from_private_bytes(key.private)
            for key in self._keys.values() if key.private is not None}

    def __iter__(self) -> Iterator[Key]:
        return iter(self._keys.values())

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, key_id: str) -> Key | None:
        return self._keys.get(key_id)

    def current(self) -> Keyring:
        """Itself: a keyring held in memory never changes (a :class:`~reclaim.security.live.KeyringFile` does)."""
        return self

    def signing_key(self, role: str, subject: str | None = None, prefer: Algorithm | None = None) -> Key | None:
        """The key ``role`` (for ``subject``) signs with now: the last active one listed, of the ``prefer``
        algorithm when it has one; None when this keyring has none."""
        found: dict[Algorithm, Key] = {}
        for key in self._keys.values():
            if key.role == role and key.can_sign and (subject is None or key.subject == subject):
                found[key.algorithm] = key
        if prefer is not None and prefer in found:
            return found[prefer]
        return found.get(Algorithm.ED25519) or found.get(Algorithm.HMAC_SHA256)

    def ed25519_signer(self, key_id: str) -> Ed25519PrivateKey:
        return self._signers[key_id]

    def ed25519_verifier(self, key_id: str) -> Ed25519PublicKey:
        return self._verifiers[key_id]

    def to_toml(self, *, public_only: bool = False) -> str:
        return "\n".join(key.to_toml(public_only=public_only) for key in self._keys.values())


MAX_KEYRING_BYTES = 16 * 1024 * 1024
"""The most a keyring file may hold (some 100,000 keys): a path naming a device or a FIFO, or anything larger,
is refused in one line rather than read whole or waited on."""


def load_keyring(path: Path) -> Keyring:
    """The keyring in file ``path``; one :class:`KeyringError` line for anything wrong with it."""
    try:
        data = tomllib.loads(read_secret_bytes(path, MAX_KEYRING_BYTES).decode("utf-8"))
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise KeyringError(f"keyring {path} does not exist") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise KeyringError(f"keyring {path}: {exc}") from exc
    keyring = _keyring(data, f"keyring {path}")
    if mode & (stat.S_IRWXG | stat.S_IRWXO) and any(k.secret or k.private for k in keyring):
        log.warning("keyring %s holds secret key material and is readable by others than its owner "
                    "(chmod 600 it)", path)
    return keyring


def parse_keyring(text: str, source: str = "keyring text") -> Keyring:
    """The keyring in ``text``, a keyring file's TOML (such as :meth:`Keyring.to_toml` writes); one
    :class:`KeyringError` line naming ``source`` for anything wrong with it."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KeyringError(f"{source}: {exc}") from exc
    return _keyring(data, source)


def _keyring(data: Mapping[str, Any], source: str) -> Keyring:
    unknown = set(data) - {"key"}
    if unknown:
        raise KeyringError(f"{source}: unknown table or setting {sorted(unknown)[0]!r} (keys are [[key]])")
    entries = data.get("key", [])
    if not isinstance(entries, list) or not all(isinstance(entry, Mapping) for entry in entries):
        raise KeyringError(f"{source}: keys are [[key]] tables")
    try:
        return Keyring(_key(entry) for entry in entries)
    except KeyringError as exc:
        raise KeyringError(f"{source}: {exc}") from exc


def _key(entry: Mapping[str, Any]) -> Key:
    unknown = set(entry) - _FIELDS
    key_id = entry.get("id")
    if not isinstance(key_id, str):
        raise KeyringError("every key has an id (a string)")
    if unknown:
        raise KeyringError(f"key {key_id}: unknown field {sorted(unknown)[0]!r}")
    try:
        algorithm = Algorithm(entry.get("algorithm"))
        status = KeyStatus(entry.get("status", "active"))
    except ValueError as exc:
        raise KeyringError(f"key {key_id}: {exc} (algorithm: hmac-sha256 or ed25519; status: active or "
                           "retired)") from None
    for name in ("role", "subject"):
        if name in entry and not isinstance(entry[name], str):
            raise KeyringError(f"key {key_id}: {name} is a string")
    streams = entry.get("streams")
    if streams is not None and not isinstance(streams, list):
        raise KeyringError(f"key {key_id}: streams is a list of stream names or patterns")
    return Key(key_id, entry.get("role", ""), algorithm, status, entry.get("subject"),
               secret=_bytes(entry, "secret", key_id), private=_bytes(entry, "private", key_id),
               public=_bytes(entry, "public", key_id), streams=None if streams is None else tuple(streams))


def _bytes(entry: Mapping[str, Any], name: str, key_id: str) -> bytes | None:
    value = entry.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise KeyringError(f"key {key_id}: {name} is a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise KeyringError(f"key {key_id}: {name} is not valid base64") from None


_TOML_ESCAPES = {ord("\\"): "\\\\", ord('"'): '\\"', 0x7F: "\\u007f",
                 **{code: f"\\u{code:04x}" for code in range(0x20)}}


def _toml_string(text: str) -> str:
    """``text`` as a TOML basic string: quotes, backslashes and control characters escaped."""
    return '"' + text.translate(_TOML_ESCAPES) + '"'
