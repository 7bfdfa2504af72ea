"""The retention job follows its keyring (without Spark): the executors' keys travel inside the query, so when the
file changes the driver stops the query and starts it again, from its checkpoint, with the new keys."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from reclaim.retention.spark_job import RetentionJobConfig
from reclaim.retention.spark_metrics import BatchSummary
from reclaim.security.keyring import Algorithm, Keyring, KeyStatus, new_key, parse_keyring
from reclaim.security.live import KeyringFile
from reclaim.services.retention_job import KeyWatch, _supervise
from reclaim.settings import Settings

JOB = new_key("job-1", "retention-job", Algorithm.ED25519)
ADMIN = new_key("admin-1", "admin", Algorithm.ED25519)


def _write(path: Path, keyring: Keyring) -> None:
    temporary = path.with_suffix(".new")
    temporary.write_text(keyring.to_toml())
    os.replace(temporary, path)


@dataclass
class FakeQuery:
    isActive: bool = True  # noqa: N815 - the name Spark's StreamingQuery gives it

    def exception(self) -> None:
        return None


@dataclass
class FakeJob:
    config: RetentionJobConfig
    query: FakeQuery = field(default_factory=FakeQuery)
    stopped: bool = False

    def stop(self) -> list[BatchSummary]:
        self.stopped = True
        return []


def test_a_key_retired_in_the_file_restarts_the_query_with_keys_that_refuse_it(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    _write(path, Keyring([JOB, ADMIN]))
    settings = Settings(keyring=path)
    watch = KeyWatch(settings, KeyringFile(path, check_every_s=0.0))
    config = RetentionJobConfig("127.0.0.1:9", topics=None, checkpoint=str(tmp_path / "cp"),  # type: ignore[arg-type]
                                keys=None)
    started: list[FakeJob] = []
    stop = threading.Event()

    def start(keyed: RetentionJobConfig) -> FakeJob:
        started.append(FakeJob(keyed))
        if len(started) == 1:  # while the first query runs, the admin's key is retired
            _write(path, Keyring([JOB, replace(ADMIN, status=KeyStatus.RETIRED)]))
        else:
            stop.set()
        return started[-1]

    assert _supervise(start, config, stop, watch) == 0  # type: ignore[arg-type]
    assert len(started) == 2 and all(job.stopped for job in started)
    keys = started[1].config.keys
    assert keys is not None
    shipped = parse_keyring(keys.keyring_toml)
    assert shipped.get("admin-1").status is KeyStatus.RETIRED  # type: ignore[union-attr]
    assert shipped.get("admin-1").private is None  # type: ignore[union-attr]  (public halves only, as before)
