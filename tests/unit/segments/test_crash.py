"""A process killed between any two steps of a stream operation; the retry ends where an uncrashed run does.

"Where it ends" includes the last topology the controller published, so a crash at the publish step
or at the finish (after publishing) must be followed by a publish of the same topology.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reclaim.schemas import StreamCut, StreamTopology
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.controller_store import StreamMetadataStore
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.segments.ids import SegmentId, TxnId
from reclaim.segments.operations import CrashHook
from reclaim.segments.stream_errors import StreamBusyError
from reclaim.segments.stream_model import TxnState
from reclaim.segments.streams import StreamController
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.segments import ROLLING, STREAM

#: The exit code of a child the crash hook killed.
CRASHED = 77


class FileTopologySink:
    """Appends each published topology as one JSON line, so what a killed child published outlives it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def publish(self, topology: StreamTopology) -> None:
        line = (json.dumps(topology.to_avro(), sort_keys=True) + "\n").encode()
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line)  # one write: a crash leaves the line whole or absent
        finally:
            os.close(descriptor)

    def published(self) -> list[StreamTopology]:
        if not self.path.exists():
            return []
        return [StreamTopology.from_avro(json.loads(line)) for line in self.path.read_text().splitlines()]


def published(root: Path) -> list[StreamTopology]:
    return FileTopologySink(root / "topology.jsonl").published()


@contextmanager
def opened(root: Path, hook: CrashHook | None = None,
           clock: Callable[[], float] = time.time) -> Iterator[StreamController]:
    """A controller over the store, tier-2 directory, controller tables and published topologies under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    store = SQLiteMetadataStore(root / "metadata.db")
    segments = ChunkedSegmentStorage(store, FileSystemChunkStorage(root / "tier2", name="fs-tier2"),
                                     RecordingGarbageSink(), max_rolling_length=ROLLING)
    streams = StreamMetadataStore(store.path)
    sink = FileTopologySink(root / "topology.jsonl")
    try:
        yield StreamController(segments, streams, crash_hook=hook, clock=clock, topology_sink=sink)
    finally:
        streams.close()
        store.close()


def base_stream(controller: StreamController, txns: int) -> None:
    controller.create_stream("scope", "orders", 2)
    for n in (0, 1):
        controller.append(f"{STREAM}/{n}.#epoch.0", b"base-%d-" % n * 2)
    for i in range(txns):
        txn = controller.create_txn(STREAM)
        for segment in txn.segment_names():
            controller.append(segment, b"txn%d:" % i * 3)


def txn(controller: StreamController, counter: int) -> Any:
    return controller.get_txn(STREAM, TxnId(0, counter))


def setup_in_place(controller: StreamController) -> None:
    base_stream(controller, txns=2)
    controller.request_commit(txn(controller, 2))


def setup_rolling(controller: StreamController) -> None:
    base_stream(controller, txns=2)
    controller.scale(STREAM, [SegmentId(0, 0)], [(0.0, 0.25), (0.25, 0.5)])
    controller.request_commit(txn(controller, 2))


def setup_committed(controller: StreamController) -> None:
    setup_rolling(controller)
    controller.commit_txn(txn(controller, 1))
    controller.create_txn(STREAM)


def setup_sealed(controller: StreamController) -> None:
    setup_committed(controller)
    controller.seal_stream(STREAM)


def setup_truncatable(controller: StreamController) -> None:
    base_stream(controller, txns=0)
    controller.scale(STREAM, [SegmentId(0, 0)], [(0.0, 0.25), (0.25, 0.5)])
    for number in (2, 3):
        controller.append(f"{STREAM}/{number}.#epoch.1", b"after-scale-%d" % number)


#: Segment 0 wholly before the cut (deleted), 1 of epoch 0 and both successors of 0 truncated.
TRUNCATION_CUT = StreamCut.from_mapping({SegmentId(0, 1).value: 9, SegmentId(1, 2).value: 3, SegmentId(1, 3).value: 5})


@dataclass(frozen=True)
class Scenario:
    setup: Callable[[StreamController], None]
    run: Callable[[StreamController], object]


SCENARIOS = {
    "scale": Scenario(lambda c: base_stream(c, txns=1),
                      lambda c: c.scale(STREAM, [SegmentId(0, 0), SegmentId(0, 1)],
                                        [(0.0, 0.3), (0.3, 0.6), (0.6, 1.0)])),
    "in-place commit": Scenario(setup_in_place, lambda c: c.commit_txn(txn(c, 1))),
    "rolling commit": Scenario(setup_rolling, lambda c: c.commit_txn(txn(c, 1))),
    "seal stream": Scenario(setup_committed, lambda c: c.seal_stream(STREAM)),
    "delete stream": Scenario(setup_sealed, lambda c: c.delete_stream(STREAM)),
    "abort": Scenario(lambda c: base_stream(c, txns=2), lambda c: c.abort_txn(txn(c, 2))),
    "truncate": Scenario(setup_truncatable, lambda c: c.truncate(STREAM, TRUNCATION_CUT)),
}


def snapshot(controller: StreamController) -> dict[str, Any]:
    """Everything a user can observe of the stream, minus timestamps, random chunk names and the stream's random
    incarnation (the published topology must still carry the stream's own)."""
    store = controller.segments.store
    streams = controller.store
    stream = streams.get_stream(STREAM)
    assert stream is not None
    segments: dict[str, Any] = {}
    for name in store.segment_names(STREAM + "/"):
        record = store.get_segment(name)
        assert record is not None
        chunks = sorted((c.start_offset, c.length, c.active) for c in store.list_chunks(name, active_only=False))
        data = controller.read_all(name) if controller.segments.exists(name) else None
        segments[name] = (int(record.status), record.start_offset, record.length, chunks, data)
    topologies = [t for t in FileTopologySink(Path(streams.path).parent / "topology.jsonl").published()
                  if t.stream == STREAM]
    assert topologies[-1].incarnation == stream.incarnation
    return {
        "published": topologies[-1].to_avro() | {"published_at": None, "incarnation": None},
        "sealed": streams.get_sealed_lengths(STREAM),
        "stream": (stream.state, stream.active_epoch, stream.txn_counter, stream.commit_counter),
        "epochs": [(e.epoch, e.reference, [(s.id.value, s.key_range) for s in e.segments])
                   for e in streams.get_epochs(STREAM)],
        "txns": [(t.txn_id, t.state, t.commit_order) for t in streams.list_txns(STREAM)],
        "pending": streams.get_operation(STREAM),
        "head": streams.get_head(STREAM),
        "segments": segments,
    }


def _child(root: str, scenario: str, crash_at: int) -> None:
    calls = 0

    def hook(step: str) -> None:
        nonlocal calls
        calls += 1
        if calls == crash_at:
            os._exit(CRASHED)  # no cleanup, no rollback handlers: as a SIGKILL would leave it

    with opened(Path(root), hook) as controller:
        SCENARIOS[scenario].run(controller)


def crash_in_child(root: Path, scenario: str, crash_at: int) -> int | None:
    # fork: the child starts in milliseconds and opens its own connections to the same files.
    process = multiprocessing.get_context("fork").Process(target=_child, args=(str(root), scenario, crash_at))
    process.start()
    process.join(30)
    return process.exitcode


def reference_run(root: Path, scenario: Scenario) -> tuple[list[str], dict[str, Any]]:
    with opened(root) as controller:
        scenario.setup(controller)
    steps: list[str] = []
    with opened(root, steps.append) as controller:
        scenario.run(controller)
        return steps, snapshot(controller)


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_crash_between_any_two_steps_then_a_retry_ends_in_the_uncrashed_state(tmp_path: Path, name: str) -> None:
    scenario = SCENARIOS[name]
    steps, expected = reference_run(tmp_path / "reference", scenario)
    assert expected["pending"] is None and len(steps) >= 2
    for crash_at in range(1, len(steps) + 1):
        root = tmp_path / f"crash-{crash_at}"
        with opened(root) as controller:
            scenario.setup(controller)
        assert crash_in_child(root, name, crash_at) == CRASHED, f"step {crash_at} ({steps[crash_at - 1]})"
        with opened(root) as controller:
            # Abort is not a stream operation: its transaction's ABORTING state is what a retry resumes.
            assert controller.store.get_operation(STREAM) is not None or name == "abort"
            if crash_at % 2 or name == "abort":
                scenario.run(controller)  # the same request again resumes the pending operation
            else:
                assert controller.recover(STREAM) is not None  # a restarted controller finishes it
                scenario.run(controller)  # and the request's retry then changes nothing
            assert snapshot(controller) == expected, f"crash at step {crash_at} ({steps[crash_at - 1]})"


def test_rolling_commit_steps_follow_the_seed(tmp_path: Path) -> None:
    steps, _ = reference_run(tmp_path, SCENARIOS["rolling commit"])
    # duplicate the txn epoch, merge both transactions, seal it, duplicate the active epoch, seal the old active.
    assert steps == ["commit:create"] * 2 + ["commit:merge"] * 4 + ["commit:seal"] * 2 + ["commit:create"] * 3 + [
        "commit:seal"] * 3 + ["commit:publish", "finish"]


def test_a_stale_operation_blocks_others_until_taken_over(tmp_path: Path) -> None:
    with opened(tmp_path) as controller:
        base_stream(controller, txns=1)
    assert crash_in_child(tmp_path, "scale", crash_at=3) == CRASHED
    with opened(tmp_path) as controller:
        with pytest.raises(StreamBusyError, match="scale to epoch 1"):
            controller.commit_txn(txn(controller, 1))
        assert txn(controller, 1).state is TxnState.COMMITTING  # marked; it waits for the stream
    with opened(tmp_path, clock=lambda: time.time() + 3600) as controller:
        controller.commit_txn(txn(controller, 1))  # the scale is stale: finished first, then the commit rolls
        history = controller.history(STREAM)
        assert [(e.epoch, e.reference) for e in history.epochs] == [(0, 0), (1, 1), (2, 0), (3, 1)]
        assert controller.read_all(f"{STREAM}/0.#epoch.2") == b"txn0:" * 3


def test_a_live_executor_renews_its_operation_so_it_is_not_taken_over(tmp_path: Path) -> None:
    """Each step of a slow scale takes 20 s of the controllers' clock, so the whole scale outlasts the
    30 s takeover; the executor renews its operation as it goes, so a competing request meanwhile is
    told the stream is busy at every step instead of finishing the scale under the executor's feet."""
    with opened(tmp_path) as controller:
        base_stream(controller, txns=1)
    now = [time.time()]
    refusals: list[str] = []
    with opened(tmp_path, clock=lambda: now[0]) as competitor:

        def slow_step(step: str) -> None:
            now[0] += 20
            with pytest.raises(StreamBusyError) as busy:
                competitor.commit_txn(txn(competitor, 1))
            refusals.append(str(busy.value))

        with opened(tmp_path, slow_step, clock=lambda: now[0]) as executor:
            SCENARIOS["scale"].run(executor)
        assert len(refusals) >= 3 and all("scale to epoch 1" in r for r in refusals)
        assert competitor.store.get_operation(STREAM) is None
        competitor.commit_txn(txn(competitor, 1))  # the scale finished: the commit goes ahead now
        assert txn(competitor, 1).state is TxnState.COMMITTED


PUBLISH_STEPS = {"scale": "scale:publish", "rolling commit": "commit:publish", "seal stream": "seal:publish",
                 "delete stream": "delete:publish"}


@pytest.mark.parametrize("resume", ["retry", "recover"])
@pytest.mark.parametrize("killed_at", ["publish", "finish"])
@pytest.mark.parametrize("name", PUBLISH_STEPS)
def test_killed_at_publish_or_finish_the_topology_is_published_by_the_retry_or_recovery(
        tmp_path: Path, name: str, killed_at: str, resume: str) -> None:
    scenario = SCENARIOS[name]
    steps, expected = reference_run(tmp_path / "reference", scenario)
    crash_at = steps.index(PUBLISH_STEPS[name] if killed_at == "publish" else "finish") + 1
    root = tmp_path / "crashed"
    with opened(root) as controller:
        scenario.setup(controller)
    before = published(root)
    assert crash_in_child(root, name, crash_at) == CRASHED
    # The hook runs before its step: killed at publish, nothing was sent; killed at finish, it was.
    crashed = published(root)
    assert len(crashed) == len(before) + (killed_at == "finish")
    with opened(root) as controller:
        if resume == "retry":
            scenario.run(controller)
        else:
            assert controller.recover(STREAM) is not None
        after = published(root)
        assert len(after) == len(crashed) + 1
        scenario.run(controller)  # a retry of the completed operation publishes nothing more
        assert len(published(root)) == len(after)
        assert snapshot(controller) == expected
    if killed_at == "finish":
        assert dataclasses.replace(after[-1], published_at=0) == dataclasses.replace(crashed[-1], published_at=0)
