"""The chaos suite's helpers: servers of a test's own that can be killed and restarted, reclaim processes,
a marked backlog to drain, and the closing table's results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools import pg_server
from devtools.minio_server import start_minio
from reclaim.consumers.lag import estimated_inflight
from reclaim.errors import ReclaimError
from reclaim.localstack.kafka_broker import BrokerPorts, start_broker
from reclaim.localstack.procs import free_port, pid_alive, stop_pid, wait_until
from reclaim.producers.topics import TopicNames
from reclaim.schemas.streams import StreamCut
from reclaim.segments.streams import StreamController
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord
from reclaim.storage.sql_store import open_metadata_store
from reclaim.tools.dlq.reader import read_all as read_dlq
from tests.support.cli import run_reclaim
from tests.support.pipeline import Pipeline, inflight, wait_drained

STREAM = "scope/orders"


def crash(pid: int, what: str) -> None:
    """SIGKILL the server ``pid`` leads and its whole process group, as a crashed host would lose them."""
    os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(pid), 30, f"killed {what}")


class RestartablePostgres:
    """A PostgreSQL server of the test's own: ``kill()`` it (SIGKILL, as a crash) and ``restart()`` it from
    its data directory on the same port."""

    def __init__(self, server: pg_server.PostgresServer) -> None:
        self.server = server

    def url(self) -> str:
        return self.server.url()

    def kill(self) -> None:
        """SIGKILL the server and its backends at once, as a crashed database host would lose them."""
        crash(self.server.pid, "PostgreSQL")

    def restart(self) -> None:
        self.server = pg_server.restart(self.server)


class RestartableBroker:
    """A Kafka broker of the test's own (KRaft, one node): ``kill()`` it with SIGKILL and ``restart()`` it
    from its data directory on the same ports."""

    def __init__(self, data_dir: Path, cache_dir: Path) -> None:
        self._data_dir, self._cache_dir = data_dir, cache_dir
        self.ports = BrokerPorts(client=free_port(), controller=free_port())
        self.pid = start_broker(data_dir, cache_dir, self.ports).pid

    @property
    def bootstrap(self) -> str:
        return self.ports.bootstrap

    def kill(self) -> None:
        crash(self.pid, "Kafka broker")

    def restart(self) -> None:
        self.pid = start_broker(self._data_dir, self._cache_dir, self.ports).pid

    def stop(self) -> None:
        stop_pid(self.pid)


def spawn_reclaim(command: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A ``reclaim <command>`` process with ``env`` over the test's environment, logging to ``log`` (a file,
    not a pipe nobody reads: a chatty outage must not block it)."""
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "reclaim", command], stdout=out, stderr=out,
                                env={**os.environ, **env})


def filesystem_pipeline(bootstrap: str, topics: TopicNames, work: Path, group: str) -> Pipeline:
    """A pipeline on a SQLite store and a filesystem binding (``fs-tier2``), both under ``work``: the
    binding's root is ``work / "tier2"``."""
    return Pipeline(bootstrap, topics, open_metadata_store(str(work / "meta.db")),
                    StorageBindings([FileSystemChunkStorage(work / "tier2", name="fs-tier2", create=True)]), group)


def spawn_worker(pipe: Pipeline, fs_root: Path, log: Path, **env: str) -> subprocess.Popen[bytes]:
    """A ``reclaim worker`` process serving ``pipe``."""
    return spawn_reclaim("worker", pipe.worker_env(fs_root, **env), log)


class RestartableMinio:
    """A MinIO server of the test's own: ``kill()`` it with SIGKILL and ``restart()`` it on the same port
    and data directory."""

    def __init__(self, work: Path, cache_dir: Path) -> None:
        self._work, self._cache_dir = work, cache_dir
        self.pid, self.endpoint = start_minio(work, cache_dir)

    def kill(self) -> None:
        crash(self.pid, "MinIO")

    def restart(self) -> None:
        port = int(self.endpoint.url.rsplit(":", 1)[1])
        self.pid, self.endpoint = start_minio(self._work, self._cache_dir, port=port)

    def stop(self) -> None:
        stop_pid(self.pid)


@dataclass
class Backlog:
    """Live chunks and marked ones on one binding of ``pipe`` (the filesystem's unless named); what every
    scenario drains."""

    pipe: Pipeline
    binding: BaseChunkStorage
    live: list[ChunkRecord]
    doomed: list[ChunkRecord]
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def marked(cls, pipe: Pipeline, live: int = 30, segments: int = 8, per_segment: int = 100,
               binding_name: str = "fs-tier2") -> Backlog:
        binding = pipe.bindings.get(binding_name)
        assert isinstance(binding, BaseChunkStorage)
        kept = pipe.write_chunks(binding, "scope/stream/0.#epoch.0", live)
        doomed: list[ChunkRecord] = []
        for segment in range(segments):
            batch = pipe.write_chunks(binding, f"scope/stream/{segment + 1}.#epoch.0", per_segment)
            pipe.service.mark(batch)
            doomed += batch
        return cls(pipe, binding, kept, doomed)

    def left(self) -> int:
        """How many marked chunks are still on tier-2."""
        return sum(self.binding.exists(c.name) for c in self.doomed)

    def wait_left(self, fraction: float, worker: subprocess.Popen[bytes], log: Path, timeout_s: float = 120) -> None:
        """Wait until at most ``fraction`` of the marked chunks are left (the drain is under way)."""
        deadline = time.monotonic() + timeout_s
        while self.left() > len(self.doomed) * fraction:
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)

    def assert_clean(self, scenario: str, faults: str, fs_root: Path, worker: subprocess.Popen[bytes], log: Path,
                     timeout_s: float = 180, env: dict[str, str] | None = None, dead_lettered: int = 0) -> None:
        """Drained, the worker alive throughout; tier-2 holds exactly the live chunks, their rows alone
        are left, lag 0, ``dead_lettered`` records in the DLQ (none unless a scenario exceeds the attempt
        limit on purpose and replays them), and ``reclaim audit`` agrees. The figures go into the suite's
        closing table whatever the outcome."""
        try:
            wait_drained(self.pipe, timeout_s=timeout_s)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the worker's log ends:\n{log.read_text()[-5000:]}") from exc
        finally:
            on_tier2 = set(self.binding.iter_names())
            dead, _ = read_dlq(self.pipe.bootstrap, self.pipe.topics.dlq)  # to the high watermarks, by assignment
            audit = run_reclaim("audit", "--json", env={**os.environ, **self.pipe.worker_env(fs_root, **(env or {}))},
                                timeout=60)
            orphans = orphans_in(audit.stdout)
            RESULTS.append(ChaosResult(
                scenario, faults, len(self.live) + len(self.doomed),
                deleted=sum(c.name not in on_tier2 for c in self.doomed), dead_lettered=len(dead), orphans=orphans,
                live_deleted=sum(c.name not in on_tier2 for c in self.live),
                seconds=time.monotonic() - self.started))
        assert worker.poll() is None, f"the worker died: {log.read_text()[-3000:]}"
        assert on_tier2 == {c.name for c in self.live}, "orphans or deleted live chunks"
        assert set(self.pipe.store.get_chunks(c.name for c in self.live + self.doomed)) == {c.name for c in self.live}
        assert inflight(self.pipe) == 0
        assert len(dead) == dead_lettered, f"{len(dead)} records dead-lettered, {dead_lettered} expected"
        assert audit.returncode == 0 and orphans == 0, audit.stdout + audit.stderr


@dataclass(frozen=True)
class ChaosResult:
    """One scenario's line of the closing table."""

    scenario: str
    faults: str
    records: int
    deleted: int
    dead_lettered: int
    orphans: int
    live_deleted: int
    seconds: float


RESULTS: list[ChaosResult] = []


def orphans_in(audit_json: str) -> int:
    """The orphans ``reclaim audit --json`` counted; -1 when it printed no report."""
    try:
        report = json.loads(audit_json)
    except ValueError:
        return -1  # no report: the audit could not run (its exit status says so)
    return int(report["totals"]["orphans"])


def stopped(worker: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM the worker; it must finish its batch and exit 0."""
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, log.read_text()[-3000:]


class HeadWatcher(threading.Thread):
    """Reads the stream's head every 50 ms and remembers each change; a head that moves back is the
    failure this test is for."""

    def __init__(self, controller: StreamController, stream: str = STREAM) -> None:
        super().__init__(daemon=True)
        self.controller, self.stream, self.seen, self.stop = controller, stream, [StreamCut()], threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            try:
                head = self.controller.head(self.stream)
            except ReclaimError:
                continue  # PostgreSQL is down: nothing to see
            if head != self.seen[-1]:
                self.seen.append(head)

    def offsets(self) -> list[int]:
        return [max(cut.as_dict().values(), default=0) for cut in self.seen]


def wait_lag(bootstrap: str, group: str, topics: list[str], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while (lag := estimated_inflight(bootstrap, group, topics)) > 0:
        assert time.monotonic() < deadline, f"group {group} still has {lag} records to read"
        time.sleep(0.5)


def dead_letters(stats_json: str) -> int:
    """The records ``reclaim dlq stats --json`` counted; -1 when it printed no report."""
    try:
        return int(json.loads(stats_json)["total"])
    except (ValueError, KeyError):
        return -1

