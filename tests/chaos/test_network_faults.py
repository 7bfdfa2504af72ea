"""Network faults between a real ``reclaim worker`` and its servers, injected by Toxiproxy (a TCP proxy in
front of each server, its toxics on every connection through it, open or new) while the worker drains
a backlog that keeps growing: 500 ms of latency, a bandwidth limit, connection resets, and a 30 s
network partition in which nothing passes to or from the broker, the S3 endpoint and PostgreSQL and
no connection closes. Each scenario lifts its faults and ends in a clean audit: nothing orphaned,
nothing live deleted, nothing dead-lettered, lag 0. The test's own clients (marking, listing, the
audit) reach every server directly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from devtools import toxiproxy as toxics
from devtools.toxiproxy import Proxy, Toxiproxy
from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from tests.support.chaos import Backlog, RestartableMinio, RestartablePostgres, spawn_worker, stopped
from tests.support.pipeline import Pipeline
from tests.support.toxiproxy import (
    Phase,
    ProxiedBroker,
    described,
    on,
    proxy_to,
    run_phases,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LATENCY = toxics.latency(500)
PARTITION_S = 30.0


def resets(proxy: Proxy) -> list[Phase]:
    """Twice for 1 s, every connection through ``proxy`` ends as soon as anything comes back on it (a new
    one with a TCP reset)."""
    return [Phase("reset_peer", on(proxy, toxics.reset_peer()), 1, rest_s=1) for _ in range(2)]


def pipeline(broker: ProxiedBroker, metadata: str, tmp_path: Path, unique_name: Callable[[str], str],
             *more: BaseChunkStorage) -> Pipeline:
    """A pipeline on fresh topics of ``broker`` (its direct listener), the store at ``metadata``, the
    filesystem binding and ``more``."""
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2", create=True)
    return Pipeline(broker.direct_bootstrap, broker.topics(unique_name("t") + "."), open_metadata_store(metadata),
                    StorageBindings([fs, *more]), unique_name("group"))


def s3_binding(endpoint: S3Endpoint, unique_name: Callable[[str], str]) -> S3ChunkStorage:
    """The S3 binding on a new bucket of ``endpoint``."""
    bucket = unique_name("chaos")
    ensure_bucket(endpoint, bucket)
    return S3ChunkStorage(endpoint.binding_settings(bucket), name="s3-tier2")


def through(proxy: Proxy, endpoint: S3Endpoint, bucket: str) -> dict[str, str]:
    """The ``RECLAIM_S3_*`` variables of ``endpoint``'s ``bucket`` reached through ``proxy``: requests are
    signed for the proxy's address, and pass MinIO's signature check as a TCP proxy forwards them unchanged."""
    return replace(endpoint, url=f"http://{proxy.listen}").reclaim_env(bucket)


def test_broker_link_latency_and_resets(proxied_broker: ProxiedBroker, toxiproxy: Toxiproxy,  # noqa: F811
                                        tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    """The worker reaches the broker only through Toxiproxy: the broker advertises the proxy."""
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    pipe = pipeline(proxied_broker, str(tmp_path / "meta.db"), tmp_path, unique_name)
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


def test_s3_link_latency_bandwidth_and_resets(own_minio: RestartableMinio, proxied_broker: ProxiedBroker,  # noqa: F811
                                              toxiproxy: Toxiproxy, tmp_path: Path,  # noqa: F811
                                              unique_name: Callable[[str], str]) -> None:
    """The worker's S3 endpoint is a Toxiproxy proxy in front of MinIO."""
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    s3 = s3_binding(own_minio.endpoint, unique_name)
    bucket = str(s3.bucket)
    pipe = pipeline(proxied_broker, str(tmp_path / "meta.db"), tmp_path, unique_name, s3)
    try:
        with proxy_to(toxiproxy, "s3", own_minio.endpoint.url.removeprefix("http://")) as proxy:
            backlog = Backlog.marked(pipe, segments=2, binding_name="s3-tier2")
            worker = spawn_worker(pipe, fs_root, log, RECLAIM_BATCH_SIZE="20",
                                  RECLAIM_BOOTSTRAP=proxied_broker.proxied_bootstrap,
                                  **through(proxy, own_minio.endpoint, bucket))
            try:
                backlog.wait_left(0.95, worker, log)
                throttled = on(proxy, LATENCY, toxics.bandwidth(32), toxics.bandwidth(32, toxics.UPSTREAM))
                results = run_phases(toxiproxy, backlog, worker, log,
                                     [Phase("latency 500 ms + 32 KB/s", throttled, 6, draining=True),
                                      *resets(proxy)])
                backlog.assert_clean("S3 link faults", f"worker↔S3: {described(results)}", fs_root, worker, log,
                                     env=own_minio.endpoint.reclaim_env(bucket))
            finally:
                stopped(worker, log)
    finally:
        pipe.close()


def test_postgres_link_latency_and_resets(own_postgres: RestartablePostgres, proxied_broker: ProxiedBroker,  # noqa: F811
                                          toxiproxy: Toxiproxy, tmp_path: Path,  # noqa: F811
                                          unique_name: Callable[[str], str]) -> None:
    """The worker's metadata URL names a Toxiproxy proxy in front of PostgreSQL."""
    server = own_postgres.server
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    pipe = pipeline(proxied_broker, own_postgres.url(), tmp_path, unique_name)
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
    nor closes (``timeout`` toxics of 0 on both directions of all three proxies): the worker must neither
    die nor dead-letter, and afterwards it drains what was marked before and during the partition.

    One partition of all three links stands for three blackholes of one link each: each of them alone
    passes the same way (the broker's costs a group session and a rejoin; the S3 endpoint's and
    PostgreSQL's are waited out on the connections the toxic holds), and together they take 30 s, not 90."""
    server = own_postgres.server
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    s3 = s3_binding(own_minio.endpoint, unique_name)
    bucket = str(s3.bucket)
    pipe = pipeline(proxied_broker, own_postgres.url(), tmp_path, unique_name, s3)
    try:
        with proxy_to(toxiproxy, "s3", own_minio.endpoint.url.removeprefix("http://")) as s3_proxy, \
                proxy_to(toxiproxy, "postgres", f"{server.host}:{server.port}") as pg_proxy:
            backlog = Backlog.marked(pipe, segments=1, binding_name="s3-tier2")
            worker = spawn_worker(pipe, fs_root, log, RECLAIM_BATCH_SIZE="20",
                                  RECLAIM_BOOTSTRAP=proxied_broker.proxied_bootstrap,
                                  RECLAIM_METADATA_URL=replace(server, host=pg_proxy.host, port=pg_proxy.port).url(),
                                  **through(s3_proxy, own_minio.endpoint, bucket))
            try:
                backlog.wait_left(0.95, worker, log)
                everything = on((proxied_broker.proxy, s3_proxy, pg_proxy), *toxics.blackhole())
                results = run_phases(toxiproxy, backlog, worker, log,
                                     [Phase("blackhole of all three", everything, PARTITION_S)], feed_every_s=3)
                backlog.assert_clean("network partition", f"worker↔broker, S3, PostgreSQL: {described(results)}",
                                     fs_root, worker, log, env=own_minio.endpoint.reclaim_env(bucket))
            finally:
                stopped(worker, log)
    finally:
        pipe.close()
