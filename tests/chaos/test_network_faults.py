"""Network faults between a real ``reclaim worker`` and its servers, injected by Toxiproxy (a TCP proxy in
front of each server, its toxics on every connection through it, open or new) while the worker drains
a backlog that keeps growing: 500 ms of latency, a bandwidth limit, connection resets, and a 30 s
network partition in which nothing passes to or from the broker, the S3 endpoint and PostgreSQL and
no connection closes. Each scenario lifts its faults and ends in a clean audit: nothing orphaned,
nothing live deleted, nothing dead-lettered, lag 0."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from ops import toxiproxy as toxics
from ops.s3_server import ensure_bucket
from ops.toxiproxy import Proxy, Toxiproxy
from storage.bindings import StorageBindings
from storage.filesystem import FileSystemChunkStorage
from storage.s3 import S3ChunkStorage
from storage.sql_store import open_metadata_store
from tests.deletion.conftest import Pipeline

from .conftest import Backlog, RestartableMinio, RestartablePostgres, spawn_worker, stopped
from .toxi import (  # noqa: F401 - toxiproxy and proxied_broker are fixtures
    Phase,
    ProxiedBroker,
    described,
    on,
    proxied_broker,
    proxy_to,
    run_phases,
    toxiproxy,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LATENCY = toxics.latency(500)
PARTITION_S = 30.0


def resets(proxy: Proxy) -> list[Phase]:
    """Every connection through ``proxy`` reset as soon as anything comes back on it, twice, for 1 s."""
    return [Phase("reset_peer", on(proxy, toxics.reset_peer()), 1, rest_s=1) for _ in range(2)]


@pytest.fixture
def s3_pipe(own_minio: RestartableMinio, proxied_broker: ProxiedBroker,  # noqa: F811
            tmp_path: Path, unique_name: Callable[[str], str]) -> Iterator[tuple[Pipeline, str]]:
    """A pipeline whose chunks are on MinIO (S3) and rows in SQLite; its bucket."""
    bucket = unique_name("chaos")
    ensure_bucket(own_minio.endpoint, bucket)
    s3 = S3ChunkStorage(own_minio.endpoint.binding_settings(bucket), name="s3-tier2")
    pipe = Pipeline(proxied_broker.direct_bootstrap, proxied_broker.topics(unique_name("t") + "."),
                    open_metadata_store(str(tmp_path / "meta.db")),
                    StorageBindings([FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2", create=True), s3]),
                    unique_name("group"))
    yield pipe, bucket
    pipe.close()


def test_broker_link_latency_and_resets(proxied_broker: ProxiedBroker, toxiproxy: Toxiproxy,  # noqa: F811
                                        tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    """The worker reaches the broker only through Toxiproxy (the broker advertises the proxy); the test's
    own clients use the broker's direct listener."""
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    pipe = Pipeline(proxied_broker.direct_bootstrap, proxied_broker.topics(unique_name("t") + "."),
                    open_metadata_store(str(tmp_path / "meta.db")),
                    StorageBindings([FileSystemChunkStorage(fs_root, name="fs-tier2")]), unique_name("group"))
    proxy = proxied_broker.proxy
    try:
        backlog = Backlog.marked(pipe, segments=2)
        worker = spawn_worker(pipe, fs_root, log, RECLAIM_BATCH_SIZE="20",
                              RECLAIM_BOOTSTRAP=proxied_broker.proxied_bootstrap)
        try:
            backlog.wait_left(0.95, worker, log)
            results = run_phases(toxiproxy, backlog, worker, log,
                                 [Phase("latency 500 ms", on(proxy, LATENCY), 6, draining=True), *resets(proxy)])
            backlog.assert_clean("broker link faults", f"worker↔broker: {described(results)}", fs_root, worker,
                                 log)
        finally:
            stopped(worker, log)
    finally:
        pipe.close()


def test_s3_link_latency_bandwidth_and_resets(own_minio: RestartableMinio, s3_pipe: tuple[Pipeline, str],
                                              proxied_broker: ProxiedBroker, toxiproxy: Toxiproxy,  # noqa: F811
                                              tmp_path: Path) -> None:
    """The worker's S3 endpoint is a Toxiproxy proxy in front of MinIO: requests signed for the proxy's
    address pass MinIO's signature check, a TCP proxy forwarding them unchanged. The test's own S3
    binding talks to MinIO directly."""
    pipe, bucket = s3_pipe
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    with proxy_to(toxiproxy, "s3", own_minio.endpoint.url.removeprefix("http://")) as proxy:
        proxied = replace(own_minio.endpoint, url=f"http://{proxy.listen}")
        backlog = Backlog.marked(pipe, segments=2, binding_name="s3-tier2")
        worker = spawn_worker(pipe, fs_root, log, RECLAIM_BATCH_SIZE="20",
                              RECLAIM_BOOTSTRAP=proxied_broker.proxied_bootstrap, **proxied.reclaim_env(bucket))
        try:
            backlog.wait_left(0.95, worker, log)
            throttled = on(proxy, LATENCY, toxics.bandwidth(32), toxics.bandwidth(32, toxics.UPSTREAM))
            results = run_phases(toxiproxy, backlog, worker, log,
                                 [Phase("latency 500 ms + 32 KB/s", throttled, 6, draining=True), *resets(proxy)])
            backlog.assert_clean("S3 link faults", f"worker↔S3: {described(results)}", fs_root, worker, log,
                                 env=own_minio.endpoint.reclaim_env(bucket))
        finally:
            stopped(worker, log)


def test_postgres_link_latency_and_resets(own_postgres: RestartablePostgres, proxied_broker: ProxiedBroker,  # noqa: F811
                                          toxiproxy: Toxiproxy, tmp_path: Path,  # noqa: F811
                                          unique_name: Callable[[str], str]) -> None:
    """The worker's metadata URL names a Toxiproxy proxy in front of PostgreSQL; the test's own store
    connects to it directly."""
    server = own_postgres.server
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    pipe = Pipeline(proxied_broker.direct_bootstrap, proxied_broker.topics(unique_name("t") + "."),
                    open_metadata_store(own_postgres.url()),
                    StorageBindings([FileSystemChunkStorage(fs_root, name="fs-tier2")]), unique_name("group"))
    try:
        with proxy_to(toxiproxy, "postgres", f"{server.host}:{server.port}") as proxy:
            backlog = Backlog.marked(pipe, segments=2)
            worker = spawn_worker(pipe, fs_root, log, RECLAIM_BATCH_SIZE="20",
                                  RECLAIM_BOOTSTRAP=proxied_broker.proxied_bootstrap,
                                  RECLAIM_METADATA_URL=replace(server, host=proxy.host, port=proxy.port).url())
            try:
                backlog.wait_left(0.95, worker, log)
                results = run_phases(toxiproxy, backlog, worker, log,
                                     [Phase("latency 500 ms", on(proxy, LATENCY), 6, draining=True), *resets(proxy)])
                backlog.assert_clean("PostgreSQL link faults", f"worker↔PostgreSQL: {described(results)}", fs_root,
                                     worker, log)
            finally:
                stopped(worker, log)
    finally:
        pipe.close()


def test_a_30s_partition_from_broker_s3_and_postgres(
        own_minio: RestartableMinio, own_postgres: RestartablePostgres, proxied_broker: ProxiedBroker,  # noqa: F811
        toxiproxy: Toxiproxy, tmp_path: Path, unique_name: Callable[[str], str]) -> None:  # noqa: F811
    """Every connection of the worker goes through Toxiproxy, and for 30 s none passes anything either way
    nor closes (``timeout`` toxics of 0 on both directions): the worker must neither die nor dead-letter,
    and afterwards it drains what was marked before and during the partition."""
    bucket = unique_name("chaos")
    ensure_bucket(own_minio.endpoint, bucket)
    server = own_postgres.server
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    s3 = S3ChunkStorage(own_minio.endpoint.binding_settings(bucket), name="s3-tier2")
    pipe = Pipeline(proxied_broker.direct_bootstrap, proxied_broker.topics(unique_name("t") + "."),
                    open_metadata_store(own_postgres.url()),
                    StorageBindings([FileSystemChunkStorage(fs_root, name="fs-tier2", create=True), s3]),
                    unique_name("group"))
    try:
        with proxy_to(toxiproxy, "s3", own_minio.endpoint.url.removeprefix("http://")) as s3_proxy, \
                proxy_to(toxiproxy, "postgres", f"{server.host}:{server.port}") as pg_proxy:
            proxied_s3 = replace(own_minio.endpoint, url=f"http://{s3_proxy.listen}")
            backlog = Backlog.marked(pipe, segments=1, binding_name="s3-tier2")
            worker = spawn_worker(pipe, fs_root, log, RECLAIM_BATCH_SIZE="20",
                                  RECLAIM_BOOTSTRAP=proxied_broker.proxied_bootstrap,
                                  RECLAIM_METADATA_URL=replace(server, host=pg_proxy.host, port=pg_proxy.port).url(),
                                  **proxied_s3.reclaim_env(bucket))
            try:
                backlog.wait_left(0.95, worker, log)
                everything = (proxied_broker.proxy, s3_proxy, pg_proxy)
                results = run_phases(toxiproxy, backlog, worker, log,
                                     [Phase("blackhole of all three", on(everything, *toxics.blackhole()),
                                            PARTITION_S)], feed_every_s=3)
                backlog.assert_clean("network partition", f"worker↔broker, S3, PostgreSQL: {described(results)}",
                                     fs_root, worker, log, env=own_minio.endpoint.reclaim_env(bucket))
            finally:
                stopped(worker, log)
    finally:
        pipe.close()
