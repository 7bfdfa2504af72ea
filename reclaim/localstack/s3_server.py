"""The local S3 endpoint: moto's server on loopback, with a bucket created."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from reclaim.localstack.procs import free_port, spawn, wait_until
from reclaim.storage.s3 import S3Settings

#: Credentials the local endpoint accepts; moto checks nothing, but boto3 insists on some. Used for the
#: local stack's own endpoint only, never as defaults of a configured one.
LOCAL_ACCESS_KEY = "reclaim"
LOCAL_SECRET_KEY = "reclaim-secret"
LOCAL_REGION = "us-east-1"


@dataclass(frozen=True)
class S3Endpoint:
    """Where a running S3 endpoint answers and the credentials to use there (the local endpoint's keys
    unless given; ``access_key`` None is boto3's credential chain)."""

    url: str
    access_key: str | None = LOCAL_ACCESS_KEY
    secret_key: str | None = field(default=LOCAL_SECRET_KEY, repr=False)
    region: str = LOCAL_REGION
    session_token: str | None = field(default=None, repr=False)

    def binding_settings(self, bucket: str, key_prefix: str = "") -> S3Settings:
        """Settings of an S3 chunk-storage binding on this endpoint's ``bucket``."""
        return S3Settings(bucket=bucket, endpoint_url=self.url, access_key=self.access_key,
                          secret_key=self.secret_key, session_token=self.session_token, region=self.region,
                          key_prefix=key_prefix)

    def credentials_env(self) -> dict[str, str]:
        """The ``RECLAIM_S3_*`` variables of this endpoint's credentials and region, for a reclaim process."""
        variables = {"RECLAIM_S3_ACCESS_KEY": self.access_key, "RECLAIM_S3_SECRET_KEY": self.secret_key,
                     "RECLAIM_S3_SESSION_TOKEN": self.session_token, "RECLAIM_S3_REGION": self.region}
        return {name: value for name, value in variables.items() if value}

    def reclaim_env(self, bucket: str) -> dict[str, str]:
        """The ``RECLAIM_S3_*`` variables that point a reclaim process at this endpoint's ``bucket``."""
        return {"RECLAIM_S3_ENDPOINT": self.url, "RECLAIM_S3_BUCKET": bucket, **self.credentials_env()}


def answers(url: str) -> bool:
    """True when a moto server at ``url`` answers an HTTP request within a second."""
    try:
        with urllib.request.urlopen(url + "/moto-api/", timeout=1):
            return True
    except OSError:
        return False


def start_s3(log: Path, port: int | None = None, host: str = "127.0.0.1",
             timeout: float = 60.0) -> tuple[subprocess.Popen[bytes], S3Endpoint]:
    """Start moto's S3 server on ``host``:``port`` (a free port when None) and wait until it answers."""
    port = port or free_port(host)
    proc = spawn([sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)], log)
    endpoint = S3Endpoint(url=f"http://{host}:{port}")
    wait_until(lambda: answers(endpoint.url), timeout, "S3 endpoint (moto)", proc, log)
    return proc, endpoint


def s3_client(endpoint: S3Endpoint):  # type: ignore[no-untyped-def]
    """A boto3 S3 client bound to ``endpoint`` (path-style addressing, as local endpoints need)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=endpoint.url, aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key, aws_session_token=endpoint.session_token,
        region_name=endpoint.region,
        config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 3}),
    )


def ensure_bucket(endpoint: S3Endpoint, bucket: str) -> None:
    """Create ``bucket`` unless it exists already."""
    client = s3_client(endpoint)
    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        client.create_bucket(Bucket=bucket)
