"""How a Spark session reaches a cluster, without one: the s3a options and jars, and the archive of reclaim
that is shipped to the executors."""

from __future__ import annotations

import zipfile
from pathlib import Path

from reclaim.retention.spark_session import (
    AWS_SDK_OF_HADOOP,
    S3A_EXCLUDES,
    S3aStore,
    hadoop_version,
    is_local,
    reclaim_archive,
    s3a_packages,
    uses_s3a,
)


def test_an_s3_compatible_endpoint_is_path_style_and_tls_by_its_scheme_and_aws_is_neither() -> None:
    local = S3aStore(endpoint="http://127.0.0.1:9000", access_key="k", secret_key="s").hadoop_options()
    assert local == {"fs.s3a.endpoint.region": "us-east-1", "fs.s3a.endpoint": "http://127.0.0.1:9000",
                     "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.path.style.access": "true",
                     "fs.s3a.access.key": "k", "fs.s3a.secret.key": "s"}
    tls = S3aStore(endpoint="https://s3.example", path_style=False).hadoop_options()
    assert tls["fs.s3a.connection.ssl.enabled"] == "true" and tls["fs.s3a.path.style.access"] == "false"
    assert "fs.s3a.access.key" not in tls  # s3a's own credential chain on each host
    aws = S3aStore(region="eu-west-1").hadoop_options()
    assert aws == {"fs.s3a.endpoint.region": "eu-west-1", "fs.s3a.path.style.access": "false"}


def test_the_keys_never_show_in_the_stores_repr() -> None:
    shown = repr(S3aStore(endpoint="http://h:1", access_key="AKIDSECRET", secret_key="very-secret",
                          session_token="token-secret"))
    assert not [value for value in ("AKIDSECRET", "very-secret", "token-secret") if value in shown], shown


def test_s3a_takes_hadoop_aws_of_pysparks_hadoop_and_only_the_sdk_modules_it_needs() -> None:
    hadoop = hadoop_version()
    jars, excludes = s3a_packages(hadoop)
    assert jars[0] == f"org.apache.hadoop:hadoop-aws:{hadoop}"
    assert hadoop in AWS_SDK_OF_HADOOP, "the installed PySpark's Hadoop has a known SDK version"
    assert all(jar.startswith("software.amazon.awssdk:") and jar.endswith(AWS_SDK_OF_HADOOP[hadoop])
               for jar in jars[1:])
    assert "software.amazon.awssdk:bundle" in excludes == list(S3A_EXCLUDES)
    assert s3a_packages("9.9.9") == (["org.apache.hadoop:hadoop-aws:9.9.9"], [])  # unknown: the bundle, correct


def test_which_locations_and_masters_need_what() -> None:
    assert uses_s3a("/tmp/cp", "s3a://b/cp") and not uses_s3a("/tmp/cp", "s3://b/cp", "hdfs://nn/cp")
    assert is_local("local[*]") and is_local("local-cluster[2,1,1024]") and not is_local("spark://h:7077")


def test_the_archive_holds_every_package_of_reclaim_with_its_schemas_and_no_bytecode(tmp_path: Path) -> None:
    archive = reclaim_archive(tmp_path)
    names = zipfile.ZipFile(archive).namelist()
    for expected in ("reclaim/__init__.py", "reclaim/retention/spark_state.py", "reclaim/storage/s3.py",
                     "reclaim/schemas/avro/reclaim.PendingDeleteLedgerInfo.avsc"):
        assert expected in names
    assert not [name for name in names if name.endswith(".pyc") or "__pycache__" in name]
    assert reclaim_archive(tmp_path) == archive  # the same content, the same file: nothing rebuilt
