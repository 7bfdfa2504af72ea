"""The pending-operation records of a stream (scale, commit, seal, delete, truncate) and their JSON form."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from reclaim.segments.ids import SegmentId, TxnId
from reclaim.segments.stream_model import EpochRecord, KeyRange, StreamSegment


@dataclass(frozen=True)
class ScalePlan:
    """Seal ``seal`` and activate ``epoch``, which holds the successors over ``new_ranges``."""

    seal: tuple[SegmentId, ...]
    new_ranges: tuple[tuple[float, float], ...]
    epoch: EpochRecord

    def describe(self) -> str:
        return f"scale to epoch {self.epoch.epoch} sealing {[str(s) for s in self.seal]}"


@dataclass(frozen=True)
class CommitPlan:
    """Commit ``txns`` (all of reference epoch ``txn_epoch``, in commit order).

    ``rolled`` is None when the active epoch ``active`` shares the transactions' reference epoch:
    each transaction segment merges into the active segment with its primary. Otherwise it holds
    the two duplicate epochs of a rolling commit: the transactions' epoch duplicated (they merge
    into it, then it is sealed) and the active epoch duplicated (the new active epoch).
    """

    txn_epoch: int
    txns: tuple[TxnId, ...]
    active: int
    rolled: tuple[EpochRecord, EpochRecord] | None = None

    def describe(self) -> str:
        mode = "rolling" if self.rolled else "in-place"
        return f"{mode} commit of {len(self.txns)} transaction(s) of epoch {self.txn_epoch}"


@dataclass(frozen=True)
class SealPlan:
    """Abort open transactions and seal the active segments."""

    def describe(self) -> str:
        return "seal"


@dataclass(frozen=True)
class DeletePlan:
    """Delete every segment of every epoch and every unfinished transaction's segments."""

    def describe(self) -> str:
        return "delete"


@dataclass(frozen=True)
class TruncatePlan:
    """Truncate at ``cut`` (segment id to offset): delete the segments wholly before it, truncate those in it.

    ``delete`` and ``truncate`` are fixed when the operation is planned, so a retry redoes the same
    steps; the cut becomes the stream's head when the operation finishes.
    """

    cut: tuple[tuple[int, int], ...]
    delete: tuple[int, ...]
    truncate: tuple[tuple[int, int], ...]

    def describe(self) -> str:
        return f"truncate at {len(self.cut)} segment(s), deleting {len(self.delete)}"


Plan = ScalePlan | CommitPlan | SealPlan | DeletePlan | TruncatePlan


@dataclass(frozen=True)
class Operation:
    """The one pending operation a stream may have: the persisted intent that a retry or recovery resumes.

    ``started_at`` is when its executor last said it was alive: set when the operation is recorded and
    renewed as the executor goes from step to step.
    """

    stream: str
    op_id: str
    plan: Plan
    started_at: float
    version: int = 0


def epoch_to_dict(record: EpochRecord) -> dict[str, Any]:
    return {"epoch": record.epoch, "reference": record.reference, "created_at": record.created_at,
            "segments": [[s.id.value, s.key_range.start, s.key_range.end] for s in record.segments]}


def epoch_from_dict(data: dict[str, Any]) -> EpochRecord:
    segments = tuple(StreamSegment(SegmentId.from_value(int(value)), KeyRange(float(start), float(end)))
                     for value, start, end in data["segments"])
    return EpochRecord(int(data["epoch"]), int(data["reference"]), segments, float(data["created_at"]))


def plan_to_json(plan: Plan) -> str:
    data: dict[str, Any]
    if isinstance(plan, ScalePlan):
        data = {"kind": "scale", "seal": [s.value for s in plan.seal],
                "new_ranges": [list(r) for r in plan.new_ranges], "epoch": epoch_to_dict(plan.epoch)}
    elif isinstance(plan, CommitPlan):
        data = {"kind": "commit", "txn_epoch": plan.txn_epoch, "txns": [t.hex for t in plan.txns],
                "active": plan.active,
                "rolled": None if plan.rolled is None else [epoch_to_dict(e) for e in plan.rolled]}
    elif isinstance(plan, SealPlan):
        data = {"kind": "seal"}
    elif isinstance(plan, TruncatePlan):
        data = {"kind": "truncate", "cut": [list(p) for p in plan.cut], "delete": list(plan.delete),
                "truncate": [list(p) for p in plan.truncate]}
    else:
        data = {"kind": "delete"}
    return json.dumps(data, sort_keys=True)


def plan_from_json(text: str) -> Plan:
    data = json.loads(text)
    kind = data["kind"]
    if kind == "scale":
        return ScalePlan(tuple(SegmentId.from_value(int(v)) for v in data["seal"]),
                         tuple((float(s), float(e)) for s, e in data["new_ranges"]),
                         epoch_from_dict(data["epoch"]))
    if kind == "commit":
        rolled = data["rolled"]
        return CommitPlan(int(data["txn_epoch"]), tuple(TxnId.from_hex(t) for t in data["txns"]),
                          int(data["active"]),
                          None if rolled is None else (epoch_from_dict(rolled[0]), epoch_from_dict(rolled[1])))
    if kind == "seal":
        return SealPlan()
    if kind == "delete":
        return DeletePlan()
    if kind == "truncate":
        return TruncatePlan(tuple((int(k), int(v)) for k, v in data["cut"]), tuple(int(v) for v in data["delete"]),
                            tuple((int(k), int(v)) for k, v in data["truncate"]))
    raise ValueError(f"unknown operation kind {kind!r}")
