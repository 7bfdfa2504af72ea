"""Pending deletes read through a template of their shape: the bytes fastavro would read, matched instead.

The records of one mark that name copies in one binding, of one segment, differ only in a few fields: the
chunk name, the key (in the location and in the offload context's metadata), the ledger id and the copy's
uuid. Everything else, header included, is the same bytes in each. :class:`PendingReader` decodes the first
record of such a shape with the codec (fastavro), then makes a template of it: the codec encodes a probe
(the record with those fields set to values found nowhere else), the holes are where those values' bytes
sit, and the template must give back the record's own bytes with the record's own values in its holes, or
there is none. A later record is read through a template only when its bytes are the template's constants
exactly, with a well-formed long or UTF-8 string in each hole and nothing after: the Avro encoding of the
template's record with those values, which is what fastavro would have read. Anything else (another
shape, a record cut short or forged, a schema written by another version) goes through the codec, which
decodes it or says why not, as before.
"""

from __future__ import annotations

import re
import secrets
import struct
from collections.abc import Callable, Mapping
from typing import Any

from reclaim.schemas.catalog import message_bytes
from reclaim.schemas.codec import SingleObjectCodec, zigzag_varint
from reclaim.schemas.ledger import ChunkLocation, OffloadContext, PendingDeleteLedgerInfo

#: What differs between the records of one shape: a template's holes.
LEDGER_ID, UUID_MSB, UUID_LSB, CHUNK_NAME, KEY, CONTEXT_KEY = range(6)
_LONGS = frozenset((LEDGER_ID, UUID_MSB, UUID_LSB))

#: Templates a reader keeps (the shapes of the last marks it read), and the records of one batch it may
#: learn a template from: a batch of shapes never seen, or of records no template can be made of (forged,
#: another schema version), pays for this many probes at most.
MAX_TEMPLATES = 64
LEARN_PER_BATCH = 4


def holes_in(probe: bytes, marks: Mapping[int, bytes]) -> tuple[tuple[bytes, ...], tuple[int, ...]] | None:
    """The constants around the holes of ``probe`` and which value each hole holds, from the bytes each
    marker value was written as in it; None when two of them overlap or there is none."""
    found: list[tuple[int, int, int]] = []
    for which, mark in marks.items():
        start = probe.find(mark)
        while start >= 0:
            found.append((start, start + len(mark), which))
            start = probe.find(mark, start + len(mark))
    if not found:
        return None
    found.sort()
    constants: list[bytes] = []
    end = 0
    for start, stop, _ in found:
        if start < end:
            return None
        constants.append(probe[end:start])
        end = stop
    constants.append(probe[end:])
    return tuple(constants), tuple(which for _, _, which in found)


def marker_long() -> int:
    """A random long written in nine bytes (bit 61 set, so never fewer): its bytes occur nowhere else."""
    return secrets.randbits(61) | 1 << 61


def string_bytes(text: str) -> bytes:
    """An Avro string: its UTF-8 length as a long, then its UTF-8 bytes."""
    data = text.encode()
    return zigzag_varint(len(data)) + data


#: A long's bytes: at most nine with the high bit set, then one without.
_VARINT = re.compile(rb"[\x80-\xff]{0,9}[\x00-\x7f]", re.DOTALL)
#: Two bytes of a long (read little-endian) to the 14 bits they hold; four of them read at once.
_PAIR_BITS = [(pair & 0x7F) | (pair >> 8 & 0x7F) << 7 for pair in range(65536)]
_FOUR_PAIRS = struct.Struct("<4H").unpack_from


def _read_long(data: bytes, pos: int) -> tuple[int, int] | None:
    """The long at ``pos`` and the position after it, or None when there is no 64-bit long there."""
    found = _VARINT.match(data, pos)
    if found is None:
        return None
    end = found.end()
    if end - pos >= 9:  # a hash, a uuid's half: the first eight bytes 14 bits at a time from a table
        a, b, c, d = _FOUR_PAIRS(data, pos)
        n = (_PAIR_BITS[a] | _PAIR_BITS[b] << 14 | _PAIR_BITS[c] << 28 | _PAIR_BITS[d] << 42
             | (data[pos + 8] & 0x7F) << 56)
        if end - pos == 10:
            top = data[pos + 9]
            if top > 1:
                return None  # beyond 64 bits
            n |= top << 63
    else:
        n = 0
        shift = 0
        for byte in data[pos:end]:
            n |= (byte & 0x7F) << shift
            shift += 7
    return (n >> 1) ^ -(n & 1), end


def _read_string(data: bytes, pos: int) -> tuple[str, int] | None:
    """The UTF-8 string at ``pos`` and the position after it, or None when there is none."""
    try:
        first = data[pos]
        if first < 0x80:  # a length below 64: one byte
            size, start = first >> 1, pos + 1
            if first & 1:
                return None
        elif data[pos + 1] < 0x80:  # below 8192: two
            size, start = (first & 0x7F | data[pos + 1] << 7) >> 1, pos + 2
            if first & 1:
                return None
        else:
            return None  # a chunk name or key is at most 1024 bytes: no template's hole is longer
        end = start + size
        if end > len(data):
            return None
        return data[start:end].decode("utf-8"), end
    except (IndexError, UnicodeDecodeError):
        return None


class _Template:
    """One shape's bytes with holes, and the record they read as (its fields, the holes' values aside)."""

    def __init__(self, constants: tuple[bytes, ...], holes: tuple[int, ...], base: PendingDeleteLedgerInfo) -> None:
        self.constants = constants
        self._steps = tuple(zip(constants, holes, (_read_long if hole in _LONGS else _read_string for hole in holes),
                                strict=False))
        self._last = constants[-1]
        self._base = dict(base.__dict__)
        self._bucket = base.location.bucket
        context = base.offload_context
        self._context = None if context is None else dict(context.__dict__)

    def read(self, data: bytes) -> PendingDeleteLedgerInfo | None:
        """The record ``data`` is, when it is this template's constants with a value in each hole."""
        pos = 0
        values: list[Any] = [None] * 6
        startswith = data.startswith
        for constant, hole, read_value in self._steps:
            if not startswith(constant, pos):
                return None
            read = read_value(data, pos + len(constant))
            if read is None:
                return None
            values[hole], pos = read
        if pos + len(self._last) != len(data) or not startswith(self._last, pos):
            return None
        fields = self._base.copy()
        fields["ledger_id"] = values[LEDGER_ID]
        fields["chunk_name"] = values[CHUNK_NAME]
        fields["location"] = ChunkLocation.from_checked({"key": values[KEY], "bucket": self._bucket})
        if self._context is not None:
            context = self._context.copy()
            context["uuid_msb"], context["uuid_lsb"] = values[UUID_MSB], values[UUID_LSB]
            key = values[CONTEXT_KEY]
            if key is not None:
                context["metadata"] = tuple((name, key if name == "key" else value)
                                            for name, value in context["metadata"])
            fields["offload_context"] = OffloadContext.from_checked(context)
        return PendingDeleteLedgerInfo.from_checked(fields)

    @classmethod
    def of(cls, record: PendingDeleteLedgerInfo, data: bytes,
           encode: Callable[[PendingDeleteLedgerInfo], bytes]) -> _Template | None:
        """The template of ``record``'s shape (``data``, its bytes), or None when none reads it back."""
        token = secrets.token_hex(16)
        name, key, context_key = (f"reclaim-probe-{token}-{what}" for what in ("name", "key", "context-key"))
        ledger_id = marker_long()
        fields = dict(record.__dict__, ledger_id=ledger_id, chunk_name=name,
                      location=ChunkLocation.from_checked({"key": key, "bucket": record.location.bucket}))
        marks = {LEDGER_ID: zigzag_varint(ledger_id), CHUNK_NAME: string_bytes(name), KEY: string_bytes(key)}
        context = record.offload_context
        if context is not None:
            msb, lsb = marker_long(), marker_long()
            metadata = tuple((k, context_key if k == "key" else v) for k, v in context.metadata)
            fields["offload_context"] = OffloadContext.from_checked(
                dict(context.__dict__, uuid_msb=msb, uuid_lsb=lsb, metadata=metadata))
            marks |= {UUID_MSB: zigzag_varint(msb), UUID_LSB: zigzag_varint(lsb)}
            if any(k == "key" for k, _ in metadata):
                marks[CONTEXT_KEY] = string_bytes(context_key)
        try:
            probe = encode(PendingDeleteLedgerInfo.from_checked(fields))
        except Exception:  # noqa: BLE001 - a probe the codec cannot write makes no template, nothing else
            return None
        shape = holes_in(probe, marks)
        if shape is None or sorted(shape[1]) != sorted(marks):  # every marker once: a hole for each field
            return None
        template = cls(*shape, base=record)
        return template if template.read(data) == record else None


class PendingReader:
    """Decodes pending deletes through templates of their shapes, the rest through the codec.

    Only for the single-object codec, which encodes on its own: a Confluent codec's probe would ask the
    schema registry, and its records go through the codec as before.
    """

    def __init__(self, codec: SingleObjectCodec) -> None:
        self._codec = codec
        self._templates: list[_Template] = []
        self._learn = LEARN_PER_BATCH

    @classmethod
    def for_codec(cls, codec: object) -> PendingReader | None:
        """A reader for ``codec`` when templates can be made with it, else None."""
        return cls(codec) if type(codec) is SingleObjectCodec else None

    def new_batch(self) -> None:
        """A new batch may learn :data:`LEARN_PER_BATCH` templates again."""
        self._learn = LEARN_PER_BATCH

    def decode(self, data: object, topic: str) -> PendingDeleteLedgerInfo:
        """``codec.decode(data, topic, PendingDeleteLedgerInfo)``; raises its ``RecordDecodeError`` the same."""
        raw = message_bytes(data)
        templates = self._templates
        for index, template in enumerate(templates):
            record = template.read(raw)
            if record is not None:
                if index:  # the last shape read is tried first
                    templates.insert(0, templates.pop(index))
                return record
        record = self._codec.decode(raw, topic, PendingDeleteLedgerInfo)
        if self._learn > 0:
            self._learn -= 1
            learned = _Template.of(record, raw, lambda probe: self._codec.encode(probe, topic))
            if learned is not None:
                templates.insert(0, learned)
                del templates[MAX_TEMPLATES:]
        return record
