"""A MinIO server on loopback: the pinned build (:data:`devtools.gotools.MINIO`), run with real credentials.

Unlike moto, MinIO checks every request's signature and holds keys and bucket names to S3's rules, so
the tests and benchmarks that run on it see what a real S3 server does. Given a ``host``, it listens on
that address instead (a host of :mod:`devtools.netns`, seen by reclaim processes on other hosts).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

from devtools import gotools
from reclaim.localstack.procs import StackError, free_port, spawn, stop_pid, wait_until
from reclaim.localstack.s3_server import S3Endpoint

#: The root credentials the server is started with; a request signed with any other key is refused.
ROOT_USER = "reclaim-minio"
ROOT_PASSWORD = "reclaim-minio-secret"


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/minio/health/ready", timeout=1) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def start_minio(work: Path, cache_dir: Path, timeout: float = 120.0, port: int | None = None,
                host: str = "127.0.0.1") -> tuple[int, S3Endpoint]:
    """Start MinIO on ``host``:``port`` (a free port when None) with its data and log under ``work``; return
    its pid and endpoint. Started again with the same ``work`` and ``port``, it serves the same objects.

    The binary is built first when the cache does not hold it (minutes, once). Raises
    :class:`~reclaim.localstack.procs.StackError` when it cannot be built or does not get ready within ``timeout``.
    """
    binary = gotools.build(gotools.MINIO, cache_dir).path
    port, console = port or free_port(host), free_port(host)
    env = {**os.environ, "MINIO_ROOT_USER": ROOT_USER, "MINIO_ROOT_PASSWORD": ROOT_PASSWORD,
           "MINIO_BROWSER": "off", "MINIO_UPDATE": "off"}
    log = work / "minio.log"
    proc = spawn([str(binary), "server", str(work / "minio-data"), "--quiet",
                  "--address", f"{host}:{port}", "--console-address", f"{host}:{console}"], log, env=env)
    endpoint = S3Endpoint(f"http://{host}:{port}", access_key=ROOT_USER, secret_key=ROOT_PASSWORD)
    try:
        wait_until(lambda: _ready(endpoint.url), timeout, "MinIO", proc, log)
    except StackError:
        stop_pid(proc.pid)
        raise
    return proc.pid, endpoint
