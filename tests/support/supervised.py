"""What tests of a supervised ``reclaim worker --processes N`` read: its children from its log, the group's
members from the broker, and the deletions its one endpoint counts."""

from __future__ import annotations

import re
import time
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from prometheus_client.multiprocess import MultiProcessCollector

from reclaim.localstack.procs import pid_alive
from tests.support.pipeline import scrape

STARTED = re.compile(r"worker child (\d+) started \(pid (\d+)\)")
STOPPED = re.compile(r"worker child (\d+) stopped \(pid (\d+)\): (.*)")


def starts(log: Path) -> list[tuple[int, int]]:
    """``(index, pid)`` of every child start the supervisor logged, in order."""
    return [(int(m[1]), int(m[2])) for m in STARTED.finditer(log.read_text(errors="replace"))]


def stops(log: Path) -> list[tuple[int, int, str]]:
    """``(index, pid, how)`` of every child stop the supervisor logged, in order."""
    return [(int(m[1]), int(m[2]), m[3].strip()) for m in STOPPED.finditer(log.read_text(errors="replace"))]


def children(log: Path) -> dict[int, int]:
    """The latest pid of each child index."""
    return dict(starts(log))


def wait_children(log: Path, count: int, timeout_s: float = 60.0) -> dict[int, int]:
    """Until ``count`` starts are logged; the latest pid of each index."""
    deadline = time.monotonic() + timeout_s
    while len(starts(log)) < count:
        assert time.monotonic() < deadline, f"{len(starts(log))} child starts logged, {count} expected:\n" \
                                            f"{log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.1)
    return children(log)


def wait_gone(pids: list[int], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(pid_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running: {[pid for pid in pids if pid_alive(pid)]}"
        time.sleep(0.1)


def member_partitions(bootstrap: str, group: str, topic: str) -> dict[str, int]:
    """Each member of the stable ``group`` and how many partitions of ``topic`` it holds; empty otherwise."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        description = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except (KafkaException, TimeoutError):
        return {}
    if not str(description.state).endswith("STABLE"):
        return {}
    return {member.member_id: sum(tp.topic == topic for tp in member.assignment.topic_partitions)
            if member.assignment else 0 for member in description.members}


def counted(port: int, metric: str) -> float:
    """The sum of every series of ``metric`` on the endpoint at ``port`` (0 before it answers)."""
    try:
        text = scrape(port)
    except OSError:
        return 0.0
    return summed(text, metric)


def summed(exposition: str, metric: str) -> float:
    """The sum of every series of ``metric`` in a scrape's text."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in exposition.splitlines()
               if line.startswith((metric + "{", metric + " ")))


def counted_in_files(tmpdir: Path, metric: str) -> float:
    """The sum of ``metric`` over every child of the supervised run whose ``TMPDIR`` was ``tmpdir``: what its
    endpoint served, read from the children's files once a SIGKILL left them behind (a supervisor that exits
    removes them). Wait for its children to stop first: each finishes its batch in flight and counts it."""
    runs = list(tmpdir.glob("reclaim-worker-metrics-*"))
    assert len(runs) == 1, f"one supervised run's files expected in {tmpdir}, found {runs}"
    collector = MultiProcessCollector(None, path=str(runs[0]))  # type: ignore[no-untyped-call]
    return sum(sample.value for family in collector.collect()  # type: ignore[no-untyped-call]
               for sample in family.samples if sample.name == metric)
