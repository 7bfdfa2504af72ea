"""Encoding records to bytes and back: Avro single-object encoding, or Confluent's wire format."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar, overload

from fastavro import schemaless_writer

from schemas.avro_schema import RecordSchema
from schemas.base import LONG_MAX, LONG_MIN, AvroRecord
from schemas.catalog import SchemaCatalog, check_expected, message_bytes, read_body, record_datum
from schemas.errors import DecodeReason, EncodeReason, RecordDecodeError, RecordEncodeError

R = TypeVar("R", bound=AvroRecord)

SINGLE_OBJECT_MARKER = b"\xc3\x01"
"""The two bytes that open every Avro single-object encoding."""

HEADER_LENGTH = len(SINGLE_OBJECT_MARKER) + 8

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


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
        # Compiled body encoders by schema fingerprint; None where a schema uses what they do not cover.
        self._encoders: dict[bytes, Encoder | None] = {}

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
        body = self._fast_body(record, schema)
        if body is not None:
            return SINGLE_OBJECT_MARKER + schema.fingerprint + body
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

    def _fast_body(self, record: AvroRecord, schema: RecordSchema) -> bytes | None:
        """The Avro body from the compiled encoder, or None when the checked path must encode it."""
        if schema.fingerprint not in self._encoders:
            self._encoders[schema.fingerprint] = compile_encoder(schema.parsed)
        encoder = self._encoders[schema.fingerprint]
        if encoder is None:
            return None
        try:
            return encoder(record.to_avro())
        except (_NotFast, KeyError, TypeError, ValueError, OverflowError, struct.error):
            # Not a datum the compiled encoder takes as is: fastavro's checked path names the problem.
            return None

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


# The compiled encoder: fastavro's writer costs ~25 us a record here, most of it spent checking a
# datum (``validate`` tries each union branch and formats an error for each miss) that reclaim's
# own ``to_avro`` built. The compiled encoder writes the same bytes from plain closures and takes
# only values whose Python type is exactly the Avro type's (``type(v) is int`` for a long, ...), so
# anything it accepts fastavro's ``validate`` accepts too; for anything else it raises and the
# checked path encodes the datum or names the bad field.

Encoder = Callable[[Any], bytes]


class _NotFast(Exception):
    """A value the compiled encoder does not take as is."""


class _Unsupported(Exception):
    """A schema construct the compiled encoder does not cover (fastavro encodes such schemas)."""


def _zigzag_varint(value: int) -> bytes:
    """Avro's int/long encoding: zig-zag, then 7 bits a byte, low group first."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_MIN, _SMALL_MAX = -64, 1024
_SMALL = tuple(_zigzag_varint(n) for n in range(_SMALL_MIN, _SMALL_MAX))


def _varint(value: int) -> bytes:
    return _SMALL[value - _SMALL_MIN] if _SMALL_MIN <= value < _SMALL_MAX else _zigzag_varint(value)


def _null(value: Any) -> bytes:
    if value is not None:
        raise _NotFast
    return b""


def _boolean(value: Any) -> bytes:
    if type(value) is not bool:
        raise _NotFast
    return b"\x01" if value else b"\x00"


def _int(value: Any) -> bytes:
    if type(value) is not int or not INT_MIN <= value <= INT_MAX:
        raise _NotFast
    return _varint(value)


def _long(value: Any) -> bytes:
    if type(value) is not int or not LONG_MIN <= value <= LONG_MAX:
        raise _NotFast
    return _varint(value)


def _double(value: Any) -> bytes:
    if type(value) is not float:
        raise _NotFast
    return struct.pack("<d", value)


def _float(value: Any) -> bytes:
    if type(value) is not float:
        raise _NotFast
    return struct.pack("<f", value)


def _bytes(value: Any) -> bytes:
    if type(value) is not bytes:
        raise _NotFast
    return _varint(len(value)) + value


def _string(value: Any) -> bytes:
    if type(value) is not str:
        raise _NotFast
    data = value.encode()
    return _varint(len(data)) + data


_PRIMITIVES: dict[str, Encoder] = {"null": _null, "boolean": _boolean, "int": _int, "long": _long,
                                   "float": _float, "double": _double, "bytes": _bytes, "string": _string}
#: Logical types whose datum reclaim always gives as the underlying int or long.
_PLAIN_LOGICAL = {"timestamp-millis", "timestamp-micros", "date", "time-millis", "time-micros"}


def compile_encoder(schema: Any) -> Encoder | None:
    """An encoder of Avro bodies for fastavro's parsed ``schema``, or None if it uses what it does not cover."""
    try:
        return _compile(schema, {})
    except _Unsupported:
        return None


def _compile(schema: Any, named: dict[str, Encoder]) -> Encoder:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        # A reference to a named type defined earlier (fastavro's parsed form uses full names).
        return lambda value: named[schema](value)
    if isinstance(schema, list):
        return _union(schema, named)
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical is not None and logical not in _PLAIN_LOGICAL:
        raise _Unsupported(logical)
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind == "enum":
        return _named(named, schema["name"], _enum(schema["symbols"]))
    if kind == "record":
        fields: list[tuple[str, Encoder]] = []
        encoder = _named(named, schema["name"], _record(fields))
        fields.extend((field["name"], _compile(field["type"], named)) for field in schema["fields"])
        return encoder
    if kind == "array":
        return _array(_compile(schema["items"], named))
    if kind == "map":
        return _map(_compile(schema["values"], named))
    raise _Unsupported(kind)


def _named(named: dict[str, Encoder], name: str, encoder: Encoder) -> Encoder:
    named[name] = encoder
    return encoder


def _union(branches: list[Any], named: dict[str, Encoder]) -> Encoder:
    # Only ``null`` with one other type: the branch follows from ``None`` alone, as fastavro picks it.
    if len(branches) != 2 or "null" not in branches:
        raise _Unsupported("union")
    null_index = branches.index("null")
    other = _compile(branches[1 - null_index], named)
    null_tag, other_tag = _varint(null_index), _varint(1 - null_index)

    def union(value: Any) -> bytes:
        return null_tag if value is None else other_tag + other(value)

    return union


def _enum(symbols: list[str]) -> Encoder:
    indexes = {symbol: _varint(index) for index, symbol in enumerate(symbols)}

    def enum(value: Any) -> bytes:
        if type(value) is not str:
            raise _NotFast
        return indexes[value]

    return enum


def _record(fields: list[tuple[str, Encoder]]) -> Encoder:
    def record(value: Any) -> bytes:
        if type(value) is not dict:
            raise _NotFast
        return b"".join([encode(value[name]) for name, encode in fields])

    return record


def _array(items: Encoder) -> Encoder:
    def array(value: Any) -> bytes:
        if type(value) is not list and type(value) is not tuple:
            raise _NotFast
        if not value:
            return b"\x00"
        return _varint(len(value)) + b"".join([items(item) for item in value]) + b"\x00"

    return array


def _map(values: Encoder) -> Encoder:
    def map_(value: Any) -> bytes:
        if type(value) is not dict:
            raise _NotFast
        if not value:
            return b"\x00"
        pairs = b"".join([_string(key) + values(item) for key, item in value.items()])
        return _varint(len(value)) + pairs + b"\x00"

    return map_
