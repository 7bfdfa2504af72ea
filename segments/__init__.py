"""reclaim: segments."""

from reclaim.segments.controller_store import ControllerStore, StreamMetadataStore, open_controller_store
from reclaim.segments.ids import (
    SegmentId,
    SegmentName,
    TxnId,
    compose_segment_id,
    parse_segment_name,
    segment_name,
    split_segment_id,
    txn_segment_name,
)
from reclaim.segments.stream_errors import (
    InvalidScaleError,
    MalformedNameError,
    StreamBusyError,
    StreamError,
    StreamExistsError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
    TxnNotFoundError,
    TxnStateError,
)
from reclaim.segments.stream_model import (
    EpochRecord,
    KeyRange,
    StreamHistory,
    StreamRecord,
    StreamSegment,
    StreamState,
    TxnRecord,
    TxnState,
)
from reclaim.segments.streams import StreamController

__all__ = [
    "EpochRecord", "InvalidScaleError", "KeyRange", "MalformedNameError", "SegmentId", "SegmentName",
    "StreamBusyError", "StreamController", "StreamError", "StreamExistsError", "StreamHistory",
    "ControllerStore", "StreamMetadataStore", "StreamNotFoundError", "StreamNotSealedError", "StreamRecord",
    "StreamSealedError", "open_controller_store",
    "StreamSegment", "StreamState", "TxnId", "TxnNotFoundError", "TxnRecord", "TxnState", "TxnStateError",
    "compose_segment_id", "parse_segment_name", "segment_name", "split_segment_id", "txn_segment_name",
]
