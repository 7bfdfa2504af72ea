"""A checkpoint keeps the state bucket count it was made with; the same count goes on to the broker check,
a network wait on a broker that never answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from reclaim.exits import ExitCode, UsageError
from reclaim.services.retention_job import BUCKETS_FILE, pin_checkpoint
from tests.support.retention_job import job


def test_a_checkpoint_keeps_the_state_bucket_count_it_was_made_with(tmp_path: Path) -> None:
    # Another count moved streams to buckets without their state while the old buckets still decided on it.
    checkpoint = tmp_path / "cp"
    pin_checkpoint(str(checkpoint), 64)
    assert (checkpoint / BUCKETS_FILE).read_text() == "64\n"
    pin_checkpoint(f"file://{checkpoint}", 64)
    code, line = job(tmp_path, "--checkpoint", str(checkpoint), "--state-buckets", "8")
    assert (code, line) == (ExitCode.USAGE, f"reclaim: error: state_buckets 8 differs from the 64 the checkpoint "
                                            f"{checkpoint} was made with: keep 64, or start from a new checkpoint")
    with pytest.raises(UsageError, match="state_buckets 8 differs"):
        pin_checkpoint(f"file://{checkpoint}", 8)
    # The same count goes on to the broker check; a checkpoint made before the file existed is left unchecked.
    assert job(tmp_path, "--checkpoint", str(checkpoint))[1].startswith("reclaim: error: cannot reach a Kafka broker")
    older = tmp_path / "older"
    (older / "offsets").mkdir(parents=True)
    pin_checkpoint(str(older), 8)
    assert not (older / BUCKETS_FILE).exists()
    pin_checkpoint("hdfs://namenode/cp", 8)  # not local: Spark's to judge
