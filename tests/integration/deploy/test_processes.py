"""What ``reclaim truncation-applier --metrics-port`` serves: every outcome from 0, snake values, no ``_created``;
its lag, delays and polls on its topic."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reclaim.localstack.procs import free_port
from tests.support.cli import run_reclaim
from tests.support.prometheus import wait_for

pytestmark = [pytest.mark.integration]


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return None


def test_the_truncation_applier_serves_its_outcomes(kafka_bootstrap: str, tmp_path: Path,
                                                    unique_name: Callable[[str], str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    prefix = unique_name("t") + "."
    env.update(RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_STATE_DIR=str(tmp_path / "state"),
               RECLAIM_TOPIC_PREFIX=prefix, RECLAIM_PARTITIONS="1", RECLAIM_RECORD_AUTH="off")
    run_reclaim("topics", "create", env=env, check=True)
    port, log = free_port(), tmp_path / "applier.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "reclaim", "truncation-applier", "--record-every-s", "0",
                                 "--metrics-port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        def served() -> str | None:
            assert proc.poll() is None, log.read_text()
            text = scrape(port)  # served before the applier starts: its own series come with it
            return text if text and "reclaim_truncation_applier_last_poll_timestamp_seconds{" in text else None

        text = wait_for(served, "the applier's metrics endpoint with its poll time")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    outcomes = {s.labels["outcome"]: s.value for family in text_string_to_metric_families(text)
                for s in family.samples if s.name == "reclaim_truncations_total"}
    assert outcomes == {"truncated": 0.0, "no_op": 0.0, "unknown_stream": 0.0, "invalid": 0.0, "retry": 0.0,
                        "unauthenticated": 0.0}
    assert re.search(r"^reclaim_\w+_created", text, re.MULTILINE) is None
    topic = {"topic": f"{prefix}truncation"}
    own = {(s.name, tuple(s.labels.items())): s.value for family in text_string_to_metric_families(text)
           for s in family.samples if s.name.startswith("reclaim_truncation_")}
    assert own[("reclaim_truncation_consumer_lag", tuple(topic.items()))] == 0
    assert own[("reclaim_truncation_apply_delay_seconds_count", tuple(topic.items()))] == 0
    assert time.time() - 60 < own[("reclaim_truncation_applier_last_poll_timestamp_seconds", tuple(topic.items()))]
