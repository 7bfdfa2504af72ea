"""Truncation under fire: a real ``reclaim truncation-applier`` applies a stream of truncation events (with
the duplicates and stale cuts of an at-least-once sink) while a real ``reclaim worker`` deletes what each
truncation marked, both on PostgreSQL. The applier is SIGKILLed mid-stream and restarted, and PostgreSQL
is SIGKILLed while the applier marks and restarted. No truncation is lost (the head ends at the last cut),
none is applied behind the head (a watcher sees the head only move forward), every byte behind the head
is gone from tier-2 and every byte after it is readable; the audit is clean."""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.producers.topics import TopicNames
from reclaim.schemas import build_codec
from reclaim.schemas.codec import RecordCodec
from reclaim.schemas.streams import RetentionPolicy, RetentionType, StreamCut, TruncationEvent, TruncationReason
from reclaim.services.controller import stream_controller
from reclaim.settings import Settings
from tests.support.chaos import (
    RESULTS,
    STREAM,
    ChaosResult,
    HeadWatcher,
    RestartablePostgres,
    dead_letters,
    orphans_in,
    spawn_reclaim,
    stopped,
    wait_lag,
)
from tests.support.cli import run_reclaim
from tests.support.kafka_io import Outgoing, produce_confirmed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEGMENTS, APPENDS, RECORD = 4, 100, 32  # chunks roll at RECORD bytes: 100 chunks a segment
CUTS, STEP = 40, 72  # the i-th cut is at i × 72 bytes in every segment: about 9 chunks each


def cut_at(step: int) -> StreamCut:
    return StreamCut.from_mapping({segment: step * STEP for segment in range(SEGMENTS)})


def test_applier_and_postgres_killed_while_truncations_stream_in(
        own_postgres: RestartablePostgres, kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames],
        tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    topics = kafka_topics(partitions=2)
    prefix = topics.deletion.removesuffix("ledger-deletion")
    env = {"RECLAIM_BOOTSTRAP": kafka_bootstrap, "RECLAIM_TOPIC_PREFIX": prefix,
           "RECLAIM_RETRY_DELAYS": ",".join(str(d) for d, _ in topics.retries),
           "RECLAIM_METADATA_URL": own_postgres.url(), "RECLAIM_STATE_DIR": str(tmp_path / "state"),
           "RECLAIM_FS_ROOT": str(tmp_path / "tier2"), "RECLAIM_FS_CREATE_ROOT": "true",
           "RECLAIM_GROUP_ID": unique_name("deletion"), "RECLAIM_TRUNCATION_GROUP_ID": unique_name("truncation"),
           "RECLAIM_POLL_TIMEOUT_S": "0.5", "RECLAIM_RECORD_EVERY_S": "0", "RECLAIM_BATCH_SIZE": "20",
           "RECLAIM_RECORD_AUTH": "off"}  # crashes under test, not signatures: turned off explicitly
    settings = Settings.from_env(env)
    started = time.monotonic()
    with stream_controller(settings, max_rolling_length=RECORD) as (controller, _):
        controller.create_stream("scope", "orders", SEGMENTS)
        controller.set_policy(STREAM, RetentionPolicy(RetentionType.CONSUMPTION))  # what the events below decide
        for segment in range(SEGMENTS):
            for i in range(APPENDS):
                controller.append(f"{STREAM}/{segment}.#epoch.0", bytes([i]) * RECORD)
        chunks = [chunk for segment in range(SEGMENTS)
                  for chunk in controller.segments.store.list_chunks(f"{STREAM}/{segment}.#epoch.0")]
        watcher = HeadWatcher(controller)
        applier_log, worker_log = tmp_path / "applier.log", tmp_path / "worker.log"
        applier = spawn_reclaim("truncation-applier", env, applier_log)
        worker = spawn_reclaim("worker", env, worker_log)
        watcher.start()
        rng, codec, faults = random.Random(20261123), build_codec(), []
        try:
            for step in range(1, CUTS + 1):
                events = [step] + ([rng.randint(1, step)] if rng.random() < 0.3 else [])  # duplicates, stale cuts
                produce_confirmed(kafka_bootstrap, [Outgoing(topics.truncation, event(codec, s), STREAM.encode())
                                                    for s in events])
                if step == CUTS // 4:
                    wait_for_head(watcher, step // 2, applier, applier_log)
                    applier.kill()
                    applier.wait(timeout=30)
                    faults.append("SIGKILL of the applier")
                    applier = spawn_reclaim("truncation-applier", env, applier_log)
                if step == CUTS // 2:
                    wait_for_head(watcher, step // 2, applier, applier_log)
                    own_postgres.kill()
                    time.sleep(3)
                    own_postgres.restart()
                    faults.append("SIGKILL of PostgreSQL while truncations stream in, 3 s, restart")
                time.sleep(0.2)
            wait_for_head(watcher, CUTS, applier, applier_log, timeout_s=120)
            wait_lag(kafka_bootstrap, env["RECLAIM_TRUNCATION_GROUP_ID"], [topics.truncation])
            wait_lag(kafka_bootstrap, env["RECLAIM_GROUP_ID"], list(topics.deletion_inputs))
            watcher.stop.set()
            watcher.join()
            offsets = watcher.offsets()
            assert offsets == sorted(offsets), f"the head moved back: {offsets}"
            assert controller.head(STREAM) == cut_at(CUTS), "a truncation was lost"
            for segment in range(SEGMENTS):
                name = f"{STREAM}/{segment}.#epoch.0"
                kept = b"".join(bytes([i]) * RECORD for i in range(APPENDS))[CUTS * STEP:]
                assert controller.read_all(name) == kept
            on_tier2 = set(controller.segments.binding.iter_names())
            behind = [c for c in chunks if c.start_offset + c.length <= CUTS * STEP]
            ahead = [c for c in chunks if c not in behind]
            audit = run_reclaim("audit", "--json", env={**os.environ, **env}, timeout=60)
            dead = run_reclaim("dlq", "stats", "--json", env={**os.environ, **env}, timeout=60)
            RESULTS.append(ChaosResult(
                "truncations under fire (applier + PostgreSQL)", "; ".join(faults), len(chunks),
                deleted=sum(c.name not in on_tier2 for c in behind), dead_lettered=dead_letters(dead.stdout),
                orphans=orphans_in(audit.stdout), live_deleted=sum(c.name not in on_tier2 for c in ahead),
                seconds=time.monotonic() - started))
            expected = {c.name for c in ahead}
            assert on_tier2 == expected, (f"left behind the head: {sorted(on_tier2 - expected)[:5]}; "
                                          f"live chunks deleted: {sorted(expected - on_tier2)[:5]}")
            assert audit.returncode == 0 and orphans_in(audit.stdout) == 0, audit.stdout + audit.stderr
            assert dead.returncode == 0 and dead_letters(dead.stdout) == 0, dead.stdout + dead.stderr
            assert applier.poll() is None and worker.poll() is None
        finally:
            watcher.stop.set()
            stopped(applier, applier_log)
            stopped(worker, worker_log)


def event(codec: RecordCodec, step: int) -> bytes:
    """The retention job's event for the ``step``-th cut, as its Kafka sink writes it."""
    truncation = TruncationEvent(STREAM, cut_at(step), TruncationReason.CONSUMPTION, int(time.time() * 1000),
                                 RetentionPolicy(RetentionType.CONSUMPTION))
    return codec.encode(truncation, "truncation")


def wait_for_head(watcher: HeadWatcher, step: int, applier: subprocess.Popen[bytes], log: Path,
                  timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while watcher.offsets()[-1] < step * STEP:
        assert time.monotonic() < deadline and applier.poll() is None, log.read_text()[-3000:]
        time.sleep(0.05)


