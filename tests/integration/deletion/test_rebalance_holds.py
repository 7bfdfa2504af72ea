"""A retry tier's partition held by a worker is read again when a rebalance gives it back to that worker.

The case: records whose marks never commit go mark-pending into the first retry tier, and worker A holds
those partitions until the records are due. A second worker joins; the rebalance revokes A's partitions
(all of them, under eager assignment) and gives some back. librdkafka keeps a partition's pause across a
revoke and a reassignment (librdkafka #1849): a worker that forgot its hold on revoke never read those
partitions again, and the group's lag stayed above 0 for ever. Here every record ends within the mark
timeout and the tiers' delays, under eager and cooperative-sticky assignment.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.deletion.records import pending_deletes_for
from reclaim.producers.topics import TopicNames
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.pipeline import Pipeline, inflight, outcomes

pytestmark = pytest.mark.integration

RECORDS = 40
MARK_TIMEOUT_S = 6.0
DELAYS = (10, 20)
"""The first tier holds its partitions well past the time a rebalance takes."""


@pytest.mark.parametrize(("assignment", "static"), [("eager", False), ("cooperative-sticky", False),
                                                    ("eager", True)])
def test_a_held_partition_given_back_by_a_rebalance_is_read_again(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], tmp_path: Path,
        unique_name: Callable[[str], str], assignment: str, static: bool) -> None:
    """``static``: both workers are static members (``group.instance.id``), as a supervisor's children are."""
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2", create=True)
    pipe = Pipeline(kafka_bootstrap, kafka_topics(retry_delays=DELAYS, partitions=2),
                    SQLiteMetadataStore(tmp_path / "meta.db"), StorageBindings([fs]), unique_name("group"))
    try:
        live = pipe.write_chunks(fs, "scope/stream/0.#epoch.0", RECORDS)
        pipe.publisher.publish(pending_deletes_for(live, "never-committed", int(time.time() * 1000)))
        members = iter([unique_name("member"), unique_name("member")] if static else [None, None])
        first = pipe.worker(mark_timeout_s=MARK_TIMEOUT_S, assignment=assignment, instance_id=next(members))
        reports = pipe.drain(first, lambda _: first.held == 2, timeout_s=60)  # both of the first tier's partitions
        second = pipe.worker(mark_timeout_s=MARK_TIMEOUT_S, assignment=assignment, instance_id=next(members))
        deadline = time.monotonic() + 30
        while not second.assigned:
            assert time.monotonic() < deadline, "the second worker was given no partition"
            reports += [first.run_once(), second.run_once()]
        # From here every record is due within the mark timeout and the longest delay; a partition left
        # paused would keep the lag above 0 past it.
        settle_by = time.monotonic() + MARK_TIMEOUT_S + max(DELAYS) + 20
        while outcomes(reports).get("in-use", 0) < RECORDS or inflight(pipe) > 0:
            assert time.monotonic() < settle_by, (
                f"stalled: lag {inflight(pipe)}, {outcomes(reports)}, held {first.held} + {second.held}")
            reports += [first.run_once(), second.run_once()]
        assert outcomes(reports)["in-use"] == RECORDS
        assert set(outcomes(reports)) == {"mark-pending", "in-use"}
        assert all(fs.exists(chunk.name) for chunk in live)
        assert first.held == second.held == 0
    finally:
        pipe.close()
