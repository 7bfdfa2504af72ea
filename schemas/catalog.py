"""The record types a codec knows, the schema it uses for each, and known writer schemas by fingerprint."""

from __future__ import annotations

import functools
import io
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from fastavro import schemaless_reader
from fastavro.read import SchemaResolutionError
from fastavro.validation import ValidationError, validate

from reclaim.schemas.avro_schema import AVRO_DIR, RecordSchema
from reclaim.schemas.base import AvroRecord
from reclaim.schemas.errors import DecodeReason, EncodeReason, RecordDecodeError, RecordEncodeError, SchemaError
from reclaim.schemas.ledger import ChunkLocation, OffloadContext, PendingDeleteLedgerInfo
from reclaim.schemas.rejects import RetentionReject
from reclaim.schemas.streams import (
    RetentionPolicy,
    SegmentOffset,
    StreamConfig,
    StreamCut,
    StreamCutRecord,
    TruncationEvent,
)
from reclaim.schemas.subscribers import SubscriberChange, SubscriberCut
from reclaim.schemas.topic_retention import (
    GroupCommit,
    TopicCut,
    TopicPartitionState,
    TopicRetentionPolicy,
    TopicTruncation,
)
from reclaim.schemas.topology import SealedSegment, StreamTopology, TopologyEpoch, TopologySegment

RECORD_TYPES: tuple[type[AvroRecord], ...] = (
    PendingDeleteLedgerInfo,
    OffloadContext,
    ChunkLocation,
    SegmentOffset,
    StreamCut,
    RetentionPolicy,
    StreamConfig,
    StreamCutRecord,
    TruncationEvent,
    SubscriberChange,
    SubscriberCut,
    TopologySegment,
    TopologyEpoch,
    SealedSegment,
    StreamTopology,
    RetentionReject,
    TopicRetentionPolicy,
    TopicPartitionState,
    GroupCommit,
    TopicCut,
    TopicTruncation,
)
"""Every record type of reclaim, top-level and nested; each can be encoded on its own."""

PREVIOUS_DIR = AVRO_DIR / "previous"
"""Earlier versions of the packaged schemas, ``<full name>.<version>.avsc``, each self-contained."""


@functools.cache
def previous_schemas() -> tuple[RecordSchema, ...]:
    """The earlier versions of reclaim's schemas: records written with them before an upgrade (kept on
    their topics) still decode. A reader of an earlier version cannot decode a newer record (its
    fingerprint is unknown to it): upgrade readers before writers, or use a Schema Registry."""
    return tuple(RecordSchema.from_json(path.read_text()) for path in sorted(PREVIOUS_DIR.glob("*.avsc")))


# What fastavro's readers raise on bytes that are not a valid body for the writer schema.
_BODY_ERRORS = (EOFError, ValueError, TypeError, KeyError, IndexError, OverflowError, struct.error)


class SchemaCatalog:
    """The record types a codec handles, the schema it reads and writes each with, and the writer
    schemas it can decode, by fingerprint.

    Parameters
    ----------
    record_types : Iterable[type[AvroRecord]]
        The record classes; ``RECORD_TYPES`` by default.
    overrides : Mapping[type[AvroRecord], RecordSchema]
        A schema to use instead of a class's ``SCHEMA`` (same full name), e.g. an older version
        while a rollout is in progress; also how tests write with an evolved schema.
    writer_schemas : Iterable[RecordSchema]
        Other versions that writers may have used (older or newer), so their records decode; the
        packaged earlier versions of the catalog's types (``previous_schemas``) always do.

    Raises
    ------
    SchemaError
        If an override or writer schema names no known record type.
    """

    def __init__(
        self,
        record_types: Iterable[type[AvroRecord]] = RECORD_TYPES,
        overrides: Mapping[type[AvroRecord], RecordSchema] | None = None,
        writer_schemas: Iterable[RecordSchema] = (),
    ) -> None:
        self._types = {record_type.SCHEMA.name: record_type for record_type in record_types}
        self._schemas = {record_type: record_type.SCHEMA for record_type in self._types.values()}
        for record_type, schema in (overrides or {}).items():
            if self._types.get(schema.name) is not record_type:
                raise SchemaError(f"override schema {schema.name} does not belong to {record_type.__name__}")
            self._schemas[record_type] = schema
        self._writers: dict[bytes, RecordSchema] = {}
        earlier = [schema for schema in previous_schemas() if schema.name in self._types]
        for schema in [*earlier, *self._schemas.values(), *writer_schemas]:
            self.register(schema)

    def register(self, schema: RecordSchema) -> None:
        """Make records written with ``schema`` decodable.

        Raises
        ------
        SchemaError
            If ``schema`` names no known record type.
        """
        if schema.name not in self._types:
            raise SchemaError(f"no record type is named {schema.name}")
        self._writers[schema.fingerprint] = schema

    def schema_for(self, record_type: type[AvroRecord]) -> RecordSchema:
        """The schema records of ``record_type`` are written with and read into.

        Raises
        ------
        RecordEncodeError
            With reason ``NOT_A_RECORD`` if the type is not in the catalog.
        """
        schema = self._schemas.get(record_type)
        if schema is None:
            raise RecordEncodeError(EncodeReason.NOT_A_RECORD, f"{record_type.__name__} is not in the catalog")
        return schema

    def type_named(self, full_name: str) -> type[AvroRecord]:
        """The record type whose schema has ``full_name``.

        Raises
        ------
        RecordDecodeError
            With reason ``UNKNOWN_RECORD_TYPE``.
        """
        record_type = self._types.get(full_name)
        if record_type is None:
            raise RecordDecodeError(DecodeReason.UNKNOWN_RECORD_TYPE, f"no record type is named {full_name}")
        return record_type

    def writer_schema(self, fingerprint: bytes) -> RecordSchema:
        """The registered writer schema with this CRC-64-AVRO fingerprint.

        Raises
        ------
        RecordDecodeError
            With reason ``UNKNOWN_SCHEMA``.
        """
        schema = self._writers.get(fingerprint)
        if schema is None:
            raise RecordDecodeError(DecodeReason.UNKNOWN_SCHEMA, f"fingerprint {fingerprint.hex()} is not registered")
        return schema


def record_datum(record: object, schema: RecordSchema) -> dict[str, Any]:
    """``record`` as the dict fastavro writes, checked against ``schema``.

    Raises
    ------
    RecordEncodeError
        ``NOT_A_RECORD`` for an object that is not an ``AvroRecord``; ``INVALID_RECORD`` when a
        value does not fit the schema (the message names the field).
    """
    if not isinstance(record, AvroRecord):
        raise RecordEncodeError(EncodeReason.NOT_A_RECORD, f"cannot encode a {type(record).__name__}")
    datum = record.to_avro()
    try:
        validate(datum, schema.parsed, raise_errors=True)
    except ValidationError as exc:
        # fastavro lists every failing field; one line reads better in logs and DLQ headers.
        problems = "; ".join(str(problem) for problem in exc.errors)
        raise RecordEncodeError(EncodeReason.INVALID_RECORD, f"{schema.name}: {problems}") from exc
    return datum


def message_bytes(data: object) -> bytes:
    """``data`` as bytes, or ``RecordDecodeError(TRUNCATED)`` for a null (tombstone) or non-bytes value."""
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise RecordDecodeError(DecodeReason.TRUNCATED, f"expected bytes, got {type(data).__name__}")


def check_expected(record_type: type[AvroRecord], expected_type: type[AvroRecord] | None) -> None:
    """Raise ``RecordDecodeError(UNEXPECTED_TYPE)`` unless ``record_type`` is an ``expected_type``."""
    if expected_type is not None and not issubclass(record_type, expected_type):
        raise RecordDecodeError(
            DecodeReason.UNEXPECTED_TYPE, f"expected {expected_type.__name__}, got {record_type.__name__}"
        )


def read_body(body: bytes, writer: RecordSchema, reader: RecordSchema) -> dict[str, Any]:
    """Decode one Avro binary body written with ``writer`` into ``reader``'s shape.

    Raises
    ------
    RecordDecodeError
        ``TRUNCATED``, ``SCHEMA_MISMATCH``, ``MALFORMED_BODY`` or ``TRAILING_BYTES``.
    """
    stream = io.BytesIO(body)
    try:
        # Resolution is only needed across versions; the same schema reads faster without it, and its
        # timestamps as the longs they are (every record type takes either).
        if writer.fingerprint == reader.fingerprint:
            datum = schemaless_reader(stream, writer.plain, None)
        else:
            datum = schemaless_reader(stream, writer.parsed, reader.parsed)
    except SchemaResolutionError as exc:
        raise RecordDecodeError(DecodeReason.SCHEMA_MISMATCH, f"{writer.name}: {exc}") from exc
    except _BODY_ERRORS as exc:
        # fastavro's C reader signals running out of input as EOFError or IndexError, so the
        # position, not the exception type, tells a short body from a garbled one.
        if stream.tell() >= len(body):
            raise RecordDecodeError(
                DecodeReason.TRUNCATED, f"{writer.name} body ends early ({len(body)} bytes)"
            ) from exc
        raise RecordDecodeError(DecodeReason.MALFORMED_BODY, f"{writer.name}: {type(exc).__name__}: {exc}") from exc
    if stream.tell() != len(body):
        raise RecordDecodeError(
            DecodeReason.TRAILING_BYTES, f"{writer.name} ends at byte {stream.tell()} of {len(body)}"
        )
    assert isinstance(datum, dict), f"fastavro read a record as {type(datum).__name__}"
    return datum
