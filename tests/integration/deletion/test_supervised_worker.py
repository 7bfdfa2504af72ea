"""``reclaim worker --processes 2`` on the real broker: two processes of one group drain a backlog, the host's
one endpoint sums their counters, a killed child is restarted with nothing lost or deleted twice, SIGTERM
stops them with their offsets committed, a supervisor killed outright leaves no child behind, and the number of
processes by default and past the partitions."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reclaim.exits import ExitCode
from reclaim.localstack.procs import free_port, pid_alive
from reclaim.producers.topics import TopicNames
from reclaim.services.supervisor import host_cores
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from tests.support.chaos import Backlog, spawn_worker
from tests.support.pipeline import Pipeline, inflight, scrape
from tests.support.supervised import counted, member_partitions, starts, stops, wait_children, wait_gone

pytestmark = [pytest.mark.integration]


@pytest.fixture
def fs_pipeline(kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], tmp_path: Path,
                unique_name: Callable[[str], str]) -> Iterator[Callable[[int], Pipeline]]:
    """A pipeline on the filesystem binding whose topics have the given number of partitions (one a test)."""
    made: list[Pipeline] = []

    def make(partitions: int) -> Pipeline:
        binding = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2", create=True)
        made.append(Pipeline(kafka_bootstrap, kafka_topics(partitions=partitions),
                             open_metadata_store(str(tmp_path / "meta.db")), StorageBindings([binding]),
                             unique_name("group")))
        return made[-1]

    yield make
    for pipe in made:
        pipe.close()


@pytest.fixture
def four_partitions(fs_pipeline: Callable[[int], Pipeline]) -> Pipeline:
    return fs_pipeline(4)


@contextlib.contextmanager
def stopped_at_exit(worker: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """The worker, killed on the way out if the test left it running."""
    try:
        yield worker
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)


def test_two_processes_drain_share_the_partitions_sum_their_counters_and_stop_committed(
        four_partitions: Pipeline, tmp_path: Path) -> None:
    pipe, log, port = four_partitions, tmp_path / "worker.log", free_port()
    backlog = Backlog.marked(pipe, live=20, segments=4, per_segment=100)
    worker = spawn_worker(pipe, tmp_path / "tier2", log, RECLAIM_PROCESSES="2", RECLAIM_METRICS_PORT=str(port),
                          RECLAIM_BATCH_SIZE="20")
    try:
        pids = wait_children(log, 2)
        assert sorted(pids) == [0, 1]
        deadline = time.monotonic() + 120
        while True:
            members = member_partitions(pipe.bootstrap, pipe.group_id, pipe.topics.deletion)
            if len(members) == 2 and all(members.values()):
                break
            assert time.monotonic() < deadline and worker.poll() is None, (members, log.read_text()[-3000:])
            time.sleep(0.2)
        assert sorted(members.values()) == [2, 2], members  # each child owns two partitions of the main topic
        while backlog.left() or counted(port, "reclaim_ledgers_deleted_total") < len(backlog.doomed):
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        metrics = scrape(port)
        # One endpoint for the host: the two children's counters summed, the supervisor's own series beside.
        assert counted(port, "reclaim_ledgers_deleted_total") == len(backlog.doomed)
        assert counted(port, "reclaim_deletion_messages_received_total") >= len(backlog.doomed)
        assert "reclaim_worker_processes 2.0" in metrics
        assert "reclaim_deletion_batch_delete_seconds_bucket" in metrics
        assert metrics.count("# TYPE reclaim_estimated_inflight_deletions gauge") == 1
        assert 'pid="' not in metrics  # no per-child series: one value per series for the host
        assert "# TYPE reclaim_dependency_up gauge" in metrics
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
    assert sorted((index, how) for index, _, how in stops(log)) == [(0, "exit code 0"), (1, "exit code 0")]
    wait_gone(list(pids.values()), timeout_s=5)
    assert inflight(pipe) == 0  # committed offsets are the end offsets, on every input topic
    assert set(backlog.binding.iter_names()) == {c.name for c in backlog.live}
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob(f"reclaim-worker-metrics-{worker.pid}-*"))


def test_a_killed_child_is_restarted_and_nothing_is_lost_or_deleted_twice(four_partitions: Pipeline,
                                                                           tmp_path: Path) -> None:
    pipe, log, port = four_partitions, tmp_path / "worker.log", free_port()
    backlog = Backlog.marked(pipe, live=20, segments=8, per_segment=150)
    worker = spawn_worker(pipe, tmp_path / "tier2", log, RECLAIM_PROCESSES="2", RECLAIM_METRICS_PORT=str(port),
                          RECLAIM_BATCH_SIZE="10", RECLAIM_INSTANCE_ID="supervised")
    try:
        victim = wait_children(log, 2)[0]
        backlog.wait_left(0.8, worker, log)
        os.kill(victim, signal.SIGKILL)
        restarted = wait_children(log, 3)
        assert restarted[0] != victim and pid_alive(restarted[0])
        assert any(index == 0 and how.startswith("signal SIGKILL") for index, _, how in stops(log))
        backlog.assert_clean("supervised worker, one child killed", "1 × SIGKILL of a child", tmp_path / "tier2",
                             worker, log, timeout_s=120)
        deleted = counted(port, "reclaim_ledgers_deleted_total")
        gone = counted(port, 'reclaim_deletion_outcomes_total{outcome="already_gone"}')
        # Each chunk deleted once: the killed child's deletions that were not committed come back as
        # already gone, never as a second delete.
        assert deleted <= len(backlog.doomed) <= deleted + gone, (deleted, gone)
        assert counted(port, "reclaim_worker_restarts_total") == 1
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()[-3000:]


def test_a_supervisor_killed_outright_leaves_no_child_behind(four_partitions: Pipeline, tmp_path: Path) -> None:
    pipe, log, port = four_partitions, tmp_path / "worker.log", free_port()
    Backlog.marked(pipe, live=5, segments=2, per_segment=20)
    worker = spawn_worker(pipe, tmp_path / "tier2", log, RECLAIM_PROCESSES="2", RECLAIM_METRICS_PORT=str(port))
    try:
        pids = list(wait_children(log, 2).values())
    finally:
        worker.kill()
    worker.wait(timeout=30)
    wait_gone(pids, timeout_s=60)  # each read the end of its lifeline and stopped as on SIGTERM
    assert "the supervisor is gone: finishing the batch in flight, then stopping" in log.read_text()


@pytest.mark.parametrize("partitions", [1, 4])
def test_by_default_one_process_per_core_at_most_one_per_partition(
        partitions: int, fs_pipeline: Callable[[int], Pipeline], tmp_path: Path) -> None:
    pipe = fs_pipeline(partitions)
    log, expected = tmp_path / "worker.log", min(host_cores(), partitions)
    with stopped_at_exit(spawn_worker(pipe, tmp_path / "tier2", log, RECLAIM_PROCESSES="")) as worker:  # the default
        deadline = time.monotonic() + 60
        while "deletion worker started" not in log.read_text():
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        assert f"processes: {expected} (usable cores: {host_cores()}; partitions of {pipe.topics.deletion}: " \
               f"{partitions}; consumers a process: 1)" in log.read_text()
        if expected == 1:  # no supervisor: the worker itself, as with --processes 1
            assert "storage bindings: fs-tier2" in log.read_text() and not starts(log)
        else:
            assert sorted(wait_children(log, expected)) == list(range(expected))
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()[-3000:]


def test_more_processes_than_partitions_run_as_asked_with_a_warning(
        fs_pipeline: Callable[[int], Pipeline], tmp_path: Path) -> None:
    pipe, log = fs_pipeline(1), tmp_path / "worker.log"
    with stopped_at_exit(spawn_worker(pipe, tmp_path / "tier2", log, RECLAIM_PROCESSES="2")) as worker:
        assert sorted(wait_children(log, 2)) == [0, 1]  # as asked, idle members and all
        assert (f"processes: 2 x 1 consumer(s) = 2 consumers for the 1 partition(s) of {pipe.topics.deletion}: "
                "1 will be assigned none of them") in log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()[-3000:]


@pytest.mark.parametrize("processes", ["1", "2"])
def test_ctrl_c_stops_the_worker_with_exit_130(processes: str, fs_pipeline: Callable[[int], Pipeline],
                                               tmp_path: Path) -> None:
    """Ctrl-C is an interruption, as for every command (docs/reference/exit-codes.md); SIGTERM, a service
    manager's stop, is exit 0 (above)."""
    pipe, log = fs_pipeline(2), tmp_path / "worker.log"
    with stopped_at_exit(spawn_worker(pipe, tmp_path / "tier2", log, RECLAIM_PROCESSES=processes)) as worker:
        deadline = time.monotonic() + 60
        while "deletion worker started" not in log.read_text():
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=60) == ExitCode.INTERRUPTED, log.read_text()[-3000:]
