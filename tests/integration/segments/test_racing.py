"""Two controllers in two processes racing on one stream — writes, truncations, scales and transaction
commits — on each engine: no update is lost, no chunk is both live and marked, and every refusal is
one of reclaim's typed errors (conflicts retryable)."""

from __future__ import annotations

import multiprocessing
import random
from collections import Counter
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from reclaim.errors import ReclaimError
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.controller_store import open_controller_store
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.segments.ids import TxnId
from reclaim.segments.stream_model import TxnState
from reclaim.segments.streams import StreamController
from reclaim.storage.errors import MetadataConflictError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import chunk_chain
from reclaim.storage.sql_store import open_metadata_store
from tests.support.segments import ROLLING, STREAM

ROUNDS = 40
#: The refusals a racing controller may meet, each a typed error of reclaim's; anything else fails the test.
RETRYABLE_CONFLICTS = {"MetadataConflictError", "StreamBusyError"}


def _controller(location: str, fs_root: Path) -> StreamController:
    segments = ChunkedSegmentStorage(open_metadata_store(location), FileSystemChunkStorage(fs_root, name="fs-tier2"),
                                     RecordingGarbageSink(), max_rolling_length=ROLLING)
    return StreamController(segments, open_controller_store(location))


def _race(location: str, fs_root: Path, seed: int, results: Queue[tuple[int, list[str], dict[str, int]]],
          start: Barrier) -> None:
    controller = _controller(location, fs_root)
    start.wait(60)  # both racers begin together: a spawned process can take longer to start than the other's rounds
    rng = random.Random(seed)
    written, txns, refused = 0, [], Counter[str]()
    for _ in range(ROUNDS):
        op = rng.choice(("write", "write", "write", "truncate", "scale", "txn"))
        try:
            active = controller.active_segments(STREAM)
            segment = rng.choice(active)
            if op == "write":
                written += controller.append(controller.segment_name(STREAM, segment.id), b"w" * rng.randint(1, 12))
            elif op == "truncate":
                cut, _ = controller.tail_cut(STREAM)
                controller.truncate(STREAM, cut)
            elif op == "scale":
                low, high = segment.key_range.start, segment.key_range.end
                controller.scale(STREAM, [segment.id], [(low, (low + high) / 2), ((low + high) / 2, high)])
            else:
                txn = controller.create_txn(STREAM)
                txns.append(txn.txn_id.hex)
                name = controller.txn_segment_for_key(txn, rng.random())
                controller.append(name, b"t" * 5)
                controller.commit_txn(txn)
        except ReclaimError as exc:
            refused[type(exc).__name__] += 1
            if isinstance(exc, MetadataConflictError) or type(exc).__name__ in RETRYABLE_CONFLICTS:
                assert getattr(exc, "retryable", True), f"{type(exc).__name__} is a conflict but not retryable"
    results.put((written, txns, dict(refused)))


@pytest.mark.integration
def test_two_controllers_in_two_processes_race_on_one_stream(metadata_location: str, tmp_path: Path) -> None:
    fs_root = tmp_path / "tier2"
    controller = _controller(metadata_location, fs_root)
    controller.create_stream("scope", "orders", 2)
    # Spawned, not forked: a forked child would share the parent's pooled PostgreSQL connections.
    ctx = multiprocessing.get_context("spawn")
    results: Queue[tuple[int, list[str], dict[str, int]]] = ctx.Queue()
    start = ctx.Barrier(2)
    procs = [ctx.Process(target=_race, args=(metadata_location, fs_root, seed, results, start)) for seed in (1, 2)]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0, "a racer met an error that is not one of reclaim's typed errors"
    controller.recover(STREAM)

    refused = sum((Counter(r) for _, _, r in outcomes), Counter[str]())
    # A stale append offset (BadOffsetError) is the racers meeting too: the other one wrote first.
    met = refused["MetadataConflictError"] + refused["StreamBusyError"] + refused["BadOffsetError"]
    assert met > 0, f"the racers never met: {refused}"

    # No lost update: every acknowledged byte is in the stream, and no byte that was not acknowledged.
    committed_txn_bytes = 0
    for _, txn_ids, _ in outcomes:
        for txn_id in txn_ids:
            if controller.get_txn(STREAM, TxnId.from_hex(txn_id)).state is TxnState.COMMITTED:
                committed_txn_bytes += 5
    _, size = controller.tail_cut(STREAM)
    assert size == sum(w for w, _, _ in outcomes) + committed_txn_bytes, refused

    # No chunk both live and marked: a segment's chain is exactly its active rows; every other row is marked.
    store = controller.segments.store
    for name in store.segment_names(STREAM):
        record = store.get_segment(name)
        assert record is not None
        rows = store.list_chunks(name, active_only=False)
        chain = {c.name for c in chunk_chain(record.first_chunk, rows)}
        assert chain == {r.name for r in rows if r.active}, f"{name}: live layout and active rows differ"
        assert all(r.mark_id is not None for r in rows if not r.active), f"{name}: a retired row without its mark"
    active = {controller.segment_name(STREAM, s.id) for s in controller.active_segments(STREAM)}
    assert active <= set(store.segment_names(STREAM))
