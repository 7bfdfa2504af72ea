"""The in-flight batch pipeline: a checked batch's storage deletes on one thread, its row cleanup on
another, batches completed strictly in the order they started.

While the worker polls and checks one batch, the delete thread runs the deletes of the batch before
it and the cleanup thread the row cleanup of the one before that.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from reclaim.consumers.batches import Checked, Completed, Partition
from reclaim.deletion.executor import BatchPlan, DeleteResults, DeletionExecutor
from reclaim.deletion.outcomes import Verdict
from reclaim.stage_clock import stage

MAX_IN_FLIGHT = 2
"""Batches a worker keeps going behind the one it is checking: one deleting, one cleaning up rows."""


@dataclass
class _Running:
    checked: Checked
    verdicts: Future[list[Verdict]] | None
    deleted: Future[DeleteResults] | None = None
    dropped: set[Partition] = field(default_factory=set)


class BatchPipeline:
    """Runs checked batches' deletes and row cleanup; hands them back completed, oldest first."""

    def __init__(self, executor: DeletionExecutor, depth: int = MAX_IN_FLIGHT) -> None:
        self._executor = executor
        self._depth = depth
        self._running: deque[_Running] = deque()
        self._deleter = ThreadPoolExecutor(1, thread_name_prefix="reclaim-delete")
        self._cleaner = ThreadPoolExecutor(1, thread_name_prefix="reclaim-cleanup")

    def __len__(self) -> int:
        return len(self._running)

    @property
    def over_depth(self) -> bool:
        """More batches running than the pipeline keeps going behind the one being checked."""
        return len(self._running) > self._depth

    def start(self, checked: Checked) -> None:
        """Queue the batch's storage deletes, and its row cleanup after them (each stage in order)."""
        verdicts = deleted = None
        if checked.plan is not None:
            deleted = self._deleter.submit(self._delete, checked.plan)
            verdicts = self._cleaner.submit(self._finish, checked.plan, deleted)
        self._running.append(_Running(checked, verdicts, deleted))

    def _delete(self, plan: BatchPlan) -> DeleteResults:
        with stage("delete"):
            return self._executor.delete(plan)

    def _finish(self, plan: BatchPlan, deleted: Future[DeleteResults]) -> list[Verdict]:
        results = deleted.result()
        with stage("cleanup"):
            return self._executor.finish(plan, results)

    def complete_oldest(self) -> Completed:
        """Wait for the oldest batch; if it failed, every batch behind it is forgotten too (their
        offsets would pass its records), and the error is raised."""
        running = self._running.popleft()
        try:
            verdicts = running.verdicts.result() if running.verdicts is not None else []
        except BaseException:
            self._running.clear()
            raise
        checked = running.checked
        if not checked.undecodable and len(verdicts) == len(checked.decoded):
            # Nearly every batch: its records as polled, each partition's in offset order.
            return Completed(checked.decoded, tuple(verdicts), frozenset(running.dropped))
        judged = [*zip(checked.decoded, verdicts, strict=True), *((u.polled, u.verdict) for u in checked.undecodable)]
        judged.sort(key=lambda j: (j[0].topic, j[0].partition, j[0].offset))
        return Completed(tuple(p for p, _ in judged), tuple(v for _, v in judged), frozenset(running.dropped))

    def drop(self, partitions: Iterable[Partition]) -> None:
        """Partitions sought back to an earlier record: the running batches must not ack theirs."""
        wanted = set(partitions)
        if wanted:
            for running in self._running:
                running.dropped |= wanted

    def abandon(self) -> int:
        """The worker lost its partitions (its session expired, say behind a cut link): the group gave
        them to another worker, which reads these records again. Deletes not begun yet are cancelled
        rather than sent a second time; one already under way finishes. Every running batch is
        forgotten; returns how many deletes were cancelled."""
        cancelled = 0
        for running in self._running:
            if running.deleted is not None and running.deleted.cancel():
                cancelled += 1
            if running.verdicts is not None:
                running.verdicts.cancel()
        self._running.clear()
        return cancelled

    def clear(self) -> None:
        """Forget every running batch (their deletes still finish; the records come again)."""
        self._running.clear()

    def shutdown(self) -> None:
        self._deleter.shutdown()
        self._cleaner.shutdown()
