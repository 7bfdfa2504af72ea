"""The errors of the schemas package."""

from __future__ import annotations

import enum

from reclaim.errors import ReclaimError


class SchemaError(ReclaimError):
    """A problem with Avro schemas or with records against them."""


class DecodeReason(enum.Enum):
    """Why bytes could not be decoded into a record; the value is the human-readable reason."""

    BAD_MARKER = "wrong marker bytes"
    TRUNCATED = "truncated data"
    UNKNOWN_SCHEMA = "unknown writer schema"
    UNKNOWN_RECORD_TYPE = "unknown record type"
    UNEXPECTED_TYPE = "unexpected record type"
    SCHEMA_MISMATCH = "writer schema cannot be resolved into reader schema"
    MALFORMED_BODY = "malformed Avro body"
    TRAILING_BYTES = "trailing bytes after the record"
    INVALID_RECORD = "invalid record values"
    REGISTRY_UNAVAILABLE = "schema registry unavailable"


class EncodeReason(enum.Enum):
    """Why a record could not be encoded; the value is the human-readable reason."""

    NOT_A_RECORD = "not a reclaim record"
    INVALID_RECORD = "record does not match its schema"
    REGISTRY_REJECTED = "schema registry rejected the schema"
    REGISTRY_UNAVAILABLE = "schema registry unavailable"


class RecordDecodeError(SchemaError):
    """Bytes that do not decode into a valid reclaim record.

    Parameters
    ----------
    reason : DecodeReason
        The kind of failure; ``str(error)`` starts with ``reason.value``.
    detail : str
        What exactly was wrong, for logs and dead-letter headers.
    """

    def __init__(self, reason: DecodeReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
        self.retryable = reason is DecodeReason.REGISTRY_UNAVAILABLE


class RecordEncodeError(SchemaError):
    """A record that cannot be encoded.

    Parameters
    ----------
    reason : EncodeReason
        The kind of failure; ``str(error)`` starts with ``reason.value``.
    detail : str
        What exactly was wrong.
    """

    def __init__(self, reason: EncodeReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
        self.retryable = reason is EncodeReason.REGISTRY_UNAVAILABLE
