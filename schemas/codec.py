"""Encoding records to bytes and back: Avro single-object encoding, or Confluent's wire format."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar, overload

from fastavro import schemaless_writer

from schemas.avro_schema import RecordSchema
from schemas.base import AvroRecord
from schemas.catalog import SchemaCatalog, check_expected, message_bytes, read_body, record_datum
from schemas.errors import DecodeReason, EncodeReason, RecordDecodeError, RecordEncodeError

R = TypeVar("R", bound=AvroRecord)

SINGLE_OBJECT_MARKER = b"\xc3\x01"
"""The two bytes that open every Avro single-object encoding."""

HEADER_LENGTH = len(SINGLE_OBJECT_MARKER) + 8


class RecordCodec(Protocol):
    """What producers and consumers use to turn records into message values and back.

    ``topic`` names the Kafka topic the bytes go to or came from: the Confluent codec derives the
    registry subject from it (``<topic>-value``); the single-object codec ignores it.
    """

    def encode(self, record: AvroRecord, topic: str) -> bytes:
        """Encode ``record`` for ``topic``; raise ``RecordEncodeError``."""
        ...

    @overload
    def decode(self, data: bytes, topic: str) -> AvroRecord: ...

    @overload
    def decode(self, data: bytes, topic: str, expected_type: type[R]) -> R: ...

    def decode(self, data: bytes, topic: str, expected_type: type[R] | None = None) -> AvroRecord:
        """Decode bytes read from ``topic``; raise ``RecordDecodeError``."""
        ...


class SingleObjectCodec:
    """Avro single-object encoding: ``C3 01``, the 8-byte CRC-64-AVRO fingerprint, the binary body.

    The reader finds the writer schema by fingerprint in its catalog and resolves it into the
    schema it reads that record type with, so records written by older or newer versions decode
    once their schemas are registered.

    Parameters
    ----------
    catalog : SchemaCatalog, optional
        Record types and schemas; the packaged ones by default.

    Examples
    --------
    >>> from schemas import RetentionPolicy, RetentionType
    >>> codec = SingleObjectCodec()
    >>> data = codec.encode(RetentionPolicy(RetentionType.NONE), "reclaim.stream-config")
    >>> data[:2].hex()
    'c301'
    >>> codec.decode(data, "reclaim.stream-config", RetentionPolicy).retention_type
    <RetentionType.NONE: 'NONE'>
    """

    def __init__(self, catalog: SchemaCatalog | None = None) -> None:
        self.catalog = catalog if catalog is not None else SchemaCatalog()

    def register_writer_schema(self, schema: RecordSchema) -> None:
        """Make records written with ``schema`` (another version of a known record) decodable."""
        self.catalog.register(schema)

    def encode(self, record: AvroRecord, topic: str = "") -> bytes:
        """Encode ``record`` with its catalog schema; ``topic`` is not used.

        Raises
        ------
        RecordEncodeError
            ``NOT_A_RECORD`` or ``INVALID_RECORD``, naming the field.
        """
        schema = self.catalog.schema_for(type(record))
        datum = record_datum(record, schema)
        out = io.BytesIO()
        out.write(SINGLE_OBJECT_MARKER)
        out.write(schema.fingerprint)
        try:
            schemaless_writer(out, schema.parsed, datum)
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            # validate() has already checked the datum; this guards fastavro's own limits.
            raise RecordEncodeError(EncodeReason.INVALID_RECORD, f"{schema.name}: {exc}") from exc
        return out.getvalue()

    @overload
    def decode(self, data: bytes, topic: str = "") -> AvroRecord: ...

    @overload
    def decode(self, data: bytes, topic: str, expected_type: type[R]) -> R: ...

    def decode(self, data: bytes, topic: str = "", expected_type: type[R] | None = None) -> AvroRecord:
        """Decode single-object encoded bytes; ``topic`` is not used.

        Parameters
        ----------
        data : bytes
            The encoded record.
        topic : str
            Ignored; part of the ``RecordCodec`` interface.
        expected_type : type, optional
            Fail unless the record is of this type.

        Raises
        ------
        RecordDecodeError
            For every malformed input; ``reason`` says which check failed.
        """
        raw = message_bytes(data)
        # A prefix of the marker is a truncated header; anything else is not single-object data.
        if not SINGLE_OBJECT_MARKER.startswith(raw[: len(SINGLE_OBJECT_MARKER)]):
            raise RecordDecodeError(
                DecodeReason.BAD_MARKER, f"expected {SINGLE_OBJECT_MARKER.hex()}, got {raw[:2].hex()}"
            )
        if len(raw) < HEADER_LENGTH:
            raise RecordDecodeError(
                DecodeReason.TRUNCATED, f"{len(raw)} bytes, shorter than the {HEADER_LENGTH}-byte header"
            )
        writer = self.catalog.writer_schema(raw[len(SINGLE_OBJECT_MARKER) : HEADER_LENGTH])
        record_type = self.catalog.type_named(writer.name)
        check_expected(record_type, expected_type)
        reader = self.catalog.schema_for(record_type)
        datum = read_body(raw[HEADER_LENGTH:], writer, reader)
        # fastavro vouches for the shape of what it read with the type's own schema, not an override's.
        return record_type.from_datum(datum) if reader is record_type.SCHEMA else record_type.from_avro(datum)


def build_codec(
    registry_url: str | None = None,
    *,
    registry_config: Mapping[str, Any] | None = None,
    catalog: SchemaCatalog | None = None,
    auto_register: bool = True,
) -> RecordCodec:
    """The codec for a process's settings: Confluent's wire format when a registry URL is set.

    Parameters
    ----------
    registry_url : str, optional
        The Schema Registry URL (``mock://<scope>`` for an in-memory registry); None selects
        single-object encoding.
    registry_config : Mapping, optional
        Extra ``SchemaRegistryClient`` settings (auth, TLS); only with ``registry_url``.
    catalog : SchemaCatalog, optional
        Record types and schemas; the packaged ones by default.
    auto_register : bool
        Whether the Confluent serializer registers the writer schema under ``<topic>-value``.
    """
    if registry_url is None:
        return SingleObjectCodec(catalog)
    # Imported here: the registry client's HTTP stack is only needed in Confluent mode.
    from schemas.confluent import ConfluentCodec

    return ConfluentCodec.from_url(
        registry_url, registry_config=registry_config, catalog=catalog, auto_register=auto_register
    )
