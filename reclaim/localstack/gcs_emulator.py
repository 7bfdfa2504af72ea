"""fake-gcs-server on loopback: a GCS emulator speaking the JSON API, built from its Go module
(:data:`FAKE_GCS`), for ``reclaim local up --tier2 gcs`` and for the GCS binding's tests with Google's own client.

What version 1.56.1 does differently from GCS, and how the tests deal with it:

- GCS answers a batch request part by part; fake-gcs-server answers the client's batch (whose parts end lines
  with LF alone) with no part. The binding then deletes one object per request (in parallel), as it would on
  any endpoint answering so, and its tests check that path's outcomes.
- GCS refuses a DELETE with a stale ``ifGenerationMatch`` (412); fake-gcs-server ignores the condition. The
  binding also names the ``generation``, which it honours (404 for a generation that is gone).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from reclaim.localstack import gotool
from reclaim.localstack.procs import StackError, free_port, spawn, stop_pid, wait_until
from reclaim.storage.gcs import GcsSettings

#: The Google Cloud Storage emulator, built with ``go install`` into the cache on first use.
FAKE_GCS = gotool.GoTool("fake-gcs-server", "github.com/fsouza/fake-gcs-server", "v1.56.1")


@dataclass(frozen=True)
class GcsEndpoint:
    """Where the emulator answers."""

    url: str

    def binding_settings(self, bucket: str, key_prefix: str = "") -> GcsSettings:
        return GcsSettings(bucket=bucket, endpoint=self.url, project="reclaim-test", key_prefix=key_prefix)


def answers(url: str) -> bool:
    """True when a fake-gcs-server at ``url`` lists its buckets within a second."""
    try:
        with urllib.request.urlopen(url + "/storage/v1/b", timeout=1) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def start_fake_gcs(work: Path, cache_dir: Path, timeout: float = 60.0, port: int | None = None,
                   host: str = "127.0.0.1") -> tuple[int, GcsEndpoint]:
    """Start fake-gcs-server on ``host``:``port`` (a free port when None) storing its objects under ``work``;
    return its pid and endpoint. Built first when the cache does not hold it (a minute, once).

    Raises :class:`~reclaim.localstack.procs.StackError` when it cannot be built or does not get ready.
    """
    binary = gotool.build(FAKE_GCS, cache_dir).path
    port = port or free_port(host)
    url = f"http://{host}:{port}"
    log = work / "fake-gcs.log"
    proc = spawn([str(binary), "-scheme", "http", "-host", host, "-port", str(port), "-backend", "filesystem",
                  "-filesystem-root", str(work / "data"), "-public-host", f"{host}:{port}", "-external-url", url,
                  "-log-level", "warn"], log)
    try:
        wait_until(lambda: answers(url), timeout, "fake-gcs-server", proc, log)
    except StackError:
        stop_pid(proc.pid)
        raise
    return proc.pid, GcsEndpoint(url)


def ensure_bucket(endpoint: GcsEndpoint, bucket: str) -> None:
    """Create ``bucket`` on the emulator unless it is there."""
    from google.api_core.exceptions import Conflict

    from reclaim.storage.gcs import GcsChunkStorage

    binding = GcsChunkStorage(endpoint.binding_settings(bucket))
    try:
        binding.client.create_bucket(bucket)
    except Conflict:
        pass
    finally:
        binding.close()
