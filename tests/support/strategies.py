"""Hypothesis strategies that build any valid record of every schemas record type."""

from __future__ import annotations

from hypothesis import strategies as st

from reclaim.schemas import (
    MAX_TIMESTAMP_MILLIS,
    AvroRecord,
    ChunkLocation,
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
    StreamConfig,
    StreamCut,
    StreamCutRecord,
    StreamTopology,
    SubscriberChange,
    SubscriberChangeType,
    SubscriberCut,
    TopologyEpoch,
    TopologySegment,
    TopologyState,
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
segment_ids = st.integers(min_value=0, max_value=2**63 - 1)


@st.composite
def topology_epochs(draw: st.DrawFn, epoch: int) -> TopologyEpoch:
    """An epoch whose segments tile [0, 1) at distinct drawn boundaries."""
    inner = draw(st.sets(st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True), max_size=4))
    bounds = [0.0, *sorted(inner), 1.0]
    ids = draw(st.lists(segment_ids, min_size=len(bounds) - 1, max_size=len(bounds) - 1, unique=True))
    segments = tuple(TopologySegment(ids[i], bounds[i], bounds[i + 1]) for i in range(len(ids)))
    return TopologyEpoch(epoch, draw(st.integers(min_value=0, max_value=epoch)), segments)


@st.composite
def stream_topologies(draw: st.DrawFn) -> StreamTopology:
    """Epochs 0..n, and sealed lengths for some of their segments; a DELETED one may have none."""
    state = draw(st.sampled_from(TopologyState))
    count = draw(st.integers(min_value=0 if state is TopologyState.DELETED else 1, max_value=4))
    epochs = tuple(draw(topology_epochs(epoch)) for epoch in range(count))
    known = sorted({segment.segment_id for epoch in epochs for segment in epoch.segments})
    sealed = draw(st.lists(st.sampled_from(known), unique=True, max_size=6)) if known else []
    lengths = draw(st.lists(st.integers(min_value=0, max_value=2**63 - 1), min_size=len(sealed),
                            max_size=len(sealed)))
    return StreamTopology(draw(texts), epochs, tuple(SealedSegment(s, n) for s, n in zip(sealed, lengths, strict=True)),
                          state, draw(millis))


retention_rejects = st.builds(
    RetentionReject, texts, _optional(texts), st.sampled_from(RejectKind), texts, texts,
    st.integers(min_value=-(2**31), max_value=2**31 - 1), longs, millis,
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
    stream_topologies(),
    retention_rejects,
)
"""Any valid record of a top-level type."""


@st.composite
def mutated(draw: st.DrawFn, data: bytes, most: int = 4) -> bytes:
    """``data`` with 1..``most`` bytes flipped, set, inserted, appended, deleted, or cut off."""
    out = bytearray(data)
    for _ in range(draw(st.integers(min_value=1, max_value=most))):
        position = draw(st.integers(min_value=0, max_value=max(len(out) - 1, 0)))
        action = draw(st.sampled_from(["flip", "set", "insert", "append", "delete", "truncate"]))
        if action == "flip" and out:
            out[position] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif action == "set" and out:
            out[position] = draw(st.integers(min_value=0, max_value=255))
        elif action == "insert":
            out[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif action == "append":
            out += draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del out[position : position + draw(st.integers(min_value=1, max_value=8))]
        else:
            del out[position:]
    return bytes(out)
