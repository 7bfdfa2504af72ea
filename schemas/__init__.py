"""reclaim's Avro records (``.avsc`` files and the frozen dataclasses that mirror them) and their codecs."""

from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import MAX_TIMESTAMP_MILLIS, AvroRecord, millis_now
from reclaim.schemas.catalog import RECORD_TYPES, SchemaCatalog
from reclaim.schemas.codec import RecordCodec, SingleObjectCodec, build_codec
from reclaim.schemas.errors import (
    DecodeReason,
    EncodeReason,
    RecordDecodeError,
    RecordEncodeError,
    SchemaError,
)
from reclaim.schemas.ledger import (
    ChunkLocation,
    LedgerComponent,
    LedgerType,
    OffloadContext,
    PendingDeleteLedgerInfo,
    ledger_id_for,
)
from reclaim.schemas.rejects import RejectKind, RetentionReject
from reclaim.schemas.streams import (
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
from reclaim.schemas.subscribers import SubscriberChange, SubscriberChangeType, SubscriberCut
from reclaim.schemas.topic_retention import (
    GroupCommit,
    TopicCut,
    TopicPartitionState,
    TopicRetentionPolicy,
    TopicTruncation,
)
from reclaim.schemas.topology import (
    SealedSegment,
    StreamTopology,
    TopologyEpoch,
    TopologySegment,
    TopologyState,
)

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
    "RecordCodec",
    "RecordDecodeError",
    "RecordEncodeError",
    "RecordSchema",
    "RejectKind",
    "RetentionPolicy",
    "RetentionReject",
    "RetentionType",
    "SchemaCatalog",
    "SchemaError",
    "SealedSegment",
    "SegmentOffset",
    "SingleObjectCodec",
    "StreamConfig",
    "StreamCut",
    "StreamCutRecord",
    "StreamTopology",
    "SubscriberChange",
    "SubscriberChangeType",
    "SubscriberCut",
    "GroupCommit",
    "TopicCut",
    "TopicPartitionState",
    "TopicRetentionPolicy",
    "TopicTruncation",
    "TopologyEpoch",
    "TopologySegment",
    "TopologyState",
    "TruncationEvent",
    "TruncationReason",
    "build_codec",
    "ledger_id_for",
    "millis_now",
]
