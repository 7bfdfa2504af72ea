"""Sample records of every record type, with optional fields populated and null, for tests, demos and docs."""

from __future__ import annotations

import uuid

from reclaim.schemas import (
    MAX_TIMESTAMP_MILLIS,
    AvroRecord,
    ChunkLocation,
    GroupCommit,
    LedgerComponent,
    LedgerType,
    LimitType,
    OffloadContext,
    PendingDeleteLedgerInfo,
    RejectKind,
    RetentionPolicy,
    RetentionReject,
    RetentionType,
    SealedSegment,
    SegmentOffset,
    StreamConfig,
    StreamCut,
    StreamCutRecord,
    StreamTopology,
    SubscriberChange,
    SubscriberChangeType,
    SubscriberCut,
    TopicCut,
    TopicPartitionState,
    TopicRetentionPolicy,
    TopicTruncation,
    TopologyEpoch,
    TopologySegment,
    TopologyState,
    TruncationEvent,
    TruncationReason,
    ledger_id_for,
)

NOW = 1_700_000_000_123
CUT = StreamCut.from_mapping({0: 0, 1: 4096, (1 << 32) | 2: 17})
POLICY = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 60_000, 86_400_000)
OFFLOAD = OffloadContext.for_uuid(
    uuid.UUID("8c1d7bca-0b4e-4f0a-9d5e-9a1f6a3b2c10"), "s3", {"bucket": "cold", "key": "scope/stream/0.1"}
)
# Two segments; segment 1 split at 0.75 by a scale (epoch 1); a commit of epoch-0 transactions rolled
# through duplicates of epoch 0 (2, sealed) and of epoch 1 (3, active).
TOPOLOGY = StreamTopology(
    stream="scope/stream",
    epochs=(
        TopologyEpoch(0, 0, (TopologySegment(0, 0.0, 0.5), TopologySegment(1, 0.5, 1.0))),
        TopologyEpoch(1, 1, (TopologySegment(0, 0.0, 0.5), TopologySegment((1 << 32) | 2, 0.5, 0.75),
                             TopologySegment((1 << 32) | 3, 0.75, 1.0))),
        TopologyEpoch(2, 0, (TopologySegment((2 << 32) | 0, 0.0, 0.5), TopologySegment((2 << 32) | 1, 0.5, 1.0))),
        TopologyEpoch(3, 1, (TopologySegment((3 << 32) | 0, 0.0, 0.5), TopologySegment((3 << 32) | 2, 0.5, 0.75),
                             TopologySegment((3 << 32) | 3, 0.75, 1.0))),
    ),
    sealed_lengths=(SealedSegment(1, 4096), SealedSegment(0, 8192), SealedSegment((1 << 32) | 2, 100),
                    SealedSegment((1 << 32) | 3, 0), SealedSegment((2 << 32) | 0, 17), SealedSegment((2 << 32) | 1, 0)),
    state=TopologyState.ACTIVE,
    published_at=NOW,
)


def full_pending_delete() -> PendingDeleteLedgerInfo:
    """A tier-2 copy of a cursor chunk, every optional field set."""
    return PendingDeleteLedgerInfo(
        topic_name="scope/stream",
        ledger_component=LedgerComponent.CURSOR,
        ledger_type=LedgerType.OFFLOAD_LEDGER,
        ledger_id=ledger_id_for("scope/stream/0.#epoch.3$offset.0"),
        chunk_name="scope/stream/0.#epoch.3$offset.0",
        segment_name="scope/stream/0.#epoch.3",
        storage_binding="s3-cold",
        location=ChunkLocation(key="scope/stream/0.1", bucket="cold"),
        mark_id="mark-0001",
        created_at=NOW,
        cursor_name="readers",
        schema_id=42,
        offload_context=OFFLOAD,
        owner_epoch=3,
    )


def minimal_pending_delete() -> PendingDeleteLedgerInfo:
    """A tier-1 copy of a segment chunk, every optional field null."""
    return PendingDeleteLedgerInfo(
        topic_name="scope/stream",
        ledger_component=LedgerComponent.SEGMENT,
        ledger_type=LedgerType.LEDGER,
        ledger_id=ledger_id_for("c"),
        chunk_name="c",
        segment_name="scope/stream/0",
        storage_binding="fs",
        location=ChunkLocation(key="c"),
        mark_id="m",
        created_at=0,
    )


def sample_records() -> dict[str, AvroRecord]:
    """One or more named samples of every record type, populated and with nulls."""
    return {
        "pending_delete_full": full_pending_delete(),
        "pending_delete_minimal": minimal_pending_delete(),
        "offload_context": OFFLOAD,
        "offload_context_empty": OffloadContext(0, 0, "filesystem"),
        "chunk_location": ChunkLocation(key="k", bucket="b"),
        "chunk_location_no_bucket": ChunkLocation(key="k"),
        "segment_offset": SegmentOffset(7, 9),
        "stream_cut": CUT,
        "stream_cut_empty": StreamCut(),
        "retention_policy": POLICY,
        "retention_policy_defaults": RetentionPolicy(RetentionType.NONE),
        "stream_config": StreamConfig("scope/stream", POLICY, NOW),
        "stream_cut_record": StreamCutRecord("scope/stream", CUT, NOW, 1 << 40),
        "truncation_event": TruncationEvent("scope/stream", CUT, TruncationReason.CONSUMPTION, NOW, POLICY),
        "subscriber_change": SubscriberChange("scope/stream", "readers", 2, SubscriberChangeType.REMOVE, NOW),
        "subscriber_cut": SubscriberCut("scope/stream", "readers", 2, CUT, MAX_TIMESTAMP_MILLIS),
        "topology_segment": TopologySegment((1 << 32) | 2, 0.5, 0.75),
        "topology_epoch": TOPOLOGY.epochs[1],
        "sealed_segment": SealedSegment(1, 4096),
        "stream_topology": TOPOLOGY,
        "stream_topology_deleted": StreamTopology("scope/stream", (), (), TopologyState.DELETED, NOW),
        "topic_retention_policy": TopicRetentionPolicy(
            "orders", "9mP3cW0dQpe2lC6nTqf0eA", ("billing", "audit"), 3_600_000, NOW, group_pattern="etl-.*",
            released=("old-etl",), spark_checkpoints=(("daily", "s3a://bucket/checkpoints/daily"),),
            max_ms=7 * 86_400_000, max_bytes=1 << 30, stale_after_ms=86_400_000),
        "topic_retention_policy_ended": TopicRetentionPolicy("orders", "9mP3cW0dQpe2lC6nTqf0eA", (), 0, NOW,
                                                             active=False),
        "topic_partition_state": TopicPartitionState(3, 100, 250, 240, 120, 1 << 20),
        "topic_partition_state_minimal": TopicPartitionState(0, 0, 0),
        "group_commit": GroupCommit("billing", "stable", StreamCut.from_mapping({0: 120, 3: 7})),
        "topic_cut": TopicCut("orders", "9mP3cW0dQpe2lC6nTqf0eA", NOW, (TopicPartitionState(0, 5, 9),),
                              (GroupCommit("spark:daily", "spark", StreamCut()),)),
        "topic_truncation": TopicTruncation("orders", "9mP3cW0dQpe2lC6nTqf0eA", StreamCut.from_mapping({0: 7}), NOW,
                                            NOW - 1, (("0", "AT_BOUND held by billing"),)),
        "retention_reject": RetentionReject("scope/stream", "readers", RejectKind.CUT_BEHIND,
                                            "cut is behind the subscriber's last cut", "reclaim.subscriber-cuts",
                                            3, 1 << 40, NOW),
        "retention_reject_unknown_stream": RetentionReject("", None, RejectKind.UNDECODABLE, "wrong marker bytes",
                                                           "reclaim.stream-config", 0, 0, 0),
    }
