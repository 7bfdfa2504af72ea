"""The retention job's record authentication: the keys its executors verify inputs and sign truncations with.

The job never reads a local file (its executors may run on any host of a Spark cluster), so its keys
travel inside the job's stateful function: the TOML text of a keyring built once on the driver from
the process's keyring (``RECLAIM_KEYRING``). It holds the public halves of the keyring's ed25519 keys,
all that verifying the inputs needs, and the job's own ed25519 signing key. No hmac-sha256 secret
(whoever holds one can sign as its role) and no other private key ever leaves the driver.

An input is verified before anything else is done with it: a record not signed by a key of a role
allowed to write it (``reclaim.security.rules.SIGNERS``), a subscriber's record signed by another
subscriber's key, or by a subscriber key not granted the record's stream, becomes an UNAUTHENTICATED
reject and changes no state. The grants travel with the public halves (``Key.streams``).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from reclaim.schemas.base import AvroRecord
from reclaim.schemas.rejects import RejectKind, RetentionReject
from reclaim.schemas.subscribers import SubscriberChange, SubscriberCut
from reclaim.security.errors import SigningError
from reclaim.security.keyring import Algorithm, Keyring, KeyStatus, parse_keyring
from reclaim.security.rules import signers_of
from reclaim.security.signing import (
    H_KEY_ID,
    H_SIGNATURE,
    AuthMode,
    Headers,
    RecordSigner,
    RecordVerifier,
    Rejection,
    Signer,
    Unauthenticated,
)

log = logging.getLogger(__name__)

JOB_ROLE = "retention-job"
INPUT_SIGNERS = frozenset({"subscriber", "admin", "controller"})
"""The roles that sign the job's inputs (``reclaim.security.rules.SIGNERS`` of its five record types)."""


@dataclass(frozen=True)
class JobKeys:
    """What the job's executors verify inputs by and sign truncation events with, as a keyring's TOML text.

    ``mode`` is how inputs are verified (None: not at all, record authentication is off); ``signs``
    says whether the text holds the job's signing key. Hashable: executors build their verifier and
    signer once per process and keys (:func:`job_auth`).
    """

    keyring_toml: str = field(repr=False)
    mode: AuthMode | None = AuthMode.ENFORCE
    signs: bool = True


def job_keys(keyring: Keyring, mode: AuthMode | None, sign: bool = True) -> JobKeys:
    """The keys the executors get from ``keyring`` (on the driver): every ed25519 key as its public half,
    and with ``sign`` the job's own ed25519 signing key whole.

    Raises
    ------
    SigningError
        With ``sign``, when ``keyring`` has no active ed25519 key of the retention-job role (an hmac key
        would put a secret that signs on every executor, and the applier would need it too).
    """
    own = keyring.signing_key(JOB_ROLE, prefer=Algorithm.ED25519) if sign else None
    if sign and (own is None or own.algorithm is not Algorithm.ED25519):
        raise SigningError(f"the keyring has no active ed25519 key for role {JOB_ROLE} to sign truncation events "
                           f"with (reclaim keys new --role {JOB_ROLE} --id ...)")
    shipped = [key if own is not None and key.id == own.id else key.public_only()
               for key in keyring if key.algorithm is Algorithm.ED25519]
    for role in sorted(INPUT_SIGNERS):
        hmac_only = [key.id for key in keyring if key.role == role and key.status is KeyStatus.ACTIVE
                     and key.algorithm is Algorithm.HMAC_SHA256]
        if hmac_only and not any(k.role == role and k.algorithm is Algorithm.ED25519 for k in keyring):
            log.warning("the retention job cannot verify %s records signed with hmac-sha256 keys (%s): their "
                        "secrets are not shipped to executors; give the %s role an ed25519 key", role,
                        ", ".join(hmac_only), role)
    return JobKeys(Keyring(shipped).to_toml(), mode, own is not None)


@dataclass(frozen=True)
class JobAuth:
    """An executor's verifier of inputs (None: not verified) and signer of truncation events (None: unsigned)."""

    verifier: RecordVerifier | None
    signer: RecordSigner | None


@functools.lru_cache(maxsize=4)
def job_auth(keys: JobKeys) -> JobAuth:
    """The verifier and signer of ``keys``, built once per executor process: parsing keys is not free."""
    keyring = parse_keyring(keys.keyring_toml, "the retention job's keys")
    verifier = None if keys.mode is None else RecordVerifier(keyring, keys.mode)
    signer = RecordSigner(keyring, JOB_ROLE, prefer=Algorithm.ED25519) if keys.signs else None
    return JobAuth(verifier, signer)


def signature_columns() -> list[str]:
    """SQL over the Kafka source's rows (read with ``includeHeaders``) giving ``key_id`` and ``signature``.

    Both are null when the record has no signature header; both are set when it has exactly one of each;
    anything else (one missing, two key ids, a null header value) gives an empty ``key_id`` and a null
    ``signature``, which :func:`input_headers` takes as malformed. Two scalar columns, not the header
    array: the stateful step's Arrow batches stay flat.
    """
    def matching(name: str) -> str:
        return f"filter(headers, h -> h.key = '{name}')"

    def count(name: str) -> str:  # size(null) is -1 or null depending on the session: both count as none
        return f"greatest(coalesce(size({matching(name)}), 0), 0)"

    one_each = f"{count(H_KEY_ID)} = 1 AND {count(H_SIGNATURE)} = 1"
    return [f"CASE WHEN {one_each} THEN element_at({matching(H_KEY_ID)}, 1).value "
            f"WHEN {count(H_KEY_ID)} + {count(H_SIGNATURE)} > 0 THEN X'' END AS key_id",
            f"CASE WHEN {one_each} THEN element_at({matching(H_SIGNATURE)}, 1).value END AS signature"]


OUTPUT_HEADERS = (f"CAST(CASE WHEN signature IS NOT NULL THEN array("
                  f"named_struct('key', '{H_KEY_ID}', 'value', key_id), "
                  f"named_struct('key', '{H_SIGNATURE}', 'value', signature)) END "
                  f"AS ARRAY<STRUCT<key: STRING, value: BINARY>>) AS headers")
"""SQL turning the stateful step's ``key_id`` and ``signature`` into the Kafka sink's ``headers`` column."""


def input_headers(key_id: bytes | None, signature: bytes | None) -> Headers | None | Rejection:
    """The signature headers of an input row as :func:`signature_columns` gives them: None when unsigned."""
    if key_id is None and signature is None:
        return None
    if key_id is None or signature is None:
        return Rejection.MALFORMED
    return [(H_KEY_ID, bytes(key_id)), (H_SIGNATURE, bytes(signature))]


def verify_input(verifier: RecordVerifier, record_type: type[AvroRecord], topic: str, key: bytes | None,
                 value: bytes, key_id: bytes | None, signature: bytes | None) -> Signer | Unauthenticated:
    """Who signed an input of ``record_type`` read from ``topic``, if a role allowed to write it did; else why not.

    Verified before the value is decoded: the subscriber a subscriber's record names is checked after
    (:func:`check_subject`).
    """
    headers = input_headers(key_id, signature)
    if headers is Rejection.MALFORMED:
        refusal = Unauthenticated(Rejection.MALFORMED, f"the record needs exactly one {H_KEY_ID} and one "
                                  f"{H_SIGNATURE} header, each with a value")
        verifier.refused(topic, refusal)
        return refusal
    assert not isinstance(headers, Rejection)
    return verifier.verify(topic, key, value, headers, signers_of(record_type))


def check_subject(verifier: RecordVerifier, topic: str, signer: Signer, record: AvroRecord) -> Unauthenticated | None:
    """For a subscriber's record (a cut or a change): refused when signed by another subscriber's key, or by a
    subscriber key not granted the record's stream."""
    if isinstance(record, SubscriberCut | SubscriberChange):
        return verifier.check_subject(topic, signer, record.subscriber, record.stream)
    return None


def unauthenticated(refusal: Unauthenticated, row: Any, now_ms: int, stream: str,
                    subscriber: str | None = None) -> RetentionReject:
    """The reject of an input refused by ``refusal``; its reason starts with the refusal's label (unsigned,
    bad-signature, unknown-key, retired-key, wrong-role, wrong-subject, not-granted, malformed-signature)."""
    return RetentionReject(stream, subscriber, RejectKind.UNAUTHENTICATED, f"{refusal.reason.value}: {refusal.detail}",
                           str(row.topic), int(row.partition), int(row.offset), now_ms)


def signed(signer: RecordSigner | None, topic: str, key: bytes | None, value: bytes
           ) -> tuple[bytes | None, bytes | None]:
    """The ``key_id`` and ``signature`` columns of an output row: both None without a signer."""
    if signer is None:
        return None, None
    (_, key_id), (_, signature) = signer.headers(topic, key, value)
    return key_id, signature
