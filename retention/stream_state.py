"""Everything the retention job keeps for one stream, and the one call that turns it into a truncation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from schemas.streams import StreamConfig, StreamCut, StreamCutRecord, TruncationEvent
from schemas.subscribers import SubscriberChange, SubscriberCut

if TYPE_CHECKING:
    from schemas.rejects import RejectKind
    from schemas.topology import StreamTopology

    InputRecord = SubscriberChange | SubscriberCut | StreamConfig | StreamCutRecord | StreamTopology


@dataclass(frozen=True)
class Rejection:
    """An input the state refused: which stream and subscriber, why (a kind and one line)."""

    stream: str
    subscriber: str | None
    kind: RejectKind
    reason: str


class StreamRetentionState:
    """One stream's retention state: topology, policy, subscribers and their cuts, retention set, last event.

    The job applies every input record of the stream in order, then asks :meth:`decide`.
    """

    def __init__(self, stream: str) -> None:
        self.stream = stream

    def apply(self, record: InputRecord, now_ms: int) -> Rejection | None:
        """Fold one input record into the state; a refused record changes nothing and says why."""
        raise NotImplementedError

    def decide(self, now_ms: int) -> TruncationEvent | None:
        """The truncation due now, only if its cut advances past the last one emitted (which it becomes)."""
        raise NotImplementedError

    @property
    def last_emitted(self) -> StreamCut | None:
        raise NotImplementedError

    def to_bytes(self) -> bytes:
        """The state as bytes, for the job's state store."""
        raise NotImplementedError

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamRetentionState:
        raise NotImplementedError
