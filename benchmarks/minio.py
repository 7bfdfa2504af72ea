"""A MinIO server for the benchmarks, built from its Go module and started on loopback.

``python -m benchmarks.minio build`` installs the pinned module into ``<cache>/bin/minio`` (once; it
takes minutes); ``python -m benchmarks.minio start`` runs a server on a free port with a temporary data
directory, prints the ``RECLAIM_S3_*`` variables that point reclaim at it and runs until SIGTERM or
SIGINT. The pinned version is :data:`devtools.gotools.MINIO`; the server and its credentials are
:mod:`devtools.minio_server`'s, which the tests start too.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from devtools import gotools
from devtools.minio_server import start_minio
from reclaim.localstack.procs import pid_alive, stop_on_signals, stop_pid
from reclaim.settings import Settings

__all__ = ["build", "main", "start_minio"]


def build(cache_dir: Path) -> Path:
    """The MinIO binary of the pinned version (:data:`devtools.gotools.MINIO`), built unless it is there already."""
    return gotools.build(gotools.MINIO, cache_dir).path


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
