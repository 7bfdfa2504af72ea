"""The DeleteObjects body built by hand and the reply's Deleted entries dropped, against botocore's own client."""

from __future__ import annotations

import base64
import hashlib
import xml.etree.ElementTree as ET
import zlib
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from reclaim.storage import s3_delete

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def test_the_body_names_every_key_escaped_in_quiet_mode() -> None:
    keys = ["chunks/a&b", "chunks/<c>", "plain"]
    root = ET.fromstring(s3_delete.request_body(keys))
    assert root.tag == f"{NS}Delete"
    assert [node.text for node in root.iter(f"{NS}Key")] == keys
    assert root.find(f"{NS}Quiet").text == "true"  # type: ignore[union-attr]


@pytest.mark.parametrize("keys", [
    [], ["one"], ["a&b", "<c>", "d>e&&f", "plain/x"], ["has\x00nul", "b&"], ["\x00", "\x00"],
])
def test_the_keys_escaped_at_once_read_back_as_each_key_escaped_on_its_own(keys: list[str]) -> None:
    from xml.sax.saxutils import escape

    one_by_one = "".join(f"<Object><Key>{escape(key)}</Key></Object>" for key in keys)
    expected = f'<Delete xmlns="{NS[1:-1]}">{one_by_one}<Quiet>true</Quiet></Delete>'.encode()
    assert s3_delete.request_body(keys) == expected


def test_the_reply_keeps_its_errors_and_loses_its_deleted_entries() -> None:
    body = (b'<?xml version="1.0"?><DeleteResult><Deleted><Key>k/0</Key></Deleted>'
            b"<Error><Key>k/1</Key><Code>AccessDenied</Code><Message>no</Message></Error>"
            b"<Deleted><Key>k/2</Key><VersionId>v</VersionId></Deleted></DeleteResult>")
    reply: dict[str, Any] = {"status_code": 200, "body": body}
    s3_delete._drop_deleted(reply)
    assert reply["body"] == (b'<?xml version="1.0"?><DeleteResult>'
                             b"<Error><Key>k/1</Key><Code>AccessDenied</Code><Message>no</Message></Error>"
                             b"</DeleteResult>")


def _client() -> Any:
    return boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s",
                        endpoint_url="http://127.0.0.1:1", config=Config(parameter_validation=False))


class _Sent(Exception):
    pass


def test_the_request_carries_the_built_body_with_its_checksum() -> None:
    client = _client()
    assert s3_delete.install(client)
    sent: list[Any] = []

    def capture(request: Any, **_: Any) -> None:
        sent.append(request)
        raise _Sent  # nothing to send it to

    client.meta.events.register("before-send.s3.DeleteObjects", capture)
    with pytest.raises(_Sent):
        s3_delete.delete_objects(client, "bucket", ["k/0", "k/1"])
    assert sent[0].body == s3_delete.request_body(["k/0", "k/1"])
    # The checksum S3 verifies is of the body sent, not of the empty list botocore serialized.
    body = sent[0].body
    expected = {"x-amz-checksum-crc32": base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode(),
                "content-md5": base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()}
    found = {name.lower(): value for name, value in sent[0].headers.items() if name.lower() in expected}
    assert found, "botocore no longer adds a checksum of the body it sends"
    assert all(expected[name] == (value.decode() if isinstance(value, bytes) else value)
               for name, value in found.items())


def test_a_client_without_the_hook_fails_the_call_instead_of_deleting_fewer_keys() -> None:
    client = _client()  # no install(): botocore would send an empty list
    with Stubber(client) as stub:
        stub.add_response("delete_objects", {})
        with pytest.raises(s3_delete.BodyNotSent):
            s3_delete.delete_objects(client, "bucket", ["k/0"])


def test_a_stub_without_events_is_not_hooked() -> None:
    assert not s3_delete.install(object())
