"""A scripted stream walkthrough for the demo: scale, commit one transaction across the scale, abort another."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from reclaim.schemas.streams import RetentionPolicy
from reclaim.segments.stream_model import EpochRecord, TxnRecord
from reclaim.segments.streams import NO_RETENTION, StreamController
from reclaim.storage.metadata import ChunkRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TxnWalkthrough:
    """What the walkthrough did, for the demo to print and check.

    ``aborted_chunks`` went to the garbage sink (phase 1 when it is a ``LedgerDeletionService``);
    ``committed_segments`` hold the committed transaction's bytes (the duplicate epoch it rolled
    into), ``committed_bytes`` what each holds.
    """

    stream: str
    scaled_to: EpochRecord
    committed: TxnRecord
    aborted: TxnRecord
    committed_segments: tuple[str, ...]
    committed_bytes: tuple[bytes, ...]
    aborted_chunks: tuple[ChunkRecord, ...]


def run_txn_walkthrough(controller: StreamController, scope: str, stream: str, *,
                        policy: RetentionPolicy = NO_RETENTION, payload: bytes = b"event;") -> TxnWalkthrough:
    """Create ``scope/stream`` with two segments, open two transactions, split the low segment,
    commit the first transaction (it rolls across the scale) and abort the second."""
    controller.create_stream(scope, stream, 2, policy)
    name = f"{scope}/{stream}"
    for active in controller.active_segments(name):
        controller.append(controller.segment_name(name, active.id), payload * 4)
    committed, aborted = controller.create_txn(name), controller.create_txn(name)
    for txn, tag in ((committed, b"committed:"), (aborted, b"aborted:")):
        for txn_segment in txn.segment_names():
            controller.append(txn_segment, tag + payload * 8)
    low = controller.segment_for_key(name, 0.0)
    lo, hi = low.key_range.start, low.key_range.end
    scaled = controller.scale(name, [low.id], [(lo, (lo + hi) / 2), ((lo + hi) / 2, hi)])
    done = controller.commit_txn(committed)
    aborted_chunks = tuple(c for n in aborted.segment_names() for c in controller.segments.layout(n))
    gone = controller.abort_txn(aborted)
    rolled_into = controller.history(name).at(scaled.epoch + 1)
    segments = tuple(controller.segment_name(name, s.id) for s in rolled_into.segments)
    logger.info("walkthrough done stream=%s committed=%s aborted=%s chunks=%d", name, done.txn_id, gone.txn_id,
                len(aborted_chunks))
    return TxnWalkthrough(name, scaled, done, gone, segments, tuple(controller.read_all(s) for s in segments),
                          aborted_chunks)
