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


class _Raw:
    """The body of a canned HTTP response, as botocore reads one (``stream()``)."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def _replying(client: Any, body: bytes, status: int = 200) -> None:
    """Answer the client's DeleteObjects with ``body`` instead of sending it anywhere."""
    from botocore.awsrequest import AWSResponse

    def reply(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, status, {"content-type": "application/xml"}, _Raw(body))

    client.meta.events.register("before-send.s3.DeleteObjects", reply)


def _deleted_reply(keys: list[str], errors: str = "") -> bytes:
    deleted = "".join(f"<Deleted><Key>{key}</Key></Deleted>" for key in keys)
    return (f'<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="{NS[1:-1]}">{deleted}{errors}'
            "</DeleteResult>").encode()


def test_botocore_checks_the_reply_for_an_error_after_its_deleted_entries_are_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # botocore parses a whole 200 reply to find an error document sent with it; for a server that ignores
    # Quiet (moto lists every key) that tree of 1000 entries cost as much as the rest of the reply's handling.
    import botocore.handlers

    checked: list[bytes] = []
    check = botocore.handlers._looks_like_special_case_error

    def spy(status_code: int, body: bytes) -> bool:
        checked.append(body)
        return check(status_code, body)

    monkeypatch.setattr(botocore.handlers, "_looks_like_special_case_error", spy)
    client = _client()
    assert s3_delete.install(client)
    error = "<Error><Key>k/1</Key><Code>AccessDenied</Code><Message>no</Message></Error>"
    _replying(client, _deleted_reply([f"k/{i}" for i in range(2, 50)], error))
    response = s3_delete.delete_objects(client, "bucket", [f"k/{i}" for i in range(50)])
    assert response["Errors"] == [{"Key": "k/1", "Code": "AccessDenied", "Message": "no"}]
    assert "Deleted" not in response
    assert checked, "botocore no longer checks a 200 reply for an error document"
    assert all(b"<Deleted>" not in body for body in checked)


@pytest.mark.parametrize("body", [
    _deleted_reply(["k/0", "k/1"])[:-40],  # cut short after a whole entry
    _deleted_reply(["k/0", "k/1"])[:-30],  # cut inside the last entry
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>x</Message></Error>',
])
def test_a_reply_cut_short_or_an_error_sent_with_200_still_fails_the_call(body: bytes) -> None:
    from botocore.exceptions import ClientError

    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s",
                          endpoint_url="http://127.0.0.1:1",
                          config=Config(parameter_validation=False, retries={"max_attempts": 1}))
    assert s3_delete.install(client)
    _replying(client, body)
    with pytest.raises(ClientError):
        s3_delete.delete_objects(client, "bucket", ["k/0", "k/1"])
