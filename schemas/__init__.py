"""reclaim's Avro records (``.avsc`` files and the frozen dataclasses that mirror them) and their codecs."""

from schemas.avro_schema import RecordSchema
from schemas.base import MAX_TIMESTAMP_MILLIS, AvroRecord, millis_now
from schemas.catalog import RECORD_TYPES, SchemaCatalog
from schemas.codec import RecordCodec, SingleObjectCodec, build_codec
from schemas.errors import (
    DecodeReason,
    EncodeReason,
    ReclaimError,
    RecordDecodeError,
    RecordEncodeError,
    SchemaError,
)
from schemas.ledger import (
    ChunkLocation,
    LedgerComponent,
    LedgerType,
    OffloadContext,
    PendingDeleteLedgerInfo,
    ledger_id_for,
)
from schemas.streams import (
    LimitType,
    RetentionPolicy,
    RetentionType,
    SegmentOffset,
    StreamConfig,
    StreamCut,
    StreamCutRecord,
    TruncationEvent,
    TruncationReason,
)
from schemas.subscribers import SubscriberChange, SubscriberChangeType, SubscriberCut

__all__ = [
    "MAX_TIMESTAMP_MILLIS",
    "RECORD_TYPES",
    "AvroRecord",
    "ChunkLocation",
    "DecodeReason",
    "EncodeReason",
    "LedgerComponent",
    "LedgerType",
    "LimitType",
    "OffloadContext",
    "PendingDeleteLedgerInfo",
    "ReclaimError",
    "RecordCodec",
    "RecordDecodeError",
    "RecordEncodeError",
    "RecordSchema",
    "RetentionPolicy",
    "RetentionType",
    "SchemaCatalog",
    "SchemaError",
    "SegmentOffset",
    "SingleObjectCodec",
    "StreamConfig",
    "StreamCut",
    "StreamCutRecord",
    "SubscriberChange",
    "SubscriberChangeType",
    "SubscriberCut",
    "TruncationEvent",
    "TruncationReason",
    "build_codec",
    "ledger_id_for",
    "millis_now",
]
