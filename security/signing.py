"""Record signatures: what is signed, the two headers that carry a signature, signing and verifying.

A signature covers the key id, the topic the record is meant for, its key and its value, so a genuine
record copied to another topic, or re-keyed, no longer verifies; the stream, subscriber and chunk a
record names are in its value. Re-routing headers (retry attempts, DLQ reasons) are not signed: only
the worker and operator roles may write the retry and dead-letter topics (broker ACLs), and a record
there is verified against the deletion topic it was first meant for.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import logging
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from prometheus_client import Counter

from reclaim.logs import LogLimiter
from reclaim.security.errors import SigningError
from reclaim.security.keyring import Algorithm, Keyring, KeyStatus
from reclaim.security.live import KeySource

log = logging.getLogger(__name__)

H_KEY_ID = "reclaim.key-id"
H_SIGNATURE = "reclaim.signature"
SIGNATURE_HEADERS = (H_KEY_ID, H_SIGNATURE)
_DOMAIN = b"reclaim.record-signature.v1\x00"
_NO_KEY = struct.pack(">I", 0xFFFFFFFF)
_LENGTH = struct.Struct(">I")
_BLOCK = 64  # SHA-256's block size, in bytes: HMAC pads its key to it
_IPAD = bytes(byte ^ 0x36 for byte in range(256))
_OPAD = bytes(byte ^ 0x5C for byte in range(256))

Headers = list[tuple[str, bytes]]
RawHeaders = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None

REJECTED = Counter("reclaim_unauthenticated_records",
                   "Records refused before any other check: unsigned, badly signed, unknown or retired key, "
                   "or signed by a role (or subscriber) that may not write them, or for a stream its key is not "
                   "granted", ["topic", "reason"])
ACCEPTED_UNSIGNED = Counter("reclaim_unsigned_records_accepted",
                            "Unsigned records accepted because record authentication is in rollout mode", ["topic"])


class AuthMode(enum.Enum):
    """``enforce``: only records signed by a key allowed to write them are obeyed. ``rollout``: an
    unsigned record is obeyed too, logged and counted; a badly signed one is still refused."""

    ENFORCE = "enforce"
    ROLLOUT = "rollout"


class Rejection(enum.Enum):
    """Why a record is not authenticated; the value is how messages and rejects name it."""

    UNSIGNED = "unsigned"
    MALFORMED = "malformed-signature"
    UNKNOWN_KEY = "unknown-key"
    RETIRED_KEY = "retired-key"
    BAD_SIGNATURE = "bad-signature"
    WRONG_ROLE = "wrong-role"
    WRONG_SUBJECT = "wrong-subject"
    NOT_GRANTED = "not-granted"
    AGAINST_POLICY = "against-policy"
    WRONG_INCARNATION = "wrong-incarnation"

    @property
    def label(self) -> str:
        """The metric label value: lower-case snake, as every reclaim label value is."""
        return self.value.replace("-", "_")


@dataclass(frozen=True)
class Signer:
    """Who signed a record that verified; ``key_id`` is empty for an unsigned record rollout accepted."""

    key_id: str
    role: str
    subject: str | None = None

    @property
    def unsigned(self) -> bool:
        return not self.key_id

    def __str__(self) -> str:
        if self.unsigned:
            return "unsigned"
        return f"{self.role}:{self.subject}/{self.key_id}" if self.subject else f"{self.role}/{self.key_id}"


UNSIGNED = Signer("", "")


@dataclass(frozen=True)
class Unauthenticated:
    """A record refused: the reason and what exactly was wrong (a DLQ header, a log line)."""

    reason: Rejection
    detail: str

    def __str__(self) -> str:
        return f"unauthenticated ({self.reason.value}): {self.detail}"


def signed_message(key_id: str, topic: str, key: bytes | None, value: bytes) -> bytes:
    """The bytes a signature is made over: each part length-prefixed, so no two records share them."""
    return _message(_prefix(key_id, topic), key, value)


def _prefix(key_id: str, topic: str) -> bytes:
    kid, name = key_id.encode(), topic.encode()
    return b"".join((_DOMAIN, _LENGTH.pack(len(kid)), kid, _LENGTH.pack(len(name)), name))


def _message(prefix: bytes, key: bytes | None, value: bytes) -> bytes:
    return b"".join((prefix, _NO_KEY if key is None else _LENGTH.pack(len(key)) + key, _LENGTH.pack(len(value)),
                     value))


def _hmac(secret: bytes) -> Callable[[bytes], bytes]:
    """HMAC-SHA256 under ``secret`` (RFC 2104), keyed once, on the path every pending delete takes: the
    SHA-256 states after the inner and the outer padded key are made here and copied per message, as
    the ``hmac`` module's own pure-Python HMAC does; copying ``hmac.HMAC`` objects instead costs a
    Python wrapper per call on top of the same work."""
    key = (hashlib.sha256(secret).digest() if len(secret) > _BLOCK else secret).ljust(_BLOCK, b"\0")
    inner, outer = hashlib.sha256(key.translate(_IPAD)), hashlib.sha256(key.translate(_OPAD))

    def digest(message: bytes) -> bytes:
        state = inner.copy()
        state.update(message)
        result = outer.copy()
        result.update(state.digest())
        return result.digest()

    return digest


def signature_headers(headers: RawHeaders) -> Headers:
    """The signature headers among ``headers``, to carry along when a record is re-routed or replayed."""
    if isinstance(headers, list) and len(headers) == 2:  # a record as signers write it, as the client reads it
        (first, kid), (second, signature) = headers
        if first == H_KEY_ID and second == H_SIGNATURE and isinstance(kid, bytes) and isinstance(signature, bytes):
            return [(first, kid), (second, signature)]
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    return [(name, value if isinstance(value, bytes) else value.encode())
            for name, value in pairs if name in SIGNATURE_HEADERS and value is not None]


def _signature(headers: RawHeaders) -> tuple[str, bytes] | Rejection | None:
    """The key id and signature ``headers`` carry; None when there are none; MALFORMED when they are
    not exactly one of each."""
    if isinstance(headers, tuple | list) and len(headers) == 2:  # the usual case, as signers write them
        (first, kid), (second, signature) = headers
        if first == H_KEY_ID and second == H_SIGNATURE and isinstance(kid, bytes) and isinstance(signature, bytes):
            try:
                return kid.decode("ascii"), signature
            except UnicodeDecodeError:
                return Rejection.MALFORMED
    found = signature_headers(headers)
    if not found:
        return None
    ids = [value for name, value in found if name == H_KEY_ID]
    signatures = [value for name, value in found if name == H_SIGNATURE]
    if len(ids) != 1 or len(signatures) != 1:
        return Rejection.MALFORMED
    try:
        return ids[0].decode("ascii"), signatures[0]
    except UnicodeDecodeError:
        return Rejection.MALFORMED


class RecordSigner:
    """Signs the records one role (or one subscriber) writes, with its keyring's current key for it.

    Given a :class:`~reclaim.security.live.KeyringFile`, it follows the file: a key added after the one it
    signs with is used from the next record on, and when its key is retired or removed and no other
    can sign, signing fails (:class:`SigningError`) rather than writing records every verifier refuses.
    """

    def __init__(self, keyring: KeySource, role: str, subject: str | None = None,
                 prefer: Algorithm | None = None) -> None:
        self._source, self._role, self._subject, self._prefer = keyring, role, subject, prefer
        self._use(keyring.current())

    def _use(self, keyring: Keyring) -> None:
        key = keyring.signing_key(self._role, self._subject, self._prefer)
        if key is None:
            who = f"subscriber {self._subject!r}" if self._subject else f"role {self._role!r}"
            raise SigningError(f"the keyring has no active key to sign with for {who}")
        self._keyring = keyring
        self.key = key
        self._kid = key.id.encode()
        self._prefixes: dict[str, bytes] = {}
        if key.secret is not None:
            self._sign = _hmac(key.secret)
        else:
            self._sign = keyring.ed25519_signer(key.id).sign

    def headers(self, topic: str, key: bytes | None, value: bytes) -> Headers:
        """The signature headers of a record of ``topic`` with ``key`` and ``value``."""
        keyring = self._source.current()
        if keyring is not self._keyring:
            self._use(keyring)
        prefix = self._prefixes.get(topic)
        if prefix is None:
            prefix = self._prefixes[topic] = _prefix(self.key.id, topic)
        return [(H_KEY_ID, self._kid), (H_SIGNATURE, self._sign(_message(prefix, key, value)))]


class RecordVerifier:
    """Says who signed a record and whether that signer may write it; counts and logs every refusal."""

    def __init__(self, keyring: KeySource, mode: AuthMode = AuthMode.ENFORCE) -> None:
        self._source = keyring
        self.mode = mode
        self._limiter = LogLimiter()
        self._prefixes: dict[tuple[str, str], bytes] = {}
        self._use(keyring.current())

    def _use(self, keyring: Keyring) -> None:
        """Verify by ``keyring`` from now on (a key file read again: a key retired there is refused)."""
        self.keyring = keyring
        # Per key id, all a check needs: the key, its HMAC (None for Ed25519), who signs with it.
        self._keys = {k.id: (k, None if k.secret is None else _hmac(k.secret), Signer(k.id, k.role, k.subject))
                      for k in keyring}

    def verify(self, topic: str, key: bytes | None, value: bytes | None, headers: RawHeaders,
               roles: frozenset[str], *, signed_topic: str | None = None) -> Signer | Unauthenticated:
        """The signer of the record read from ``topic``, if its signature holds and its key's role is one of
        ``roles``; else why not. ``signed_topic``: the topic it was signed for, when it was re-routed
        from there (the deletion topic of a retry tier's record)."""
        outcome = self._check(signed_topic or topic, key, value or b"", headers, roles)
        if isinstance(outcome, Unauthenticated):
            self.refused(topic, outcome)
        elif outcome is UNSIGNED:
            ACCEPTED_UNSIGNED.labels(topic).inc()
            self._log(logging.WARNING, topic, "unsigned", "unsigned record accepted (record authentication "
                      "in rollout mode) on %s", topic)
        return outcome

    def check_subject(self, topic: str, signer: Signer, subject: str, stream: str | None = None
                      ) -> Unauthenticated | None:
        """For a record a subscriber signs: refused when the key is another subscriber's (WRONG_SUBJECT), or
        when the record is about a ``stream`` the key is not granted (NOT_GRANTED).

        Only a subscriber key is held to its grants: an admin may add or remove any subscriber anywhere, and
        an unsigned record accepted in rollout has no key to hold to anything.
        """
        if signer.unsigned or signer.role != "subscriber":
            return None
        if signer.subject != subject:
            refusal = Unauthenticated(Rejection.WRONG_SUBJECT, f"key {signer.key_id} is subscriber "
                                      f"{signer.subject!r}'s, the record is subscriber {subject!r}'s")
        elif stream is None or self._grants(signer.key_id, stream):
            return None
        else:
            refusal = Unauthenticated(Rejection.NOT_GRANTED, f"key {signer.key_id} of subscriber {subject!r} is "
                                      f"not granted stream {stream[:255]!r}")
        self.refused(topic, refusal)
        return refusal

    def _grants(self, key_id: str, stream: str) -> bool:
        """Whether key ``key_id`` acts for ``stream`` in the keyring the last record was verified by."""
        known = self._keys.get(key_id)
        return known is not None and known[0].grants(stream)

    def refused(self, topic: str, refusal: Unauthenticated) -> None:
        """Count and log a refusal (also one a caller decides, such as a truncation against the policy)."""
        REJECTED.labels(topic, refusal.reason.label).inc()
        self._log(logging.WARNING, topic, refusal.reason, "record refused on %s: %s", topic, refusal)

    def _check(self, topic: str, key: bytes | None, value: bytes, headers: RawHeaders,
               roles: frozenset[str]) -> Signer | Unauthenticated:
        keyring = self._source.current()
        if keyring is not self.keyring:
            self._use(keyring)
        found = _signature(headers)
        if found is None:
            if self.mode is AuthMode.ROLLOUT:
                return UNSIGNED
            return Unauthenticated(Rejection.UNSIGNED, "the record carries no signature")
        if isinstance(found, Rejection):
            return Unauthenticated(found, f"the record needs exactly one {H_KEY_ID} and one {H_SIGNATURE} header")
        key_id, signature = found
        known = self._keys.get(key_id)
        if known is None:
            return Unauthenticated(Rejection.UNKNOWN_KEY, f"key {key_id[:64]!r} is not in the keyring")
        entry, mac, signer = known
        if entry.status is KeyStatus.RETIRED:
            return Unauthenticated(Rejection.RETIRED_KEY, f"key {key_id} is retired")
        prefix = self._prefixes.get((key_id, topic))
        if prefix is None:
            prefix = self._prefixes[(key_id, topic)] = _prefix(key_id, topic)
        message = _message(prefix, key, value)
        if mac is not None:  # an hmac-sha256 key (only those have a secret: Key checks it)
            valid = hmac.compare_digest(mac(message), signature)
        else:
            try:
                self.keyring.ed25519_verifier(key_id).verify(signature, message)
                valid = True
            except InvalidSignature:
                valid = False
        if not valid:
            return Unauthenticated(Rejection.BAD_SIGNATURE, f"the signature of key {key_id} does not match this "
                                   f"record on {topic} (forged, altered, or copied from another topic or key)")
        if entry.role not in roles:
            return Unauthenticated(Rejection.WRONG_ROLE, f"key {key_id} is the {entry.role} role's; "
                                   f"{' or '.join(sorted(roles))} write this record")
        return signer

    def _log(self, level: int, topic: str, kind: object, message: str, *args: object) -> None:
        held = self._limiter.admit((topic, kind))
        if held is not None:
            log.log(level, message + self._limiter.suffix(held), *args)
