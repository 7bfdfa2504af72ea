"""The Spark audit's pieces that need no Spark: the listing's split plan, S3 Inventory manifests and data
files (read from local copies), and the JDBC source of a PostgreSQL URL."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reclaim.exits import Unavailable
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage, S3Settings
from reclaim.tools.audit_spark import (
    BindingSpec,
    InventoryFile,
    Split,
    inventory_files,
    jdbc_source,
    list_inventory_file,
    list_split,
    plan_splits,
    s3_location,
)


def chunks(binding: FileSystemChunkStorage, *names: str) -> None:
    for name in names:
        path = binding.data_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


def test_the_plan_walks_the_top_levels_and_every_object_is_in_exactly_one_task(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    names = [f"scope/s{s}/0.#epoch.0.E-1-O-{i}.c" for s in range(3) for i in range(2)]
    names += ["top-level-chunk", "scope/direct-chunk", "other/s/0.#epoch.0.E-1-O-0.c"]
    chunks(fs, *names)
    splits = plan_splits(fs, target=100)
    assert sorted((s.prefix, s.whole) for s in splits) == [
        ("", False), ("other/s/", True), ("scope/", False), ("scope/s0/", True), ("scope/s1/", True),
        ("scope/s2/", True)]
    listed = [row[1] for split in splits for row in list_split(split)]
    assert sorted(listed) == sorted(names)
    assert [s.prefix for s in plan_splits(fs, target=1)] == [""]  # enough tasks already: nothing walked


def test_a_flat_level_is_one_task_not_a_driver_listing(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    chunks(fs, *(f"flat-{i}" for i in range(1005)), "a/b")
    assert [(s.prefix, s.whole) for s in plan_splits(fs, target=100)] == [("", True)]


def s3_binding(bucket: str = "tier2", key_prefix: str = "") -> S3ChunkStorage:
    return S3ChunkStorage(S3Settings(bucket=bucket, endpoint_url="http://127.0.0.1:1", access_key="k",
                                     secret_key="s", key_prefix=key_prefix), name="s3-tier2")


def manifest(tmp_path: Path, **fields: object) -> Path:
    document = {"sourceBucket": "tier2", "destinationBucket": "arn:aws:s3:::inventory", "fileFormat": "CSV",
                "fileSchema": "Bucket, Key, Size, LastModifiedDate, IsLatest, IsDeleteMarker",
                "files": [{"key": "tier2/config/data/part-0.csv.gz", "size": 1, "MD5checksum": "-"}]}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(document | fields))
    return path


def test_a_local_manifest_finds_its_files_beside_it_and_a_mismatch_is_refused(tmp_path: Path) -> None:
    (item,) = inventory_files(s3_binding(), str(manifest(tmp_path)))
    assert item.location == str(tmp_path / "part-0.csv.gz") and item.file_format == "CSV"
    with pytest.raises(Unavailable, match="is of bucket 'elsewhere', but binding 's3-tier2' is bucket 'tier2'"):
        inventory_files(s3_binding(), str(manifest(tmp_path, sourceBucket="elsewhere")))
    with pytest.raises(Unavailable, match="in 'ORC': CSV and Parquet are read"):
        inventory_files(s3_binding(), str(manifest(tmp_path, fileFormat="ORC")))
    with pytest.raises(Unavailable, match="lacks the field.s. LastModifiedDate, Size"):
        inventory_files(s3_binding(), str(manifest(tmp_path, fileSchema="Bucket, Key")))
    with pytest.raises(Unavailable, match="which is no S3 binding"):
        inventory_files(FileSystemChunkStorage(tmp_path / "t", name="fs-tier2"), str(manifest(tmp_path)))


def test_csv_rows_become_chunk_names_by_the_key_prefix_and_stale_versions_are_no_objects(tmp_path: Path) -> None:
    rows = ["tier2,pre%2Fscope%2Fs%2F0.c,5,2026-11-01T10:00:00.000Z,true,false",
            "tier2,pre%2Fscope%2Fs%2F1.c,0,2026-11-01T10:00:00.000Z,false,false",   # an older version
            "tier2,pre%2Fscope%2Fs%2F2.c,0,2026-11-01T10:00:00.000Z,true,true",     # a delete marker
            "tier2,outside%2Fx,1,2026-11-01T10:00:00.000Z,true,false",               # not the binding's
            "tier2,pre%2F_reclaim_layouts%2Fs%2Fa.json,1,2026-11-01T10:00:00.000Z,true,false"]
    path = tmp_path / "part-0.csv.gz"
    path.write_bytes(gzip.compress("\n".join(rows).encode()))
    binding = s3_binding(key_prefix="pre/")
    columns = ("Bucket", "Key", "Size", "LastModifiedDate", "IsLatest", "IsDeleteMarker")
    item = InventoryFile(BindingSpec.of(binding), str(path), "CSV", columns)
    stamp = datetime(2026, 11, 1, 10, tzinfo=UTC).timestamp()
    assert list(list_inventory_file(item)) == [("s3-tier2", "scope/s/0.c", 5, stamp)]
    path.write_bytes(gzip.compress(b"another-bucket,pre%2Fx,1,2026-11-01T10:00:00.000Z,true,false"))
    with pytest.raises(ValueError, match="lists bucket 'another-bucket', not 'tier2'"):
        list(list_inventory_file(item))


def test_s3_and_s3a_urls_name_the_same_object_and_other_schemes_are_paths() -> None:
    assert s3_location("s3://inv/a/manifest.json") == s3_location("s3a://inv/a/manifest.json") == \
        ("inv", "a/manifest.json")
    assert s3_location("/tmp/manifest.json") is None and s3_location("s3:///no-bucket") is None


def test_a_postgresql_url_becomes_a_jdbc_url_with_the_credentials_apart() -> None:
    url, properties = jdbc_source("postgresql://reclaim:p%40ss@db.example:5433/meta?sslmode=require")
    assert url == "jdbc:postgresql://db.example:5433/meta?sslmode=require"
    assert properties == {"driver": "org.postgresql.Driver", "user": "reclaim", "password": "p@ss"}
    assert jdbc_source("postgresql://[::1]/meta")[0] == "jdbc:postgresql://[::1]/meta"


def test_a_password_from_libpqs_file_stands_in_for_the_urls_and_the_file_is_not_passed_on() -> None:
    # The JDBC driver reads no pgpass file: the password libpq found in it is handed over apart.
    url, properties = jdbc_source("postgresql://reclaim@db/meta?sslmode=require&passfile=/run/s/pgpass&options=-c%20x",
                                  password="from-file")
    assert url == "jdbc:postgresql://db/meta?sslmode=require&options=-c%20x"
    assert properties["password"] == "from-file"
    assert jdbc_source("postgresql://reclaim:in-url@db/meta", password="from-file")[1]["password"] == "in-url"
    assert "password" not in jdbc_source("postgresql://reclaim@db/meta?passfile=/x")[1]
    assert jdbc_source("postgresql://reclaim@db/meta?passfile=/x")[0] == "jdbc:postgresql://db/meta"


def test_a_split_names_its_binding_by_what_an_executor_rebuilds_it_from(tmp_path: Path) -> None:
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    split = Split(BindingSpec.of(fs), "", whole=True)
    rebuilt = split.binding.build()
    assert isinstance(rebuilt, FileSystemChunkStorage) and rebuilt.root == fs.root and rebuilt.name == "fs-tier2"
    s3 = BindingSpec.of(s3_binding(key_prefix="pre/")).build()
    assert isinstance(s3, S3ChunkStorage) and s3.settings.key_prefix == "pre/"
