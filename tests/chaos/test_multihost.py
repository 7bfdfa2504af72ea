"""reclaim across four hosts on one machine (network namespaces on a bridge): the broker on one, PostgreSQL and
MinIO on another, a ``reclaim worker`` on each of two more. Worker-a's link is cut while both drain 20,000
chunks marked while both are in the group: its session times out, worker-b takes its partitions and ends the
drain while a is still cut; then a's link comes back and a rejoins. Every marked chunk is gone, no live one is
touched, nothing is dead-lettered or concluded in error, the group's lag is 0 and ``reclaim audit`` is clean;
what worker-b took over that a had deleted is found already gone, and a delete is counted twice only for the
batches a held in flight when it was cut off."""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devtools.multihost import MultiHostStack, group_members, object_count, wait_members, write_chunks
from reclaim.consumers.pipeline import MAX_IN_FLIGHT
from reclaim.deletion.metrics import snake
from reclaim.deletion.outcomes import Outcome
from reclaim.localstack.procs import stop_pid
from reclaim.localstack.s3_server import ensure_bucket
from reclaim.producers.topics import TopicNames
from reclaim.settings import Settings
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from reclaim.tools.topics import admin_client, create_topics, topic_specs
from tests.support.chaos import Backlog, stopped
from tests.support.pipeline import Pipeline, inflight
from tests.support.servers import server_unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

log = logging.getLogger(__name__)

WORKERS = ("worker-a", "worker-b")
PARTITIONS = 6
SEGMENTS, PER_SEGMENT, LIVE = 20, 1000, 30
RETRY_DELAYS = (1, 2, 4)
#: Every partition a worker of the group reads: the deletion topic's and each retry tier's.
GROUP_PARTITIONS = PARTITIONS * (1 + len(RETRY_DELAYS))
#: The most records one worker has polled and not concluded: the batch it checks and those in flight.
IN_FLIGHT_LIMIT = (MAX_IN_FLIGHT + 1) * Settings().batch_size
#: Outcomes no record of this drain may have: a duplicate or a cut taken for a chunk in use, someone
#: else's, invalid, or worth the DLQ. (Retryable errors may happen while worker-a is cut off.)
ERROR_OUTCOMES = {snake(o.value) for o in (Outcome.IN_USE, Outcome.OWNERSHIP_MISMATCH, Outcome.INVALID, Outcome.FATAL,
                                           Outcome.UNDECODABLE)}
#: The workers' session timeout (reclaim's consumer default) and how long a rebalance may take past it.
SESSION_TIMEOUT_S, REBALANCE_S = 10, 30
#: How long a worker whose link comes back may take to rejoin: its connections wait for TCP's next
#: retransmission and librdkafka's reconnect backoff first.
REJOIN_S = 90


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[MultiHostStack]:
    try:
        stack = MultiHostStack(tmp_path / "servers", Settings.from_env().cache_dir, WORKERS)
    except Exception as exc:  # noqa: BLE001 - any failure to start is reported the same way
        server_unavailable("hosts on one machine (network namespaces with Kafka, PostgreSQL and MinIO)", exc)
        raise AssertionError("unreachable") from exc
    yield stack
    stack.close()


def _outcomes(stack: MultiHostStack, host: str) -> dict[str, float]:
    samples = stack.metrics(host)
    return {key.split('"')[1]: value for key, value in samples.items()
            if key.startswith("reclaim_deletion_outcomes_total{")}


def _settled(stack: MultiHostStack, names: list[str], quiet_s: float = 10.0,
             timeout_s: float = 120.0) -> dict[str, dict[str, float]]:
    """The outcome counters of the workers ``names`` once none has moved for ``quiet_s``: a batch a cut-off
    worker had in flight ends only when TCP gets its requests and answers through, after the link is back
    (at TCP's next retransmission, seconds later)."""
    last: dict[str, dict[str, float]] = {}
    quiet_since = deadline = time.monotonic()
    deadline += timeout_s
    while time.monotonic() < deadline:
        now = {name: _outcomes(stack, name) for name in names}
        if now != last or not all(now.values()):
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return now
        time.sleep(0.5)
    raise AssertionError(f"the workers' counters still move after {timeout_s:.0f}s: {last}")


def _until(check: Callable[[], bool], timeout_s: float, what: str, logs: Callable[[], str]) -> float:
    """Poll ``check`` until true; the seconds it took. Fails naming ``what``, with the workers' logs."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, f"{what} not within {timeout_s:.0f}s:\n{logs()}"
        time.sleep(0.25)
    return time.monotonic() - started


def test_worker_host_cut_mid_drain_hands_its_partitions_to_the_other(
        stack: MultiHostStack, tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    prefix, bucket, group = unique_name("t") + ".", unique_name("multihost"), unique_name("group")
    admin = admin_client(stack.bootstrap)
    create_topics(admin, topic_specs(Settings(topic_prefix=prefix, retry_delays=RETRY_DELAYS, partitions=PARTITIONS)))
    ensure_bucket(stack.endpoint, bucket)
    s3 = S3ChunkStorage(stack.endpoint.binding_settings(bucket), name="s3-tier2")
    fs_root = tmp_path / "tier2"
    pipe = Pipeline(stack.bootstrap, TopicNames.for_prefix(prefix, RETRY_DELAYS),
                    open_metadata_store(stack.metadata_url),
                    StorageBindings([FileSystemChunkStorage(fs_root, name="fs-tier2", create=True), s3]), group)
    a, b = (stack.host(name) for name in WORKERS)
    workers: dict[str, subprocess.Popen[bytes]] = {}

    def logs() -> str:
        return "\n".join(f"--- {name}:\n{(tmp_path / name / 'worker.log').read_text(errors='replace')[-2500:]}"
                         for name in workers)

    try:
        started = time.monotonic()
        live = write_chunks(pipe.store, s3, "scope/stream/0.#epoch.0", LIVE)
        segments = [write_chunks(pipe.store, s3, f"scope/stream/{i + 1}.#epoch.0", PER_SEGMENT)
                    for i in range(SEGMENTS)]
        written = time.monotonic() - started
        doomed: list[ChunkRecord] = [chunk for segment in segments for chunk in segment]
        backlog = Backlog(pipe, s3, live, doomed)
        env = {**stack.reclaim_env(bucket), "RECLAIM_TOPIC_PREFIX": prefix, "RECLAIM_GROUP_ID": group,
               "RECLAIM_RETRY_DELAYS": ",".join(map(str, RETRY_DELAYS)), "RECLAIM_POLL_TIMEOUT_S": "0.5"}
        for name in WORKERS:
            workers[name] = stack.spawn_worker(name, env, tmp_path / name)
        wait_members(admin, group, [a, b])
        # The chunks are marked once both workers hold partitions, while they drain: one worker that is
        # alone in the group for the seconds until the other joins drains 20,000 marked chunks by itself.
        failed: list[object] = []

        def mark() -> None:
            try:
                failed.extend(result for segment in segments if (result := pipe.service.mark(segment)).failed)
            except Exception as exc:  # noqa: BLE001 - reported by the main thread's assertion
                failed.append(exc)

        marking = drain_started = time.monotonic()
        marker = threading.Thread(target=mark, name="marker")
        marker.start()

        # As soon as both workers delete, worker-a's cable is pulled: most of its partitions' records
        # are still to be read.
        _until(lambda: all(_outcomes(stack, name).get("deleted", 0) > 0 for name in WORKERS), 120,
               "both workers deleting", logs)
        before_cut = {name: _outcomes(stack, name) for name in WORKERS}
        stack.net.cut(a.name)
        cut_at = time.monotonic()
        takeover = _until(lambda: group_members(admin, group) == {b.address: GROUP_PARTITIONS},
                          SESSION_TIMEOUT_S + REBALANCE_S, "worker-b holding every partition", logs)
        left_at_takeover = object_count(stack.endpoint, bucket) - LIVE
        marker.join()
        marked = time.monotonic()
        assert not failed, f"marking failed: {failed}"
        assert left_at_takeover > 0, f"the drain ended before worker-b took worker-a's partitions over:\n{logs()}"
        _until(lambda: object_count(stack.endpoint, bucket) == LIVE and inflight(pipe) == 0, 240,
               "the drain ended by worker-b alone", logs)
        drained = time.monotonic() - drain_started
        assert workers[a.name].poll() is None, f"worker-a died while cut off:\n{logs()}"

        stack.net.restore(a.name)
        restored_at = time.monotonic()
        rejoined = _until(lambda: workers[a.name].poll() is not None
                          or set(group_members(admin, group)) == {a.address, b.address},
                          REJOIN_S, "worker-a rejoining or exiting", logs)
        exited = workers[a.name].poll()
        assert exited in (None, 0), f"worker-a exited with {exited} after its link came back:\n{logs()}"
        # A worker that exited took its counters with it: what it had done before the cut is what is known.
        after = {**before_cut, **_settled(stack, [name for name in WORKERS if workers[name].poll() is None])}
        backlog.assert_clean("worker host cut mid-drain (4 hosts)",
                             f"worker-a's link down {restored_at - cut_at:.0f} s of a 2-host drain", fs_root,
                             workers[b.name], tmp_path / b.name / "worker.log", env=stack.endpoint.reclaim_env(bucket))
        concluded = sum(o.get("deleted", 0) + o.get("already_gone", 0) for o in after.values())
        deleted = {name: outcomes.get("deleted", 0) for name, outcomes in after.items()}
        twice = max(0, int(sum(deleted.values())) - len(doomed))
        log.info("%d marked chunks written in %.0f s, marked in %.0f s, drained through the cut in %.0f s from the "
                 "workers' start; worker-b held every partition %.1f s after the cut, %d chunks left; worker-a %s "
                 "%.1f s after its link came back; deletes counted twice: %d; outcomes before the cut %s, at the end "
                 "%s", len(doomed), written, marked - marking, drained, takeover, left_at_takeover,
                 "exited 0" if exited == 0 else "rejoined", rejoined, twice, before_cut, after)
        errors = {name: {k: v for k, v in outcomes.items() if k in ERROR_OUTCOMES and v}
                  for name, outcomes in after.items()}
        assert not any(errors.values()), f"duplicates or the cut ended in errors: {errors}"
        assert concluded >= len(doomed), f"only {concluded} records concluded deleted or already gone: {after}"
        # worker-b found what worker-a had deleted before the cut already gone, never deleting it again ...
        assert deleted[b.name] + before_cut[a.name]["deleted"] <= len(doomed), (before_cut, after)
        # ... and a delete is counted twice only for what worker-a held in flight when its link went
        # down: batches it ends once the link is back, after worker-b has deleted their chunks (S3 says
        # nothing of a key that is already gone; only a listing tells, and these records were worker-a's
        # own, read for the first time).
        assert twice <= IN_FLIGHT_LIMIT, f"{twice} deletes counted twice: {after}"
        assert before_cut[b.name]["deleted"] > 0 and deleted[b.name] > before_cut[b.name]["deleted"]
        for name, worker in workers.items():
            if worker.poll() is None:
                stopped(worker, tmp_path / name / "worker.log")
    finally:
        for worker in workers.values():
            stop_pid(worker.pid)
        pipe.close()
