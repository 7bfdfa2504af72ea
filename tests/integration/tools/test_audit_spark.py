"""``reclaim audit --spark``: the audit as a Spark job agrees with the one-process audit on the same data,
reads S3 Inventory reports (CSV and Parquet) and confirms what a stale one says, refuses an inventory
of another bucket, and fails whole, repairing nothing, when a listing fails half way."""

from __future__ import annotations

import csv
import gzip
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from devtools.s3_fault_proxy import S3FaultProxy
from reclaim.exits import ExitCode, Unavailable
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.storage.base import BaseChunkStorage, StoredObject
from reclaim.storage.chunks import ChunkLocation, Tier, offload_object_name
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import OffloadRecord, OffloadState
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import PostgresMetadataStore, SQLiteMetadataStore
from reclaim.tools import audit_spark
from reclaim.tools.audit import AuditHooks, AuditReport, audit
from reclaim.tools.audit_spark import SparkAuditSources, plan_splits, spark_audit
from tests.support.audit import HOUR, SEGMENT, TAGS, chunk, env_for, findings_fixture, name, put, run_audit
from tests.support.cli import run_reclaim
from tests.support.servers import postgres_schema_url

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def normalised(report: AuditReport) -> dict[str, Any]:
    """The report's document with each sample's names sorted (a filesystem lists in directory order)."""
    def sort(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: sorted(v) if k == "names" else sort(v) for k, v in value.items()}
        return value

    return sort(report.to_dict())  # type: ignore[no-any-return]


def store_findings(s3: BaseChunkStorage, fs: FileSystemChunkStorage, store: SQLiteMetadataStore) -> None:
    """Live, missing and orphans on an object store across several streams (so several listing tasks), plus a
    row on a bucket the binding no longer has."""
    rows = []
    for stream in range(3):
        for i in range(4):
            chunk_name = f"scope/s{stream}/0.#epoch.0.E-1-O-{i}.c{i}"
            if i == 3:
                s3.create_with_content(chunk_name, b"x", TAGS)  # no row: an orphan with no grace
            else:
                rows.append(chunk(s3, chunk_name, write=i != 2))  # i == 2: missing
    rows.append(chunk(s3, name(40), write=False, location=ChunkLocation(s3.name, Tier.TIER2, "gone-bucket",
                                                                       name(40))))
    put(store, *rows)
    assert fs.bucket is None


def offload_findings(s3: BaseChunkStorage, store: SQLiteMetadataStore) -> None:
    """Offloaded copies on an object store (objects ``_offload/<copy>/<chunk>``): live and missing by their rows, one an
    offload on its way holds (pending), one an intent past its deadline left (orphan), one nothing names."""
    copies = [f"{i:032x}" for i in range(1, 6)]
    live, missing, held, expired, unnamed = (offload_object_name(copy, name(50 + i)) for i, copy in enumerate(copies))
    for obj in (live, held, expired, unnamed):
        s3.create_with_content(obj, b"x", TAGS)
    rows = [chunk(None, name(50), write=False, location=replace(s3.location(live), copy=copies[0])),
            chunk(None, name(51), write=False, location=replace(s3.location(missing), copy=copies[1]))]
    put(store, *rows)
    hot = ChunkLocation("fs-tier2", Tier.TIER2, None, "x")
    with store.transaction() as txn:
        for i, deadline in ((2, time.time() + HOUR), (3, time.time() - HOUR)):
            txn.put_offload(OffloadRecord(copies[i], name(50 + i), SEGMENT, TAGS, hot,
                                          replace(s3.location(offload_object_name(copies[i], name(50 + i))),
                                                  copy=copies[i]),
                                          1, OffloadState.INTENT, time.time(), deadline))


def test_the_spark_audit_and_the_one_process_audit_agree(
        spark: Any, tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore,
        make_tier2: Callable[[str], object]) -> None:
    s3 = make_tier2("s3")
    assert isinstance(s3, S3ChunkStorage)
    findings_fixture(fs, store)
    store_findings(s3, fs, store)
    assert len(plan_splits(s3, target=100)) == 3  # one task per stream
    offload_findings(s3, store)

    for grace in (HOUR, 0.0):
        one = audit(store, [fs, s3], grace_s=grace)
        repaired: list[tuple[str, str]] = []

        def repair(binding: BaseChunkStorage, objects: Sequence[StoredObject],
                   found: list[tuple[str, str]] = repaired) -> None:
            found.extend((binding.name, obj.name) for obj in objects)

        many = spark_audit(spark, store, [fs, s3], sources=SparkAuditSources(tmp_path / f"work-{grace}"),
                           grace_s=grace, hooks=AuditHooks(orphans=repair))
        assert normalised(many) == normalised(one)
        # --repair's hook gets exactly the confirmed orphans, each once.
        assert sorted(repaired) == sorted((b.binding, n) for b in one.bindings for n in b.orphans.names)
    assert many.bindings[1].orphans.count == 5 and many.bindings[1].missing.count == 4
    assert many.bindings[1].live == 7 and many.bindings[1].pending == 1  # the offloaded copy live, one held
    assert set(many.unconfigured) == {"old-tier2", "s3-tier2 (bucket gone-bucket, TIER2)"}


def test_the_spark_audit_lists_gcs_and_azure_through_their_clients_on_the_executors(
        spark: Any, tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore,
        cloud_binding: BaseChunkStorage) -> None:
    cloud = cloud_binding
    store_findings(cloud, fs, store)
    assert len(plan_splits(cloud, target=100)) == 3  # one task per stream
    offload_findings(cloud, store)
    for grace in (HOUR, 0.0):
        one = audit(store, [fs, cloud], grace_s=grace)
        many = spark_audit(spark, store, [fs, cloud], sources=SparkAuditSources(tmp_path / f"work-{grace}"),
                           grace_s=grace)
        assert normalised(many) == normalised(one)
    assert many.bindings[1].orphans.count == 5 and many.bindings[1].missing.count == 4
    assert set(many.unconfigured) == {f"{cloud.name} (bucket gone-bucket, TIER2)"}


@pytest.mark.parametrize("password", ["in the url", "in a passfile"])
def test_rows_read_over_jdbc_from_postgresql_give_the_same_report(
        spark: Any, tmp_path: Path, fs: FileSystemChunkStorage, postgres_url: str,
        unique_name: Callable[[str], str], password: str) -> None:
    url = postgres_schema_url(postgres_url, unique_name("audit").replace("-", "_"))
    if password == "in a passfile":
        # libpq's password file (a mounted secret), which the JDBC driver does not read itself.
        parts = urlsplit(url)
        assert parts.password, "the server asks for a password"
        passfile = tmp_path / "pgpass"
        passfile.write_text(f"{parts.hostname}:{parts.port}:*:{parts.username}:{parts.password}\n")
        passfile.chmod(0o600)
        url = urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}",
                                        query=f"{parts.query}&passfile={passfile}"))
    store = PostgresMetadataStore(url)
    try:
        findings_fixture(fs, store)
        one = audit(store, [fs], grace_s=HOUR)
        many = spark_audit(spark, store, [fs], grace_s=HOUR, sources=SparkAuditSources(tmp_path / "work", url))
    finally:
        store.close()
    assert normalised(many) == normalised(one)
    assert one.bindings[0].orphans.count == 1 and len(one.unconfigured) == 1


def test_the_command_with_spark_prints_what_the_one_process_command_prints(
        tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore) -> None:
    findings_fixture(fs, store)
    plain = run_audit(tmp_path, "--json")
    on_spark = run_reclaim("audit", "--json", "--spark", "--master", "local[2]", env=env_for(tmp_path), timeout=300)
    assert (plain.returncode, on_spark.returncode) == (ExitCode.FINDINGS, ExitCode.FINDINGS), on_spark.stderr
    document = json.loads(on_spark.stdout)
    assert document == json.loads(plain.stdout)
    refused = run_audit(tmp_path, "--inventory", "s3-tier2=s3://x/manifest.json")
    assert refused.returncode == ExitCode.USAGE and "--spark" in refused.stderr


def inventory(s3: S3ChunkStorage, destination: str, objects: Sequence[StoredObject], file_format: str,
              source_bucket: str | None = None) -> str:
    """An S3 Inventory report of ``objects`` in ``destination`` (two data files); its manifest's URL."""
    client = s3.client
    client.create_bucket(Bucket=destination)
    halves = [objects[: len(objects) // 2], objects[len(objects) // 2:]]
    files = []
    for index, half in enumerate(halves):
        keys = [s3.object_key(obj.name) for obj in half]
        if file_format == "CSV":
            text = io.StringIO()
            writer = csv.writer(text)
            for key, obj in zip(keys, half, strict=True):
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(obj.modified))
                writer.writerow([source_bucket or s3.bucket, key.replace("/", "%2F"), obj.size, stamp])
            body = gzip.compress(text.getvalue().encode())
            key = f"inv/data/part-{index}.csv.gz"
        else:
            table = pa.table({"bucket": [source_bucket or s3.bucket] * len(half), "key": keys,
                              "size": [obj.size for obj in half],
                              "last_modified_date": pa.array([int(obj.modified * 1000) for obj in half],
                                                             pa.timestamp("ms", tz="UTC"))})
            sink = io.BytesIO()
            pq.write_table(table.rename_columns(["Bucket", "Key", "Size", "LastModifiedDate"]), sink)
            body = sink.getvalue()
            key = f"inv/data/part-{index}.parquet"
        client.put_object(Bucket=destination, Key=key, Body=body)
        files.append({"key": key, "size": len(body), "MD5checksum": "-"})
    manifest = {"sourceBucket": source_bucket or s3.bucket, "destinationBucket": f"arn:aws:s3:::{destination}",
                "version": "2016-11-30", "fileFormat": file_format,
                "fileSchema": "Bucket, Key, Size, LastModifiedDate", "files": files}
    client.put_object(Bucket=destination, Key="inv/manifest.json", Body=json.dumps(manifest).encode())
    return f"s3a://{destination}/inv/manifest.json"


@pytest.mark.parametrize("file_format", ["CSV", "Parquet"])
def test_an_inventory_report_replaces_the_listing_and_what_changed_since_is_confirmed_away(
        spark: Any, tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore,
        make_tier2: Callable[[str], object], s3_bucket: str, file_format: str) -> None:
    s3 = make_tier2("s3")
    assert isinstance(s3, S3ChunkStorage)
    store_findings(s3, fs, store)
    snapshot = list(s3.iter_objects())
    # Since the report was made: an orphan was deleted, and a chunk was written with its row.
    s3.client.delete_object(Bucket=s3.bucket, Key=s3.object_key("scope/s0/0.#epoch.0.E-1-O-3.c3"))
    put(store, chunk(s3, "scope/s9/0.#epoch.0.E-1-O-0.c0"))
    manifest = inventory(s3, f"{s3_bucket}-inv-{file_format.lower()}", snapshot, file_format)

    listed = audit(store, [fs, s3], grace_s=0.0)
    from_inventory = spark_audit(spark, store, [fs, s3], grace_s=0.0, sources=SparkAuditSources(
        tmp_path / "work", inventories=(("s3-tier2", manifest),)))
    result = from_inventory.bindings[1]
    assert result.orphans.count == 2 and result.missing.count == 3  # neither change is a finding
    assert normalised(from_inventory)["bindings"]["s3-tier2"] | {"live": None} == \
        normalised(listed)["bindings"]["s3-tier2"] | {"live": None}
    assert result.live == listed.bindings[1].live - 1  # the new chunk is not in the report: not counted live


def test_an_inventory_of_another_bucket_is_refused_before_anything_is_listed(
        spark: Any, tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore,
        make_tier2: Callable[[str], object], s3_bucket: str) -> None:
    s3 = make_tier2("s3")
    assert isinstance(s3, S3ChunkStorage)
    store_findings(s3, fs, store)
    manifest = inventory(s3, f"{s3_bucket}-inv-other", list(s3.iter_objects()), "CSV", source_bucket="other")
    with pytest.raises(Unavailable, match="is of bucket 'other', but binding 's3-tier2' is bucket"):
        spark_audit(spark, store, [s3], grace_s=0.0, sources=SparkAuditSources(
            tmp_path / "work", inventories=(("s3-tier2", manifest),)))


def test_a_listing_that_fails_half_way_fails_the_run_and_repairs_nothing(
        spark: Any, tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore,
        make_tier2: Callable[[str], object], s3_endpoint: S3Endpoint, s3_bucket: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The server cannot be made to fail between the driver's planning and the tasks' listings, so a proxy
    # in front of it starts answering every request with an error once the tasks are planned.
    seeded = make_tier2("s3")
    assert isinstance(seeded, S3ChunkStorage)
    store_findings(seeded, fs, store)
    repaired: list[StoredObject] = []
    with S3FaultProxy(s3_endpoint.url, rate=0.0) as proxy:
        settings = S3Endpoint(proxy.url, s3_endpoint.access_key, s3_endpoint.secret_key).binding_settings(s3_bucket)
        s3 = S3ChunkStorage(settings, name="s3-tier2")
        planned = audit_spark.plan_splits

        def plan_then_fail(binding: BaseChunkStorage, target: int, max_depth: int = 2) -> list[Any]:
            splits = planned(binding, target, max_depth)
            proxy.plan.rate = 1.0
            return splits

        monkeypatch.setattr(audit_spark, "plan_splits", plan_then_fail)
        with pytest.raises(Unavailable, match="the audit's Spark job failed: .*nothing was repaired"):
            spark_audit(spark, store, [s3], grace_s=0.0, sources=SparkAuditSources(tmp_path / "work"),
                        hooks=AuditHooks(orphans=lambda _, objects: repaired.extend(objects)))
        assert proxy.plan.injected
    assert repaired == []
