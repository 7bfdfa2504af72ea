"""A MinIO server for the benchmarks, built from its Go module and started on loopback.

``python -m benchmarks.minio build`` installs the pinned module into ``<cache>/bin/minio`` (once; it
takes minutes); ``python -m benchmarks.minio start`` runs a server on a free port with a temporary data
directory, prints the ``RECLAIM_S3_*`` variables that point reclaim at it and runs until SIGTERM or
SIGINT. The pinned version is :data:`ops.gotools.MINIO`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from ops import gotools
from ops.procs import StackError, free_port, pid_alive, spawn, stop_on_signals, stop_pid, wait_until
from ops.s3_server import S3Endpoint
from ops.settings import Settings

ROOT_USER = "reclaim-minio"
ROOT_PASSWORD = "reclaim-minio-secret"


def build(cache_dir: Path) -> Path:
    """The MinIO binary of the pinned version (:data:`ops.gotools.MINIO`), built unless it is there already."""
    return gotools.build(gotools.MINIO, cache_dir).path


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/minio/health/ready", timeout=1) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def start_minio(work: Path, cache_dir: Path, timeout: float = 120.0) -> tuple[int, S3Endpoint]:
    """Start MinIO on a free loopback port with its data under ``work``; return its pid and endpoint."""
    port, console = free_port(), free_port()
    env = {**os.environ, "MINIO_ROOT_USER": ROOT_USER, "MINIO_ROOT_PASSWORD": ROOT_PASSWORD,
           "MINIO_BROWSER": "off", "MINIO_UPDATE": "off"}
    log = work / "minio.log"
    proc = spawn([str(build(cache_dir)), "server", str(work / "minio-data"), "--quiet",
                  "--address", f"127.0.0.1:{port}", "--console-address", f"127.0.0.1:{console}"], log, env=env)
    endpoint = S3Endpoint(f"http://127.0.0.1:{port}", access_key=ROOT_USER, secret_key=ROOT_PASSWORD)
    try:
        wait_until(lambda: _ready(endpoint.url), timeout, "MinIO", proc, log)
    except StackError:
        stop_pid(proc.pid)
        raise
    return proc.pid, endpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build", "start"])
    args = parser.parse_args()
    cache_dir = Settings.from_env().cache_dir
    if args.command == "build":
        print(build(cache_dir))
        return
    with tempfile.TemporaryDirectory(prefix="reclaim-minio-") as tmp:
        pid, endpoint = start_minio(Path(tmp), cache_dir)
        print(f"export RECLAIM_S3_ENDPOINT={endpoint.url} RECLAIM_S3_ACCESS_KEY={endpoint.access_key} "
              f"RECLAIM_S3_SECRET_KEY={endpoint.secret_key} RECLAIM_S3_REGION={endpoint.region}", flush=True)
        stop = stop_on_signals("stopping MinIO")
        try:
            while pid_alive(pid) and not stop.wait(1.0):
                pass
        finally:
            stop_pid(pid)


if __name__ == "__main__":
    main()
