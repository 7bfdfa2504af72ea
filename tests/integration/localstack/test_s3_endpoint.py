"""The local S3 endpoint answers boto3 over HTTP: put, list, delete."""

from __future__ import annotations

import pytest

from reclaim.localstack.s3_server import S3Endpoint, s3_client

pytestmark = pytest.mark.integration


def test_put_list_delete(s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    client = s3_client(s3_endpoint)
    for i in range(3):
        client.put_object(Bucket=s3_bucket, Key=f"chunks/c{i}", Body=b"x" * i, Metadata={"stream": "s/a"})
    listed = client.list_objects_v2(Bucket=s3_bucket, Prefix="chunks/")
    assert sorted(o["Key"] for o in listed["Contents"]) == ["chunks/c0", "chunks/c1", "chunks/c2"]
    assert client.head_object(Bucket=s3_bucket, Key="chunks/c1")["Metadata"] == {"stream": "s/a"}

    client.delete_objects(Bucket=s3_bucket, Delete={"Objects": [{"Key": "chunks/c0"}, {"Key": "chunks/c1"}]})
    remaining = client.list_objects_v2(Bucket=s3_bucket, Prefix="chunks/")
    assert [o["Key"] for o in remaining["Contents"]] == ["chunks/c2"]
