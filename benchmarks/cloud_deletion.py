"""Deletion throughput on the GCS and Azure tier-2 bindings, each on its emulator: the pipeline against raw deletes.

For each binding (``--parts gcs,azure``) and each size (``--objects``), in interleaved rounds (pipeline,
raw, pipeline, raw, ...), on the emulator this benchmark starts (fake-gcs-server, Azurite):

  - pipeline: phase 1 publishes the pending deletes and commits its metadata transaction (printed on its
    own); then a phase-2 worker, in this process, deletes the objects through the binding and commits its
    offsets. Timer: records produced -> last object gone and offsets committed, as in the S3 part of
    ``benchmarks/deletion_throughput.py`` (whose ``pipeline`` this is). The process's CPU time during the
    drain (the worker's threads and the binding's; the emulator and the broker are other processes) is
    printed per record;
  - raw: the same number of objects, created the same way (through the binding, with their tags) in a
    bucket or container of their own, deleted with the binding's own client and no pipeline:

    - Azure: ``ContainerClient.delete_blobs`` with 256 blobs a request (a blob batch; Azurite takes them);
    - GCS: the client's batch (``client.batch()``, 100 deletes a request) where the endpoint answers it part
      by part. fake-gcs-server 1.56.1 answers it with no parts (``devtools/gcs_server.py``): the binding
      then deletes one object per request from 16 threads, and the raw baseline is the fastest the client
      does there, ``bucket.delete_blob`` per object from a pool of 16 threads. A probe at the start finds
      which, and the run prints and records it.

The ratio printed is the median of the rounds' raw seconds / pipeline seconds (the pipeline's throughput
over raw's); the goal is >= 0.8x on each binding.

Run: ``.venv/bin/python -m benchmarks.cloud_deletion [--objects 5000,20000] [--rounds 3] [--parts gcs,azure]
[--quick]``. It starts fake-gcs-server (built from its Go module on first use), Azurite (installed from
npm on first use) and its own Kafka broker unless RECLAIM_BOOTSTRAP names a running one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

if not __package__:  # run as a file: the sibling modules are imported as ``benchmarks.*``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.deletion_setup import counts, created_chunks, own_broker  # noqa: E402
from benchmarks.deletion_throughput import pipeline, timed  # noqa: E402
from benchmarks.results import Figures, record, rounds_text  # noqa: E402
from devtools import azurite_server, gcs_server  # noqa: E402
from reclaim.consumers.deletion_worker import tune_interpreter  # noqa: E402
from reclaim.localstack.procs import stop_pid  # noqa: E402
from reclaim.settings import Settings  # noqa: E402
from reclaim.storage import azure, gcs  # noqa: E402
from reclaim.storage.azure import AzureChunkStorage  # noqa: E402
from reclaim.storage.gcs import GcsChunkStorage  # noqa: E402

PARTS = ("gcs", "azure")
#: The pipeline's throughput over raw deletes through the same client, on each binding (the issue's goal).
TARGET = 0.8
QUICK_OBJECTS, QUICK_ROUNDS = [500], 1

CloudStorage: TypeAlias = GcsChunkStorage | AzureChunkStorage
RawDelete = Callable[[Any, Sequence[str]], None]
"""A raw delete of object keys with a binding's own client (the binding its first argument), no pipeline."""


@dataclass(frozen=True)
class Cloud:
    """One binding under test: its emulator, how to make a binding on a new bucket, and its raw delete."""

    part: str
    server: str
    where: str
    binding: Callable[[str], CloudStorage]
    raw: RawDelete
    raw_label: str
    raw_method: str


# --- raw deletes ----------------------------------------------------------------------------------------------


def gcs_batched(binding: GcsChunkStorage, keys: Sequence[str]) -> None:
    """The client's batches of 100 deletes, one after the other."""
    client = binding.client
    bucket = client.bucket(binding.settings.bucket)
    for start in range(0, len(keys), gcs.MAX_BATCH):
        with client.batch():
            for key in keys[start:start + gcs.MAX_BATCH]:
                bucket.delete_blob(key)


def gcs_each(binding: GcsChunkStorage, keys: Sequence[str]) -> None:
    """One ``delete_blob`` request per object from as many threads as the binding's fallback uses."""
    bucket = binding.client.bucket(binding.settings.bucket)
    with ThreadPoolExecutor(gcs.DELETE_PARALLELISM) as pool:
        list(pool.map(bucket.delete_blob, keys))


def azure_batched(binding: AzureChunkStorage, keys: Sequence[str]) -> None:
    """Blob batches of 256 deletes (the binding's batch size), one after the other."""
    client = binding.client
    for start in range(0, len(keys), azure.MAX_BATCH):
        list(client.delete_blobs(*keys[start:start + azure.MAX_BATCH]))


def gcs_takes_batches(binding: GcsChunkStorage) -> bool:
    """Whether the endpoint answers the client's batch part by part: one object deleted in a batch of one.
    The client raises ValueError when the answer has no part per call, as from fake-gcs-server 1.56.1.
    ``binding``'s bucket is for the probe alone: whatever the probe leaves there stays."""
    [chunk] = created_chunks(binding, 1)
    try:
        gcs_batched(binding, [binding.object_key(chunk.name)])
    except ValueError:
        return False
    assert not binding.exists(chunk.name), "the batch answered part by part but left the object"
    return True


# --- the emulators --------------------------------------------------------------------------------------------


def new_bucket(kind: str, n: int) -> str:
    return f"{kind}-{n}-{uuid.uuid4().hex[:8]}"


def gcs_cloud(work: Path, cache_dir: Path, started: list[int]) -> Cloud:
    pid, endpoint = gcs_server.start_fake_gcs(work / "fake-gcs", cache_dir)
    started.append(pid)

    def binding(bucket: str) -> GcsChunkStorage:
        gcs_server.ensure_bucket(endpoint, bucket)
        return GcsChunkStorage(endpoint.binding_settings(bucket))

    probe = binding(new_bucket("probe", 1))
    batches = gcs_takes_batches(probe)
    probe.close()
    server = f"fake-gcs-server {gcs_server.FAKE_GCS.version.lstrip('v')}"
    if batches:
        return Cloud("gcs", server, endpoint.url, binding, gcs_batched,
                     f"raw client.batch(), {gcs.MAX_BATCH} deletes/request", "batch")
    print(f"{server} answers the client's batch with no parts: the binding deletes one object per request "
          f"({gcs.DELETE_PARALLELISM} threads), and the raw baseline is the fastest the client does here, "
          f"bucket.delete_blob per object from {gcs.DELETE_PARALLELISM} threads (no batches)")
    return Cloud("gcs", server, endpoint.url, binding, gcs_each,
                 f"raw delete_blob per object, {gcs.DELETE_PARALLELISM} threads", "per-object")


def azure_cloud(work: Path, cache_dir: Path, started: list[int]) -> Cloud:
    pid, endpoint = azurite_server.start_azurite(work / "azurite", cache_dir)
    started.append(pid)

    def binding(container: str) -> AzureChunkStorage:
        azurite_server.ensure_container(endpoint, container)
        return AzureChunkStorage(endpoint.binding_settings(container))

    return Cloud("azure", f"Azurite {azurite_server.AZURITE_VERSION}", endpoint.account_url, binding,
                 azure_batched, f"raw delete_blobs, {azure.MAX_BATCH} blobs/request", "batch")


STARTERS: dict[str, Callable[[Path, Path, list[int]], Cloud]] = {"gcs": gcs_cloud, "azure": azure_cloud}


# --- the measurements -----------------------------------------------------------------------------------------


def raw_round(binding: CloudStorage, delete: RawDelete, n: int, cpu_s: list[float] | None = None) -> float:
    """Seconds to delete ``n`` objects (created through ``binding``, not timed) with ``delete``; the CPU
    seconds this process spent on it are appended to ``cpu_s``."""
    keys = [binding.object_key(chunk.name) for chunk in created_chunks(binding, n)]
    cpu_started = time.process_time()
    elapsed = timed(lambda: delete(binding, keys))
    if cpu_s is not None:
        cpu_s.append(time.process_time() - cpu_started)
    assert not any(True for _ in binding.iter_names()), "objects left behind by the raw deletes"
    return elapsed


def cloud_part(bootstrap: str, cloud: Cloud, n: int, work: Path, rounds: int, figures: Figures) -> None:
    """The pipeline and the raw deletes of one binding, ``rounds`` interleaved rounds of ``n`` objects."""
    key = f"{cloud.part}_{n}"
    piped, raw_binding = cloud.binding(new_bucket("pipe", n)), cloud.binding(new_bucket("raw", n))
    print(f"{cloud.server} at {cloud.where}, {n} objects:")
    # Warm both paths (connections, the GCS binding's batch probe, the broker's new-topic work) untimed.
    pipeline(bootstrap, piped, min(n, 1000), work)
    raw_round(raw_binding, cloud.raw, min(n, 1000))
    marking: list[float] = []
    deleting: list[float] = []
    raw: list[float] = []
    cpu: list[float] = []
    raw_cpu: list[float] = []
    for _ in range(rounds):
        phase1, phase2 = pipeline(bootstrap, piped, n, work, cpu_s=cpu)
        marking.append(phase1)
        deleting.append(phase2)
        raw.append(raw_round(raw_binding, cloud.raw, n, raw_cpu))
    piped.close()
    raw_binding.close()
    figures.add(f"{key}_raw_method", cloud.raw_method)
    figures.rate(f"{key}_phase1", "phase 1: publish + one metadata transaction", n, marking)
    figures.rate(f"{key}_pipeline", "pipeline: produced -> gone + committed", n, deleting)
    cpu_line(figures, f"{key}_worker_cpu", "  the worker's CPU in phase 2", n, cpu)
    figures.rate(f"{key}_raw", cloud.raw_label, n, raw)
    cpu_line(figures, f"{key}_raw_cpu", "  this process's CPU in the raw deletes", n, raw_cpu)
    figures.ratio(f"{key}_pipeline_over_raw", "pipeline / raw:", deleting, raw, TARGET)


def cpu_line(figures: Figures, name: str, label: str, n: int, cpu_s: Sequence[float]) -> None:
    """Print and record the median CPU seconds of the rounds, per record (``<name>_us_per_record``)."""
    middle = statistics.median(cpu_s)
    figures.add(f"{name}_median_s", middle)
    per_record = figures.add(f"{name}_us_per_record", middle / n * 1e6)
    print(f"  {label:48} {middle:8.3f} s  {per_record:10.0f} µs/record{rounds_text(cpu_s, 3)}")
    if len(cpu_s) > 1:
        figures.add(f"{name}_rounds_s", ", ".join(f"{s:.3f}" for s in cpu_s))


def parts(text: str) -> list[str]:
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(chosen) - set(PARTS))
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown part {(unknown or [text])[0]!r}; parts are {', '.join(PARTS)}")
    return chosen


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--objects", type=counts, help="objects per method, a comma list (default 5000,20000)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds of pipeline and raw (default 3)")
    parser.add_argument("--parts", type=parts, default=list(PARTS),
                        help=f"bindings to measure, a comma list of {', '.join(PARTS)} (default all)")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK_OBJECTS[0]} objects, "
                        f"{QUICK_ROUNDS} round (unless --objects or --rounds say otherwise)")
    args = parser.parse_args()
    args.objects = args.objects or (QUICK_OBJECTS if args.quick else [5000, 20_000])
    args.rounds = args.rounds or (QUICK_ROUNDS if args.quick else 3)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main() -> None:
    args = arguments()
    settings = Settings.from_env()
    begun, figures = time.time(), Figures()
    tune_interpreter()  # as ``reclaim worker`` does: the in-process worker below runs as one would
    with tempfile.TemporaryDirectory(prefix="reclaim-bench-") as tmp:
        work = Path(tmp)
        started: list[int] = []
        try:
            bootstrap = own_broker(settings, work, started)
            clouds = [STARTERS[part](work, settings.cache_dir, started) for part in args.parts]
            print(f"cloud deletion throughput, 64-byte objects, {os.cpu_count()} cores, one phase-2 consumer, "
                  f"batches of 1000; median of {args.rounds} rounds, pipeline and raw side by side")
            for n in args.objects:
                for cloud in clouds:
                    cloud_part(bootstrap, cloud, n, work, args.rounds, figures)
        finally:
            for pid in started:
                stop_pid(pid)
    record("cloud_deletion", vars(args), figures, begun)


if __name__ == "__main__":
    main()
