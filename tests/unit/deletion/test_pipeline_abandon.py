"""A worker that lost its partitions abandons its batches in flight: a delete not begun is never sent
(the partitions' new owner sends it), one under way finishes, and nothing is left running.

The executor is a stand-in whose deletes block until released: the point is the pipeline's threads,
which no server can be asked to pause on demand.
"""

from __future__ import annotations

import threading
from typing import Any

from reclaim.consumers.batches import Checked
from reclaim.consumers.pipeline import BatchPipeline


class BlockingExecutor:
    def __init__(self) -> None:
        self.release, self.started, self.deleted = threading.Event(), threading.Event(), []

    def delete(self, plan: Any) -> list[Any]:
        self.started.set()
        self.release.wait(10)
        self.deleted.append(plan)
        return []

    def finish(self, plan: Any, results: Any) -> list[Any]:
        return []


def test_abandoning_cancels_the_deletes_not_begun_and_forgets_every_batch() -> None:
    executor = BlockingExecutor()
    pipeline = BatchPipeline(executor)  # type: ignore[arg-type]
    first, second, third = (Checked((), (), plan) for plan in ("plan-1", "plan-2", "plan-3"))  # type: ignore[arg-type]
    for checked in (first, second, third):
        pipeline.start(checked)
    assert executor.started.wait(5), "the first delete did not begin"
    assert pipeline.abandon() == 2  # the two queued behind the one under way
    assert len(pipeline) == 0
    executor.release.set()
    pipeline.shutdown()
    assert executor.deleted == ["plan-1"]
