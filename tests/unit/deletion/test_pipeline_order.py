"""A completed batch hands back every record it polled with its own verdict, each partition's records in
offset order: the decoded records as polled (their verdicts side by side with them, no object a
record), the refused ones merged back in by partition and offset.

The executor is a stand-in that gives each pending delete a verdict naming its record: the point is
which verdict ends up beside which record, not the checks.
"""

from __future__ import annotations

from typing import Any

import pytest

from reclaim.consumers.batches import Checked, Polled, Undecodable
from reclaim.consumers.pipeline import BatchPipeline
from reclaim.consumers.retry import Delivery
from reclaim.deletion.outcomes import Outcome, Verdict


class NamingExecutor:
    """Deletes nothing; the verdict of each pending delete of a plan names it."""

    def delete(self, plan: Any) -> dict[Any, Any]:
        return {}

    def finish(self, plan: Any, results: Any) -> list[Verdict]:
        return [Verdict(Outcome.DELETED, name) for name in plan]


def polled(topic: str, partition: int, offset: int) -> Polled:
    return Polled(topic, partition, offset, None, b"", Delivery.of(topic, partition, offset, None))


def completed(decoded: list[Polled], undecodable: list[Undecodable]) -> tuple[list[tuple[str, int, int]], list[str]]:
    pipeline = BatchPipeline(NamingExecutor())  # type: ignore[arg-type]
    try:
        plan = [f"{p.topic}[{p.partition}]@{p.offset}" for p in decoded]
        pipeline.start(Checked(tuple(decoded), tuple(undecodable), plan if decoded else None))  # type: ignore[arg-type]
        done = pipeline.complete_oldest()
    finally:
        pipeline.shutdown()
    assert len(done.polled) == len(done.verdicts) == len(decoded) + len(undecodable)
    return [(p.topic, p.partition, p.offset) for p in done.polled], [v.reason for v in done.verdicts]


def test_a_batch_of_decoded_records_comes_back_as_polled_with_its_own_verdicts() -> None:
    # Two partitions interleaved as a consume call may return them: each in offset order.
    records = [polled("d", 1, 7), polled("d", 0, 3), polled("d", 1, 8), polled("d", 0, 4)]
    order, reasons = completed(records, [])
    assert order == [("d", 1, 7), ("d", 0, 3), ("d", 1, 8), ("d", 0, 4)]
    assert reasons == ["d[1]@7", "d[0]@3", "d[1]@8", "d[0]@4"]


@pytest.mark.parametrize("refused_at", [0, 2, 5])
def test_refused_records_are_merged_back_by_partition_and_offset(refused_at: int) -> None:
    everything = [polled("d", 0, offset) for offset in range(3)] + [polled("d", 1, offset) for offset in range(3)]
    refused = everything[refused_at]
    decoded = [p for p in everything if p is not refused]
    bad = Verdict(Outcome.UNDECODABLE, "refused")
    order, reasons = completed(decoded, [Undecodable(refused, bad)])
    assert order == [(p.topic, p.partition, p.offset) for p in everything]
    expected = [f"d[{p.partition}]@{p.offset}" if p is not refused else "refused" for p in everything]
    assert reasons == expected


def test_a_batch_of_refused_records_only_completes_with_their_verdicts() -> None:
    refused = [Undecodable(polled("d", 0, 9), Verdict(Outcome.UNAUTHENTICATED, "unsigned")),
               Undecodable(polled("d", 0, 2), Verdict(Outcome.UNDECODABLE, "garbled"))]
    order, reasons = completed([], refused)
    assert order == [("d", 0, 2), ("d", 0, 9)]
    assert reasons == ["garbled", "unsigned"]
