"""Hypothesis strategies that build any valid record of every schemas record type."""

from __future__ import annotations

from hypothesis import strategies as st

from schemas import (
    MAX_TIMESTAMP_MILLIS,
    AvroRecord,
    ChunkLocation,
    LedgerComponent,
    LedgerType,
    LimitType,
    OffloadContext,
    PendingDeleteLedgerInfo,
    RetentionPolicy,
    RetentionType,
    StreamConfig,
    StreamCut,
    StreamCutRecord,
    SubscriberChange,
    SubscriberChangeType,
    SubscriberCut,
    TruncationEvent,
    TruncationReason,
)

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
millis = st.integers(min_value=0, max_value=MAX_TIMESTAMP_MILLIS)
texts = st.text(max_size=20)


def _optional(strategy: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.none() | strategy


stream_cuts = st.dictionaries(longs, longs, max_size=5).map(StreamCut.from_mapping)
policies = st.builds(
    RetentionPolicy, st.sampled_from(RetentionType), _optional(st.sampled_from(LimitType)), longs, longs
)
offload_contexts = st.builds(
    OffloadContext, longs, longs, texts, st.dictionaries(texts, texts, max_size=3).map(lambda d: tuple(d.items()))
)
pending_deletes = st.builds(
    PendingDeleteLedgerInfo,
    topic_name=texts,
    ledger_component=st.sampled_from(LedgerComponent),
    ledger_type=st.sampled_from(LedgerType),
    ledger_id=st.integers(min_value=0, max_value=2**63 - 1),
    chunk_name=texts,
    segment_name=texts,
    storage_binding=texts,
    location=st.builds(ChunkLocation, texts, _optional(texts)),
    mark_id=texts,
    created_at=millis,
    cursor_name=_optional(texts),
    schema_id=_optional(longs),
    offload_context=_optional(offload_contexts),
    owner_epoch=_optional(longs),
)
records: st.SearchStrategy[AvroRecord] = st.one_of(
    pending_deletes,
    stream_cuts,
    policies,
    st.builds(StreamConfig, texts, policies, millis),
    st.builds(StreamCutRecord, texts, stream_cuts, millis, longs),
    st.builds(TruncationEvent, texts, stream_cuts, st.sampled_from(TruncationReason), millis, policies),
    st.builds(SubscriberChange, texts, texts, longs, st.sampled_from(SubscriberChangeType), millis),
    st.builds(SubscriberCut, texts, texts, longs, stream_cuts, millis),
)
"""Any valid record of a top-level type."""
