"""reclaim across hosts on one machine: the broker on one host, PostgreSQL and MinIO on another, each
``reclaim worker`` on a host of its own (:mod:`devtools.netns`). The multi-host test and benchmark run it.

No host shares a file with another: the metadata is in PostgreSQL, tier-2 is S3 (MinIO), and each
worker has its own state directory. The process that starts the stack stays in the root namespace and
reaches every host over the bridge, as an operator's machine on the same network would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from devtools import gotools, pg_server
from devtools.minio_server import start_minio
from devtools.netns import Host, HostNetwork
from reclaim.localstack.kafka_broker import BrokerPorts, fetch_jars, start_broker
from reclaim.localstack.procs import spawn, stop_pid
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.chunks import ChunkTags
from reclaim.storage.metadata import ChunkRecord, MetadataStore, SegmentRecord

BROKER_HOST = "broker"
STORE_HOST = "store"
#: Every host has ports of its own, so each server takes its usual one.
KAFKA_PORT, CONTROLLER_PORT, POSTGRES_PORT, S3_PORT, METRICS_PORT = 9092, 9093, 5432, 9000, 9464
CHUNK_BYTES = 64


class MultiHostStack:
    """The servers on their hosts, and ``workers`` hosts with nothing running yet; :meth:`close` it."""

    def __init__(self, work: Path, cache_dir: Path, workers: Sequence[str]) -> None:
        # A host reaches no package registry: whatever must be fetched or built is, before any starts.
        fetch_jars(cache_dir)
        gotools.build(gotools.MINIO, cache_dir)
        self.net = HostNetwork([BROKER_HOST, STORE_HOST, *workers])
        self.workers = list(workers)
        self._pids: list[int] = []
        self._postgres: pg_server.PostgresServer | None = None
        try:
            broker, store = self.net[BROKER_HOST], self.net[STORE_HOST]
            ports = BrokerPorts(client=KAFKA_PORT, controller=CONTROLLER_PORT, host=broker.address)
            with broker.entered():
                self._pids.append(start_broker(work / "kafka", cache_dir, ports).pid)
            self.bootstrap = ports.bootstrap
            with store.entered():
                self._postgres = pg_server.start(port=POSTGRES_PORT, host=store.address)
                _end_stranded_transactions(self._postgres.url())
                pid, self.endpoint = start_minio(work / "minio", cache_dir, port=S3_PORT, host=store.address)
                self._pids.append(pid)
        except BaseException:
            self.close()
            raise

    @property
    def metadata_url(self) -> str:
        assert self._postgres is not None
        return self._postgres.url()

    def host(self, name: str) -> Host:
        return self.net[name]

    def reclaim_env(self, bucket: str) -> dict[str, str]:
        """The variables that point a reclaim process, on any host, at this stack's servers and ``bucket``."""
        return {"RECLAIM_BOOTSTRAP": self.bootstrap, "RECLAIM_METADATA_URL": self.metadata_url,
                **self.endpoint.reclaim_env(bucket)}

    def spawn_worker(self, host: str, env: Mapping[str, str], state_dir: Path,
                     metrics: bool = True) -> subprocess.Popen[bytes]:
        """``reclaim worker`` on ``host`` with ``env`` (over this process's), its state and log in
        ``state_dir``; with ``metrics``, its metrics served on the host's address (:meth:`metrics`)."""
        own = {"RECLAIM_STATE_DIR": str(state_dir), "RECLAIM_FS_ROOT": str(state_dir / "tier2"),
               "RECLAIM_FS_CREATE_ROOT": "true"}
        argv = [sys.executable, "-m", "reclaim", "worker"]
        if metrics:
            own["RECLAIM_METRICS_PORT"] = str(METRICS_PORT)
            argv += ["--metrics-addr", self.net[host].address]
        with self.net[host].entered():
            # One worker process a host, as before --processes, unless ``env`` asks for more.
            return spawn(argv, state_dir / "worker.log", env={**os.environ, "RECLAIM_PROCESSES": "1", **env, **own})

    def metrics(self, host: str) -> dict[str, float]:
        """The samples a worker on ``host`` serves, keyed ``name{label="value",...}``; empty when it does not
        answer (its link cut, or it has stopped)."""
        from prometheus_client.parser import text_string_to_metric_families

        try:
            with urllib.request.urlopen(f"http://{self.net[host].address}:{METRICS_PORT}/metrics", timeout=2) as got:
                text = got.read().decode()
        except OSError:
            return {}
        return {_sample_key(s.name, s.labels): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def close(self) -> None:
        """Stop the servers, then remove the hosts (which kills whatever still runs in them)."""
        for pid in self._pids:
            stop_pid(pid)
        if self._postgres is not None:
            self._postgres.stop(remove=True)
        self.net.close()


#: How long PostgreSQL keeps a session that is idle inside a transaction. A worker host cut off between
#: two statements of a transaction would otherwise hold its rows' locks until its link came back (the
#: server sends nothing on an idle session, so it never learns that the peer is gone), and the worker
#: that took over its partitions would wait on them.
IDLE_IN_TRANSACTION_TIMEOUT = "30s"


def _end_stranded_transactions(url: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} SET idle_in_transaction_session_timeout = {}").format(
            sql.Identifier(pg_server.DATABASE), sql.Literal(IDLE_IN_TRANSACTION_TIMEOUT)))


def _sample_key(name: str, labels: Mapping[str, str]) -> str:
    inside = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return f"{name}{{{inside}}}" if inside else name


def write_chunks(store: MetadataStore, binding: BaseChunkStorage, segment: str, count: int,
                 stream: str = "scope/stream", threads: int = 8) -> list[ChunkRecord]:
    """``count`` live chunks of ``segment``: the objects written ``threads`` at a time (an S3 binding keeps
    10 connections), then their rows in one transaction (a row never names an object that is not there)."""
    tags = ChunkTags(component="segment", stream=stream, segment=segment, writer_epoch=1)
    names = [f"{segment}.E-1-O-{i * CHUNK_BYTES}.{uuid.uuid4().hex}" for i in range(count)]
    chunks = [ChunkRecord(name=name, segment=segment, start_offset=i * CHUNK_BYTES, length=CHUNK_BYTES, tags=tags,
                          locations=(binding.location(name),)) for i, name in enumerate(names)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda c: binding.create_with_content(c.name, bytes([c.start_offset % 251]) * CHUNK_BYTES,
                                                            c.tags), chunks))
    with store.transaction() as txn:
        if txn.get_segment(segment) is None:
            txn.put_segment(SegmentRecord(name=segment, stream=stream))
        return [txn.put_chunk(chunk) for chunk in chunks]


def group_members(admin: AdminClient, group: str) -> dict[str, int]:
    """The group's members now, as the broker sees them: the address each connects from, and how many
    partitions it holds (an empty dict while the group rebalances or has no member)."""
    try:
        description = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except (KafkaException, TimeoutError):  # the group or its coordinator is not there yet
        return {}
    if not str(description.state).endswith("STABLE"):
        return {}
    return {member.host.lstrip("/"): len(member.assignment.topic_partitions) if member.assignment else 0
            for member in description.members}


def wait_members(admin: AdminClient, group: str, hosts: Sequence[Host], timeout_s: float = 60.0) -> dict[str, int]:
    """Until exactly ``hosts`` are the group's members, each holding partitions; their partition counts."""
    wanted = {host.address for host in hosts}
    deadline = time.monotonic() + timeout_s
    members: dict[str, int] = {}
    while time.monotonic() < deadline:
        members = group_members(admin, group)
        if set(members) == wanted and all(members.values()):
            return members
        time.sleep(0.2)
    raise TimeoutError(f"group {group} did not settle on {sorted(wanted)} in {timeout_s:.0f}s: {members}")


def object_count(endpoint: S3Endpoint, bucket: str) -> int:
    """How many objects ``bucket`` holds (a listing, 1000 keys a request)."""
    from reclaim.localstack.s3_server import s3_client

    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sum(page.get("KeyCount", 0) for page in pages)
