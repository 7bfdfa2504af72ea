"""``reclaim retention-job`` refuses flag values Spark cannot use in one line and exit 64, before Spark starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reclaim.exits import ExitCode
from reclaim.services.retention_job import RetentionJobSettings
from tests.support.cli import run_reclaim
from tests.support.retention_job import NOBODY, job


@pytest.mark.parametrize("master", ["local", "local[4]", "local[*]", "local[4,2]", "local[*,3]", "spark://h:7077",
                                    "yarn", "k8s://https://h:443", "mesos://h:5050", "local-cluster[2,1,1024]"])
def test_every_spark_master_form_is_accepted(master: str) -> None:
    assert RetentionJobSettings.from_env(master=master).master == master  # type: ignore[attr-defined]


@pytest.mark.parametrize(("flags", "message"), [
    # A master Spark cannot parse failed once its JVM had started, in a Java traceback (exit 1).
    (["--master", "bogus"], "error: --master must be a Spark master URL"),
    (["--master", ""], "master must be a Spark master URL"),
    (["--master", "local[0]"], "master must be a Spark master URL"),
    # Below a millisecond the re-evaluation period became 0 ms, refused only after the broker was reached,
    # and a trigger interval Spark reads as "1e-09 seconds"; far above, a Java long of ms overflowed.
    (["--reevaluate-s", "0.0001"], "--reevaluate-s must be between 0.001 and 31622400 seconds, got 0.0001"),
    (["--reevaluate-s", "1e300"], "--reevaluate-s must be between 0.001 and 31622400 seconds, got 1e+300"),
    (["--trigger-interval-s", "1e-9"], "--trigger-interval-s must be between 0.001 and 31622400 seconds"),
    (["--trigger-interval-s", "nan"], "argument --trigger-interval-s: must be a duration above 0, got 'nan'"),
    (["--state-buckets", "0"], "trigger_interval_s, reevaluate_s and --state-buckets must be positive"),
    # Spark's CAST(... AS INT) of a bucket above 2**31 - 1 wrapped to a negative one, the undecodable rows' -1 among
    # them, and no longer matched reclaim.retention.buckets.bucket_of.
    (["--state-buckets", "4294967296"], "--state-buckets must be at most 2147483647, got 4294967296"),
])
def test_a_bad_job_flag_is_one_line_and_exit_64(tmp_path: Path, flags: list[str], message: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    result = run_reclaim("retention-job", "--bootstrap", NOBODY, *flags,
                         env={**env, "RECLAIM_STATE_DIR": str(tmp_path / "state"), "RECLAIM_RECORD_AUTH": "off"})
    assert result.returncode == ExitCode.USAGE, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("reclaim: error: ") and message in lines[0], result.stderr


def test_a_checkpoint_that_is_a_file_is_one_usage_line(tmp_path: Path) -> None:
    (tmp_path / "cp").write_text("not a directory")
    assert job(tmp_path, "--checkpoint", str(tmp_path / "cp")) == (
        ExitCode.USAGE, f"reclaim: error: checkpoint {tmp_path / 'cp'} is a file, not a directory")
    code, line = job(tmp_path, "--checkpoint", str(tmp_path / "cp" / "below"))
    assert code == ExitCode.UNAVAILABLE and line.startswith(f"reclaim: error: checkpoint {tmp_path / 'cp'}/below "
                                                            "cannot be used")
