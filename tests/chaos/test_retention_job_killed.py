"""The retention job killed mid-stream: a real ``reclaim retention-job`` (Spark Structured Streaming,
checkpointed) decides consumption-based truncations while a subscriber reads a stream round after round;
the job is SIGKILLed between rounds and started again from its checkpoint, and the truncation applier is
SIGKILLed and restarted too. No truncation is lost (the head ends at the subscriber's last cut), none
is applied behind the head (it only moves forward), and every byte behind it is gone from tier-2."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reclaim.producers.subscribers import SubscriberClient, SubscriberReader
from reclaim.producers.topics import TopicNames
from reclaim.schemas.base import LONG_MAX
from reclaim.schemas.streams import LimitType, RetentionPolicy, RetentionType
from reclaim.services.controller import stream_controller
from reclaim.services.recorder import RetentionRecorder
from reclaim.settings import Settings
from tests.support.chaos import (
    RESULTS,
    ChaosResult,
    HeadWatcher,
    dead_letters,
    orphans_in,
    spawn_reclaim,
    stopped,
    wait_lag,
)
from tests.support.cli import run_reclaim

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

STREAM, SEGMENTS, EVENT, ROUNDS = "scope/orders", 2, 32, 10


def test_retention_job_and_applier_killed_mid_stream(
        spark: Any, kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], tmp_path: Path,
        unique_name: Callable[[str], str]) -> None:
    del spark  # the session's Spark is not used: the job runs in its own process; this fetches its jars first
    topics = kafka_topics(partitions=1)
    prefix = topics.deletion.removesuffix("ledger-deletion")
    env = {"RECLAIM_BOOTSTRAP": kafka_bootstrap, "RECLAIM_TOPIC_PREFIX": prefix,
           "RECLAIM_RETRY_DELAYS": ",".join(str(d) for d, _ in topics.retries), "RECLAIM_PARTITIONS": "1",
           "RECLAIM_STATE_DIR": str(tmp_path / "state"), "RECLAIM_FS_CREATE_ROOT": "true",
           "RECLAIM_GROUP_ID": unique_name("deletion"), "RECLAIM_TRUNCATION_GROUP_ID": unique_name("truncation"),
           "RECLAIM_POLL_TIMEOUT_S": "0.5", "RECLAIM_RECORD_EVERY_S": "0", "RECLAIM_TRIGGER_INTERVAL_S": "1",
           "RECLAIM_REEVALUATE_S": "1", "RECLAIM_RECORD_AUTH": "off"}  # crashes under test, not signatures
    settings = Settings.from_env(env)
    started, logs = time.monotonic(), {name: tmp_path / f"{name}.log" for name in ("job", "applier", "worker")}
    with stream_controller(settings, max_rolling_length=4 * EVENT) as (controller, publisher):
        scope, name = STREAM.split("/")
        controller.create_stream(scope, name, SEGMENTS)
        policy = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, LONG_MAX)
        controller.set_policy(STREAM, policy)
        client = SubscriberClient(publisher, topics)
        client.set_policy(STREAM, policy)
        reader = SubscriberReader(client, STREAM, "reader", 1)
        client.add_subscriber(STREAM, reader.subscriber, reader.generation)
        recorder = RetentionRecorder(controller, publisher, topics.stream_cuts, 0)
        procs = {name: spawn_reclaim(command, env, logs[name]) for name, command in
                 (("job", "retention-job"), ("applier", "truncation-applier"), ("worker", "worker"))}
        watcher = HeadWatcher(controller, STREAM)
        watcher.start()
        faults, cuts, written, binding = [], [], set(), controller.segments.binding
        try:
            for round_ in range(1, ROUNDS + 1):
                for segment in range(SEGMENTS):
                    controller.append(f"{STREAM}/{segment}.#epoch.0", bytes([round_]) * (8 * EVENT))
                tail = controller.tail_cut(STREAM)[0]
                time.sleep(0.002)  # recording times must differ
                recorder.tick(force=True)
                written |= set(binding.iter_names())
                # The reader reads to the tail each round but the last, whose data must stay.
                cuts.append(tail)
                reader.checkpoint(tail if round_ < ROUNDS else cuts[-2])
                if round_ in (3, 7):  # the job twice, once before its first truncation may have landed
                    procs["job"].kill()
                    procs["job"].wait(timeout=30)
                    faults.append(f"SIGKILL of the retention job after round {round_}")
                    procs["job"] = spawn_reclaim("retention-job", env, logs["job"])
                if round_ == 5:
                    procs["applier"].kill()
                    procs["applier"].wait(timeout=30)
                    faults.append("SIGKILL of the applier after round 5")
                    procs["applier"] = spawn_reclaim("truncation-applier", env, logs["applier"])
                time.sleep(1.5)
            deadline = time.monotonic() + 240
            while controller.head(STREAM) != cuts[-2]:
                for name, proc in procs.items():
                    assert proc.poll() is None, f"the {name} died: {logs[name].read_text()[-3000:]}"
                assert time.monotonic() < deadline, (f"no truncation to the reader's last cut {cuts[-2]}: head "
                                                     f"{controller.head(STREAM)}; job log:\n"
                                                     f"{logs['job'].read_text()[-3000:]}")
                time.sleep(0.5)
            wait_lag(kafka_bootstrap, env["RECLAIM_GROUP_ID"], list(topics.deletion_inputs))
            watcher.stop.set()
            watcher.join()
            offsets = watcher.offsets()
            assert offsets == sorted(offsets), f"the head moved back: {offsets}"
            final = cuts[-2].as_dict()
            live = {c.name for s in range(SEGMENTS) for c in controller.segments.store.list_chunks(
                f"{STREAM}/{s}.#epoch.0") if c.start_offset + c.length > final[s]}
            on_tier2 = set(binding.iter_names())
            audit = run_reclaim("audit", "--json", env={**os.environ, **env}, timeout=60)
            dead = run_reclaim("dlq", "stats", "--json", env={**os.environ, **env}, timeout=60)
            RESULTS.append(ChaosResult("retention job killed mid-stream", "; ".join(faults), len(written),
                                       deleted=len(written - on_tier2), dead_lettered=dead_letters(dead.stdout),
                                       orphans=orphans_in(audit.stdout), live_deleted=len(live - on_tier2),
                                       seconds=time.monotonic() - started))
            assert on_tier2 == live, f"left behind the head: {sorted(on_tier2 - live)[:5]}"
            assert audit.returncode == 0 and orphans_in(audit.stdout) == 0, audit.stdout + audit.stderr
            assert dead_letters(dead.stdout) == 0, dead.stdout + dead.stderr
        finally:
            watcher.stop.set()
            for name, proc in procs.items():
                stopped(proc, logs[name])
