"""Encoding records to bytes and back: Avro single-object encoding, or Confluent's wire format."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, overload

from fastavro import schemaless_writer

from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import LONG_MAX, LONG_MIN, AvroRecord
from reclaim.schemas.catalog import SchemaCatalog, check_expected, message_bytes, read_body, record_datum
from reclaim.schemas.errors import DecodeReason, EncodeReason, RecordDecodeError, RecordEncodeError

R = TypeVar("R", bound=AvroRecord)

SINGLE_OBJECT_MARKER = b"\xc3\x01"
"""The two bytes that open every Avro single-object encoding."""

HEADER_LENGTH = len(SINGLE_OBJECT_MARKER) + 8

INT_MIN, INT_MAX = -(2**31), 2**31 - 1

_Header = tuple[RecordSchema, type[AvroRecord], RecordSchema]
"""A header's writer schema, the record type its name is, and the schema that type is read into."""


class RecordCodec(Protocol):
    """What producers and consumers use to turn records into message values and back.

    ``topic`` names the Kafka topic the bytes go to or came from: the Confluent codec derives the
    registry subject from it (``<topic>-value``); the single-object codec ignores it.
    """

    def encode(self, record: AvroRecord, topic: str) -> bytes:
        """Encode ``record`` for ``topic``; raise ``RecordEncodeError``."""
        ...

    def encode_all(self, records: Sequence[AvroRecord], topic: str) -> list[bytes]:
        """``encode`` of each of ``records``, in order (a batch, such as one mark's pending deletes)."""
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
        # The same, reading a record's attributes (types with ``AVRO_ATTRIBUTES``): no ``to_avro`` dicts.
        self._attribute_encoders: dict[bytes, Encoder | None] = {}
        # What a header (marker and fingerprint) decodes with, once its fingerprint was found registered: a
        # fingerprint's schema, the type of its name and that type's reader schema never change.
        self._headers: dict[bytes, _Header] = {}

    def register_writer_schema(self, schema: RecordSchema) -> None:
        """Make records written with ``schema`` (another version of a known record) decodable."""
        self.catalog.register(schema)
        self._headers.clear()

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
            return b"".join((SINGLE_OBJECT_MARKER, schema.fingerprint, body))
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

    def encode_all(self, records: Sequence[AvroRecord], topic: str = "") -> list[bytes]:
        """``encode`` of each of ``records``, in order; ``topic`` is not used.

        The schema, header and attribute encoder are looked up once per run of records of one type (a
        mark's pending deletes are all one), not once per record; anything the attribute encoder does
        not take goes through ``encode``.
        """
        values: list[bytes] = []
        kind: type[AvroRecord] | None = None
        header, reader = b"", None
        for record in records:
            if type(record) is not kind:
                kind = type(record)
                schema = self.catalog.schema_for(kind)
                header = SINGLE_OBJECT_MARKER + schema.fingerprint
                if kind.AVRO_ATTRIBUTES and schema.fingerprint not in self._attribute_encoders:
                    self._attribute_encoders[schema.fingerprint] = compile_encoder(schema.parsed, attributes=True)
                reader = self._attribute_encoders.get(schema.fingerprint) if kind.AVRO_ATTRIBUTES else None
            if reader is not None:
                try:
                    values.append(header + reader(record))
                    continue
                except _FALLBACK:
                    pass
            values.append(self.encode(record))
        return values

    def _fast_body(self, record: AvroRecord, schema: RecordSchema) -> bytes | None:
        """The Avro body from the compiled encoders, or None when the checked path must encode it."""
        if record.AVRO_ATTRIBUTES:
            if schema.fingerprint not in self._attribute_encoders:
                self._attribute_encoders[schema.fingerprint] = compile_encoder(schema.parsed, attributes=True)
            reader = self._attribute_encoders[schema.fingerprint]
            if reader is not None:
                try:
                    return reader(record)
                except _FALLBACK:
                    pass  # the datum's encoder below, or fastavro, says what is wrong
        if schema.fingerprint not in self._encoders:
            self._encoders[schema.fingerprint] = compile_encoder(schema.parsed)
        encoder = self._encoders[schema.fingerprint]
        if encoder is None:
            return None
        try:
            return encoder(record.to_avro())
        except _FALLBACK:
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
        known = self._headers.get(raw[:HEADER_LENGTH])
        if known is None:
            known = self._header(raw)
        writer, record_type, reader = known
        check_expected(record_type, expected_type)
        datum = read_body(raw[HEADER_LENGTH:], writer, reader)
        # fastavro vouches for the shape of what it read with the type's own schema, not an override's.
        return record_type.from_datum(datum) if reader is record_type.SCHEMA else record_type.from_avro(datum)

    def _header(self, raw: bytes) -> _Header:
        """The writer schema, record type and reader schema of a header seen for the first time; once its
        fingerprint is known, remembered (so only registered fingerprints are, however many others come)."""
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
        known = self._headers[raw[:HEADER_LENGTH]] = (writer, record_type, self.catalog.schema_for(record_type))
        return known


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
    from reclaim.schemas.confluent import ConfluentCodec

    return ConfluentCodec.from_url(
        registry_url, registry_config=registry_config, catalog=catalog, auto_register=auto_register
    )


# The compiled encoder: fastavro's writer costs ~25 us a record here, most of it spent checking a
# datum (``validate`` tries each union branch and formats an error for each miss) that reclaim's
# own ``to_avro`` built. ``compile_encoder`` turns a schema into one generated Python function per
# record type that writes the same bytes straight-line, and takes only values whose Python type is
# exactly the Avro type's (``type(v) is int`` for a long, ...), so anything it accepts fastavro's
# ``validate`` accepts too; for anything else it raises and the checked path encodes the datum or
# names the bad field. Generated, like dataclasses' own ``__init__``, because a closure per field
# cost as much again in calls.

Encoder = Callable[[Any], bytes]


class _NotFast(Exception):
    """A value the compiled encoder does not take as is."""


class _Unsupported(Exception):
    """A schema construct the compiled encoder does not cover (fastavro encodes such schemas)."""


#: What a compiled encoder raises on a value it does not take as is (an attribute encoder: also a
#: record without the attribute, or an enum field holding something else than an enum).
_FALLBACK = (_NotFast, KeyError, TypeError, ValueError, OverflowError, struct.error, AttributeError)
_MISSING = object()


def _zigzag_varint(value: int) -> bytes:
    """Avro's int/long encoding: zig-zag, then 7 bits a byte, low group first, high bit set while more follow."""
    n = (value << 1) ^ (value >> 63)
    if n >> 56:
        # 9 or 10 bytes (a hash, a uuid's half): 14 bits at a time from a table, the top byte or two from
        # another. The spread below takes twenty operations on a multi-digit int for these (0.84 µs a
        # value against 0.53 this way).
        return b"".join((_PAIRS[n & 0x3FFF], _PAIRS[n >> 14 & 0x3FFF], _PAIRS[n >> 28 & 0x3FFF],
                         _PAIRS[n >> 42 & 0x3FFF], _TOP[n >> 56]))
    size = (n.bit_length() + 6) // 7 or 1
    # Each 7-bit group moved to its own byte in one expression: a loop costs a round of bytecodes per byte.
    spread = (n & 0x7F | (n & 0x3F80) << 1 | (n & 0x1FC000) << 2 | (n & 0xFE00000) << 3 | (n & 0x7F0000000) << 4
              | (n & 0x3F800000000) << 5 | (n & 0x1FC0000000000) << 6 | (n & 0xFE000000000000) << 7)
    return (spread | _CONTINUATION[size]).to_bytes(size, "little")


#: Avro's int/long bytes, for what writes Avro bodies outside this module (phase 1's record templates).
zigzag_varint = _zigzag_varint


#: The high bit of every byte but the last, for a varint of ``size`` bytes (a long takes at most 10).
_CONTINUATION = tuple(sum(0x80 << (8 * byte) for byte in range(size - 1)) for size in range(11))
#: Two varint bytes, both with the high bit set, per 14-bit group: ``_PAIRS[n & 0x3FFF]``.
_PAIRS = tuple(bytes(((x & 0x7F) | 0x80, (x >> 7) | 0x80)) for x in range(1 << 14))
#: The last byte or two of a varint of 9 or 10 bytes, by the bits from the 57th on (at most 8 of them).
_TOP = tuple(bytes((h,)) if h < 0x80 else bytes(((h & 0x7F) | 0x80, h >> 7)) for h in range(256))
#: Encodings of the small ints (lengths, counts, enum and union indexes): ``_SMALL[n + 64]``.
_SMALL = tuple(_zigzag_varint(n) for n in range(-64, 1024))
_PLAIN_LOGICAL = {"timestamp-millis", "timestamp-micros", "date", "time-millis", "time-micros"}
_RANGES = {"int": (INT_MIN, INT_MAX), "long": (LONG_MIN, LONG_MAX)}
_MEMO_KINDS = {"int", "long", "string"}
#: How many strings an array's or a map's items keep the bytes of, per schema field.
_CACHED_STRINGS = 256
_PYTHON_TYPES = {"boolean": "bool", "int": "int", "long": "int", "float": "float", "double": "float",
                 "bytes": "bytes", "string": "str"}


def compile_encoder(schema: Any, *, attributes: bool = False) -> Encoder | None:
    """An encoder of Avro bodies for fastavro's parsed record ``schema``, or None if it uses what it does not cover.

    ``attributes``: the encoder takes the record object itself, not its ``to_avro()`` dict, and reads
    each field from the attribute of its name; it writes the bytes of ``to_avro()`` for a record of an
    :class:`~reclaim.schemas.base.AvroRecord` type whose ``AVRO_ATTRIBUTES`` is true (and so for every
    record nested in it), and raises for any other.
    """
    generator = _Generator(attributes)
    try:
        entry = generator.named_function(schema)
    except _Unsupported:
        return None
    namespace: dict[str, Any] = {"_NotFast": _NotFast, "_SMALL": _SMALL, "_varint": _zigzag_varint,
                                 "_pack_float": struct.Struct("<f").pack, "_pack_double": struct.Struct("<d").pack,
                                 **generator.constants}
    exec(compile("\n".join(generator.lines), "<reclaim compiled encoder>", "exec"), namespace)
    encoder: Encoder = namespace[entry]
    return encoder


class _Generator:
    """Writes the source of one function per named record: each field's bytes into locals, joined once.

    Every field's code leaves its bytes in one or more local names (its pieces); a record's function
    returns ``b''.join`` of all its pieces in order, one tuple and one join instead of a list append per
    field. A record nested in another is also written inline there (its function stays for references
    by name). Inside an array's or a map's items, pieces are appended to that field's own list.
    """

    def __init__(self, attributes: bool = False) -> None:
        self.attributes = attributes
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self.functions: dict[str, str] = {}
        self._names = 0
        self._memos: list[list[str]] = []  # per function being written: its memos' global names
        self._loops = 0  # how deep in an array's or a map's items the code being written is

    def _fresh(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def named_function(self, schema: dict[str, Any]) -> str:
        function = self.functions[schema["name"]] = self._fresh("_record")
        body: list[str] = []
        self._memos.append([])
        pieces = self._record_fields(schema, "value", body, "    ")
        memos = self._memos.pop()
        declared = [f"    global {', '.join(memos)}"] if memos else []
        self.lines += [f"def {function}(value):", *declared, *body, f"    return b''.join(({', '.join(pieces)},))", ""]
        return function

    def _record_fields(self, schema: dict[str, Any], value: str, body: list[str], indent: str) -> list[str]:
        if self.attributes:
            # Only a record whose to_avro() is its attributes (AVRO_ATTRIBUTES) is read this way.
            body.append(f"{indent}if {value}.AVRO_ATTRIBUTES is not True: raise _NotFast")
        else:
            body.append(f"{indent}if type({value}) is not dict: raise _NotFast")
        pieces: list[str] = []
        for field in schema["fields"]:
            item = self._fresh("v")
            if self.attributes:
                if not field["name"].isidentifier():
                    raise _Unsupported(field["name"])
                body.append(f"{indent}{item} = {value}.{field['name']}")
            else:
                body.append(f"{indent}{item} = {value}[{field['name']!r}]")
            pieces += self._value(field["type"], item, body, indent)
        return pieces or ["b''"]

    def _value(self, schema: Any, value: str, body: list[str], indent: str) -> list[str]:
        """Writes the code of one value; returns the names (or literals) its bytes are left in, in order."""
        piece = self._fresh("p")
        if isinstance(schema, list):
            return self._union(schema, value, body, indent)
        if isinstance(schema, str):
            if schema in self.functions:
                body.append(f"{indent}{piece} = {self.functions[schema]}({value})")
                return [piece]
            schema = {"type": schema}
        kind, logical = schema["type"], schema.get("logicalType")
        if logical is not None and logical not in _PLAIN_LOGICAL:
            raise _Unsupported(logical)
        if kind == "null":
            body.append(f"{indent}if {value} is not None: raise _NotFast")
            return []
        if kind in _MEMO_KINDS and not self._loops:
            return self._memoised(kind, value, body, indent)
        if kind == "string" and self._loops:
            return self._cached_string(value, body, indent)
        if kind in _PYTHON_TYPES:
            body.append(f"{indent}if type({value}) is not {_PYTHON_TYPES[kind]}: raise _NotFast")
            return self._primitive(kind, value, body, indent)
        if kind == "enum":
            indexes = self._fresh("_enum")
            self.constants[indexes] = {symbol: _SMALL[i + 64] for i, symbol in enumerate(schema["symbols"])}
            if self.attributes:  # an enum member, written by its name as to_avro() gives it
                self.functions[schema["name"]] = f"_enum_member({indexes})"
                self.constants["_enum_member"] = _enum_member
                body.append(f"{indent}{piece} = {indexes}[{value}._name_]")
                return [piece]
            self.functions[schema["name"]] = f"{indexes}.__getitem__"
            body += [f"{indent}if type({value}) is not str: raise _NotFast", f"{indent}{piece} = {indexes}[{value}]"]
            return [piece]
        if kind == "record":
            # Its function, for later references by name; its fields inline here, saving a call and a join.
            self.named_function(schema)
            return self._record_fields(schema, value, body, indent)
        if kind in ("array", "map"):
            return self._repeated(schema, value, body, indent)
        raise _Unsupported(kind)

    def _memoised(self, kind: str, value: str, body: list[str], indent: str) -> list[str]:
        """A string or long field whose last value and bytes are kept: the records of one batch share most
        of theirs (the same stream, segment, binding, mark and timestamp objects), so the next one often
        holds the very same object and its bytes are reused. Kept as one tuple, swapped whole (threads)."""
        memo = self._fresh("_memo")
        self.constants[memo] = (_MISSING, b"")
        self._memos[-1].append(memo)
        piece = self._fresh("p")
        body += [f"{indent}if {memo}[0] is {value}:", f"{indent}    {piece} = {memo}[1]", f"{indent}else:",
                 f"{indent}    if type({value}) is not {_PYTHON_TYPES[kind]}: raise _NotFast"]
        inner = indent + "    "
        if kind == "string":
            data = self._fresh("b")
            body += [f"{inner}{data} = {value}.encode()",
                     f"{inner}{piece} = (_SMALL[len({data}) + 64] if len({data}) < 1024 else _varint(len({data})))"
                     f" + {data}"]
        else:
            low, high = _RANGES[kind]
            body += [f"{inner}if not {low} <= {value} <= {high}: raise _NotFast",
                     f"{inner}{piece} = _SMALL[{value} + 64] if -64 <= {value} < 1024 else _varint({value})"]
        body.append(f"{inner}{memo} = ({value}, {piece})")
        return [piece]

    def _cached_string(self, value: str, body: list[str], indent: str) -> list[str]:
        """A string among an array's or a map's items: the bytes of the first strings seen kept by value
        (a map's keys, and most of its values, are the same few names record after record)."""
        cache, piece, data = self._fresh("_cache"), self._fresh("p"), self._fresh("b")
        self.constants[cache] = {}
        body += [f"{indent}if type({value}) is not str: raise _NotFast",
                 f"{indent}{piece} = {cache}.get({value})",
                 f"{indent}if {piece} is None:",
                 f"{indent}    {data} = {value}.encode()",
                 f"{indent}    {piece} = (_SMALL[len({data}) + 64] if len({data}) < 1024 else _varint(len({data})))"
                 f" + {data}",
                 f"{indent}    if len({cache}) < {_CACHED_STRINGS}: {cache}[{value}] = {piece}"]
        return [piece]

    def _primitive(self, kind: str, value: str, body: list[str], indent: str) -> list[str]:
        piece = self._fresh("p")
        if kind in _RANGES:
            low, high = _RANGES[kind]
            body += [f"{indent}if not {low} <= {value} <= {high}: raise _NotFast",
                     f"{indent}{piece} = _SMALL[{value} + 64] if -64 <= {value} < 1024 else _varint({value})"]
            return [piece]
        if kind == "boolean":
            body.append(f"{indent}{piece} = b'\\x01' if {value} else b'\\x00'")
            return [piece]
        if kind in ("float", "double"):
            body.append(f"{indent}{piece} = _pack_{kind}({value})")
            return [piece]
        data = self._fresh("b")
        body += [f"{indent}{data} = {value}.encode()" if kind == "string" else f"{indent}{data} = {value}",
                 f"{indent}{piece} = _SMALL[len({data}) + 64] if len({data}) < 1024 else _varint(len({data}))"]
        return [piece, data]

    def _union(self, branches: list[Any], value: str, body: list[str], indent: str) -> list[str]:
        # Only ``null`` with one other type: the branch follows from ``None`` alone, as fastavro picks it.
        if len(branches) != 2 or "null" not in branches:
            raise _Unsupported("union")
        null_index = branches.index("null")
        index = self._fresh("u")
        inner: list[str] = []
        pieces = self._value(branches[1 - null_index], value, inner, indent + "    ")
        # The other branch's pieces are empty when the value is None (a literal needs no assignment).
        unset = [piece for piece in pieces if piece.isidentifier()]
        body += [f"{indent}if {value} is None:", f"{indent}    {index} = {_SMALL[null_index + 64]!r}",
                 *(f"{indent}    {piece} = b''" for piece in unset),
                 f"{indent}else:", f"{indent}    {index} = {_SMALL[1 - null_index + 64]!r}", *inner]
        return [index, *pieces]

    def _repeated(self, schema: dict[str, Any], value: str, body: list[str], indent: str) -> list[str]:
        # Avro writes a non-empty array or map as one block (its count, then the items) and a 0.
        is_map = schema["type"] == "map"
        if is_map and self.attributes:  # key-unique (key, value) pairs, as AVRO_ATTRIBUTES records keep a map
            return self._pairs(schema, value, body, indent)
        items, piece = self._fresh("o"), self._fresh("p")
        body += [f"{indent}if type({value}) is not {'dict' if is_map else 'list'}"
                 + ("" if is_map else f" and type({value}) is not tuple") + ": raise _NotFast",
                 f"{indent}{items} = []",
                 f"{indent}if {value}:",
                 f"{indent}    {items}.append(_SMALL[len({value}) + 64] if len({value}) < 1024"
                 f" else _varint(len({value})))"]
        item = self._fresh("v")
        self._loops += 1
        loop = indent + "        "
        if is_map:
            key = self._fresh("k")
            body.append(f"{indent}    for {key}, {item} in {value}.items():")
            self._appended(self._value("string", key, body, loop), body, items, loop)
            self._appended(self._value(schema["values"], item, body, loop), body, items, loop)
        else:
            body.append(f"{indent}    for {item} in {value}:")
            self._appended(self._value(schema["items"], item, body, loop), body, items, loop)
        self._loops -= 1
        body += [f"{indent}{items}.append(b'\\x00')", f"{indent}{piece} = b''.join({items})"]
        return [piece]

    def _pairs(self, schema: dict[str, Any], value: str, body: list[str], indent: str) -> list[str]:
        items, piece = self._fresh("o"), self._fresh("p")
        body += [f"{indent}if type({value}) is not tuple: raise _NotFast",
                 f"{indent}{items} = []",
                 f"{indent}if {value}:",
                 f"{indent}    {items}.append(_SMALL[len({value}) + 64] if len({value}) < 1024"
                 f" else _varint(len({value})))"]
        key, item = self._fresh("k"), self._fresh("v")
        body.append(f"{indent}    for {key}, {item} in {value}:")
        self._loops += 1
        loop = indent + "        "
        self._appended(self._value("string", key, body, loop), body, items, loop)
        self._appended(self._value(schema["values"], item, body, loop), body, items, loop)
        self._loops -= 1
        body += [f"{indent}{items}.append(b'\\x00')", f"{indent}{piece} = b''.join({items})"]
        return [piece]

    @staticmethod
    def _appended(pieces: list[str], body: list[str], items: str, indent: str) -> None:
        """An item's pieces added to its array's or map's list, in order."""
        body += [f"{indent}{items}.append({piece})" for piece in pieces]


def _enum_member(indexes: dict[str, bytes]) -> Callable[[Any], bytes]:
    """An enum's encoding by member (a named enum used again in the same schema, read from attributes)."""
    return lambda member: indexes[member._name_]
