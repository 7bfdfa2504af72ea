"""The retention state of one stream as compact JSON bytes, for the Spark job's state store."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from reclaim.retention.registry import Subscriber, SubscriberRegistry
from reclaim.retention.retention_set import RetentionSet
from reclaim.retention.topology import Topology
from reclaim.schemas.streams import StreamConfig, StreamCut, StreamCutRecord

if TYPE_CHECKING:
    from reclaim.retention.stream_state import StreamRetentionState

#: Bumped when the layout changes; a state of another version is refused rather than misread.
VERSION = 1


def _cut(cut: StreamCut) -> list[list[int]]:
    return [[p.segment_id, p.offset] for p in cut.positions]


def _uncut(data: list[list[int]]) -> StreamCut:
    return StreamCut.from_mapping({int(segment): int(offset) for segment, offset in data})


def _record(record: StreamCutRecord) -> list[Any]:
    return [_cut(record.cut), record.recording_time, record.recording_size]


def _unrecord(stream: str, data: list[Any]) -> StreamCutRecord:
    cut, time, size = data
    return StreamCutRecord(stream, _uncut(cut), int(time), int(size))


def dump_state(state: StreamRetentionState) -> bytes:
    topology = state.topology
    data: dict[str, Any] = {
        "v": VERSION,
        "stream": state.stream,
        "topology": None if topology is None else {
            "epochs": [[[s.segment_id, s.start, s.end] for s in epoch] for epoch in topology.epochs],
            "sealed": [[k, v] for k, v in sorted(topology.sealed_lengths.items())]},
        "published": state.topology_published_at,
        "deleted": state.deleted,
        "config": None if state.config is None else state.config.to_avro(),
        "subscribers": [[s.name, s.generation, s.active, None if s.cut is None else _cut(s.cut), s.signed_by]
                        for s in state.registry],
        "retention": [_record(r) for r in state.retention.records],
        "recorded": None if state.last_recorded is None else _record(state.last_recorded),
        "last": None if state.last_emitted is None else _cut(state.last_emitted),
        "refused": state.last_emitted_refused,
        "incarnation": state.incarnation,
    }
    return json.dumps(data, separators=(",", ":")).encode()


def load_state(cls: type[StreamRetentionState], raw: bytes) -> StreamRetentionState:
    data = json.loads(raw)
    if data.get("v") != VERSION:
        raise ValueError(f"retention state version {data.get('v')!r} is not {VERSION}")
    state = cls(data["stream"])
    if data["topology"] is not None:
        sealed = {int(segment): int(length) for segment, length in data["topology"]["sealed"]}
        state.topology = Topology.of(data["topology"]["epochs"], sealed)
    state.topology_published_at = int(data["published"])
    state.deleted = bool(data["deleted"])
    state.config = None if data["config"] is None else StreamConfig.from_avro(data["config"])
    state.registry = SubscriberRegistry({  # who signed a cut: absent from states written before it was kept
        name: Subscriber(name, int(generation), bool(active), None if cut is None else _uncut(cut),
                         signer[0] if signer else None)
        for name, generation, active, cut, *signer in data["subscribers"]})
    state.retention = RetentionSet(tuple(_unrecord(state.stream, record) for record in data["retention"]))
    # A state written before the newest recorded cut was kept on its own: the set's newest stands for it.
    recorded = data.get("recorded")
    state.last_recorded = state.retention.latest if recorded is None else _unrecord(state.stream, recorded)
    state.last_emitted = None if data["last"] is None else _uncut(data["last"])
    state.last_emitted_refused = bool(data.get("refused", False))  # absent from states written before it was kept
    state.incarnation = data.get("incarnation")  # absent from states written before incarnations
    return state
