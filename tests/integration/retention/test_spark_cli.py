"""``reclaim retention-job``: its flags and settings, and the real process with metrics and a clean SIGTERM."""

from __future__ import annotations

import argparse
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

from reclaim.cli.main import build_parser, settings_from
from reclaim.localstack.procs import free_port
from reclaim.producers.topics import TopicNames
from reclaim.schemas import TruncationEvent, build_codec
from reclaim.services.retention_job import RetentionJobSettings, job_config
from tests.support.cli import run_reclaim
from tests.support.kafka_io import consume_from_start
from tests.support.spark_job import CONSUMPTION, at, consumed, produce_records, recorded, stream_with

JOB_FLAGS = ("--checkpoint", "--master", "--trigger-interval-s", "--reevaluate-s", "--state-buckets", "--once",
             "--metrics-port",
             "--metrics-addr", "--bootstrap", "--topic-prefix", "--state-dir", "--cache-dir")


def job_parser() -> argparse.ArgumentParser:
    subcommands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = subcommands.choices["retention-job"]
    return parser


def test_help_describes_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    described = {flag: action.help for action in job_parser()._actions for flag in action.option_strings}
    assert all(described.get(flag) for flag in JOB_FLAGS), described
    with pytest.raises(SystemExit):
        build_parser().parse_args(["retention-job", "--help"])
    shown = capsys.readouterr().out
    assert all(flag in shown for flag in JOB_FLAGS)


def test_flags_win_over_the_environment_and_the_checkpoint_defaults_under_the_state_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.setenv("RECLAIM_REEVALUATE_S", "12")
    monkeypatch.setenv("RECLAIM_MASTER", "local[3]")
    args = build_parser().parse_args(["retention-job", "--master", "spark://spark:7077", "--trigger-interval-s", "2",
                                      "--state-dir", str(tmp_path), "--bootstrap", "kafka:9092",
                                      "--topic-prefix", "prod."])
    settings = RetentionJobSettings.of(settings_from(args), args)

    assert (settings.master, settings.trigger_interval_s, settings.reevaluate_s) == ("spark://spark:7077", 2.0, 12.0)
    assert settings.checkpoint_location == str(tmp_path / "retention-checkpoint")
    config = job_config(settings, once=True)
    assert (config.bootstrap, config.reevaluate_ms, config.once) == ("kafka:9092", 12_000, True)
    assert config.topics.inputs[0] == "prod.stream-topology" and config.topics.rejects == "prod.retention-rejects"


def test_a_non_positive_reevaluation_period_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECLAIM_REEVALUATE_S", "0")
    args = build_parser().parse_args(["retention-job"])
    with pytest.raises(ValueError, match="RECLAIM_REEVALUATE_S"):
        RetentionJobSettings.of(settings_from(args), args)


#: What Spark's JVM, Ivy and py4j print: none of it reaches a command's terminal.
JVM_OUTPUT = re.compile(r"^(:: |Ivy Default Cache|\tfound |\tconfs: |\s+\||\S+ \S+ WARN |WARN |Using Spark's default)"
                        r"|org\.apache\.|py4j|Received command|Logging error|SLF4J", re.MULTILINE)


def spark_log_named(result: subprocess.CompletedProcess[str]) -> Path:
    """The Spark log file a retention-job run named on stderr, after checking that its terminal shows none of
    Spark's, Ivy's or py4j's output and that the file holds it."""
    for stream in (result.stdout, result.stderr):
        assert JVM_OUTPUT.search(stream) is None, stream
    named = [line for line in result.stderr.splitlines() if line.startswith("reclaim: Spark's log: ")]
    assert len(named) == 1, result.stderr
    log_file = Path(named[0].removeprefix("reclaim: Spark's log: "))
    assert ":: loading settings ::" in log_file.read_text(), "Ivy's output is in the file"
    return log_file


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def wait_for_metric(port: int, line: str, proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, "the retention job exited"
        try:
            metrics = scrape(port)
        except OSError:
            metrics = ""
        if line in metrics:
            return metrics
        assert time.monotonic() < deadline, f"{line!r} not served in {timeout_s}s:\n{metrics}"
        time.sleep(0.5)


@pytest.mark.integration
@pytest.mark.spark
def test_the_job_process_serves_metrics_emits_the_truncation_and_stops_cleanly_on_sigterm(
    kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], tmp_path: Path,
) -> None:
    names = kafka_topics()
    produce_records(kafka_bootstrap, names,
                    [*stream_with(CONSUMPTION, "billing"), consumed("billing", at(70, 80)), recorded(at(90, 90))])
    port, log_path = free_port(), tmp_path / "job.log"
    unsigned = {**os.environ, "RECLAIM_RECORD_AUTH": "off"}  # the process under test, not signatures
    command = [sys.executable, "-m", "reclaim", "retention-job", "--bootstrap", kafka_bootstrap,
               "--topic-prefix", names.truncation.removesuffix("truncation"), "--checkpoint", str(tmp_path / "cp"),
               "--master", "local[2]", "--trigger-interval-s", "1", "--reevaluate-s", "1",
               "--state-dir", str(tmp_path / "state"), "--metrics-port", str(port)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=unsigned)
    try:
        metrics = wait_for_metric(port, "reclaim_retention_truncations_emitted_total 1.0", proc, 180)
        assert "reclaim_retention_input_rows_total 6.0" in metrics  # five inputs and the start's wake-up
        assert "reclaim_retention_batch_duration_seconds_count" in metrics
        (message,) = consume_from_start(kafka_bootstrap, [names.truncation], "spark-cli-check-1", 1)
        assert build_codec().decode(message.value() or b"", names.truncation, TruncationEvent).cut == at(70, 80)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    output = log_path.read_text(errors="replace")
    assert code == 0, output[-3000:]
    assert "retention batch 0: input_rows=6 streams_decided=1 events=1 rejects=0" in output
    assert "retention job stopped after" in output
    assert JVM_OUTPUT.search(output) is None, output[-3000:]  # Spark's output is in its own file

    # --once from the same checkpoint: only the new cut is read, then the process exits.
    produce_records(kafka_bootstrap, names, [consumed("billing", at(90, 90))])
    once = run_reclaim(*command[3:-2], "--once", "-q", env=unsigned, timeout=300, check=True)
    # The run's summary is its output, on stdout, -q or not: the new cut and a wake-up, decided in one event.
    assert "input_rows=2 streams_decided=1 events=1 rejects=0" in once.stdout
    assert "1 event(s), 0 reject(s)" in once.stdout.splitlines()[-1]
    log_file = spark_log_named(once)
    assert log_file.parent == tmp_path / "state" / "logs"
    # Its stderr: the file's name, and reclaim's own warnings (record authentication is off here).
    assert all(line.startswith("reclaim: Spark's log: ") or " WARNING reclaim." in line
               for line in once.stderr.splitlines()), once.stderr
    cuts = [build_codec().decode(m.value() or b"", names.truncation, TruncationEvent).cut
            for m in consume_from_start(kafka_bootstrap, [names.truncation], "spark-cli-check-2", 2)]
    assert cuts == [at(70, 80), at(90, 90)]
