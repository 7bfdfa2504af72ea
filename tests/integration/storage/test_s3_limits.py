"""Names and tags within AWS S3's limits, refused before any I/O: chunk-name rules, key length, metadata size."""

from __future__ import annotations

from typing import Any

import pytest

from reclaim.localstack.s3_server import S3Endpoint, s3_client
from reclaim.storage.chunks import ChunkHandle, ChunkTags, DeleteOutcome, validate_chunk_name
from reclaim.storage.errors import ChunkTagsTooLargeError, InvalidChunkNameError, StorageMisconfiguredError
from reclaim.storage.s3 import S3ChunkStorage, S3Settings

#: A name of 4 components of 250 bytes: 1003 bytes, a valid chunk name on its own.
LONG_NAME = "/".join(["n" * 250] * 4)
#: With this prefix its S3 key is 1025 bytes (a prefix of its own component: the name's stay within 255).
LONG_PREFIX = "p" * 21 + "/"


@pytest.mark.parametrize("good", ["a" * 255, "é" * 127 + "x", ". a", "...", "a/.b/c..", " /x", "s/ \u00a0/c"])
def test_names_within_the_rules(good: str) -> None:
    assert validate_chunk_name(good) == good


@pytest.mark.parametrize(("bad", "reason"), [
    ("a" * 256, "longer than 255 bytes"),
    ("seg/" + "é" * 128, "longer than 255 bytes"),
    ("a/ ./b", "'.' or '..'"),
    ("a/ .. /b", "'.' or '..'"),
    ("a/\u00a0..", "'.' or '..'"),
    (".. ", "'.' or '..'"),
])
def test_names_beyond_the_rules(bad: str, reason: str) -> None:
    with pytest.raises(InvalidChunkNameError) as info:
        validate_chunk_name(bad)
    assert reason in str(info.value) and "\n" not in str(info.value)


class _NoIOClient:
    def __getattr__(self, item: str) -> Any:
        raise AssertionError(f"no I/O expected, got {item}")


def test_s3_key_over_1024_bytes_is_refused_by_every_verb_before_io() -> None:
    s3 = S3ChunkStorage(S3Settings(bucket="b", key_prefix=LONG_PREFIX), client=_NoIOClient())
    handle = ChunkHandle(LONG_NAME, read_only=False)
    calls = [lambda: s3.location(LONG_NAME), lambda: s3.exists(LONG_NAME), lambda: s3.get_info(LONG_NAME),
             lambda: s3.create(LONG_NAME), lambda: s3.create_with_content(LONG_NAME, b"x"),
             lambda: s3.open_read(LONG_NAME), lambda: s3.open_write(LONG_NAME), lambda: s3.delete(handle),
             lambda: s3.read(handle, 0, 1), lambda: s3.write(handle, 0, b"x")]
    for call in calls:
        with pytest.raises(InvalidChunkNameError, match="1025 bytes, over 1024"):
            call()
    result = s3.delete_many([LONG_NAME])[0]
    assert result.outcome is DeleteOutcome.FAILED and isinstance(result.error, InvalidChunkNameError)
    assert s3.exists_many([LONG_NAME]) == set()
    assert S3ChunkStorage(S3Settings(bucket="b", key_prefix=LONG_PREFIX[1:])).location(LONG_NAME).key == LONG_NAME


def test_a_key_prefix_that_lengthens_the_first_component_past_255_bytes_is_refused_before_io() -> None:
    """MinIO stores keys as paths and refuses a component over 255 bytes (XMinioInvalidObjectName), where
    AWS would not: a prefix without a trailing '/' joins the name's first component, so the key is held
    to the chunk-name rules as a whole."""
    name = "s" * 250 + "/c"
    joined = S3ChunkStorage(S3Settings(bucket="b", key_prefix="tier2-"), client=_NoIOClient())
    calls = [lambda: joined.location(name), lambda: joined.exists(name), lambda: joined.create_with_content(name, b"x"),
             lambda: joined.open_read(name)]
    for call in calls:
        with pytest.raises(InvalidChunkNameError, match="key prefix 'tier2-'.*longer than 255 bytes"):
            call()
    assert joined.delete_many([name])[0].outcome is DeleteOutcome.FAILED
    assert joined.location("s" * 249 + "/c").key == "s" * 249 + "/c", "255 bytes with the prefix still fit"
    assert S3ChunkStorage(S3Settings(bucket="b", key_prefix="tier2/")).location(name).key == name


@pytest.mark.parametrize("prefix", ["tier2//", "./tier2/", "tier2/../", "/tier2/"])
def test_a_key_prefix_that_makes_no_valid_key_is_a_misconfiguration_before_io(prefix: str) -> None:
    """MinIO refuses keys with an empty, '.' or '..' component (XMinioInvalidObjectName/ResourceName)."""
    s3 = S3ChunkStorage(S3Settings(bucket="b", key_prefix=prefix), name="s3-tier2", client=_NoIOClient())
    with pytest.raises(StorageMisconfiguredError, match=f"S3 key prefix {prefix!r} of storage binding 's3-tier2'"):
        s3.check()
    with pytest.raises(InvalidChunkNameError, match="breaks the key rules"):
        s3.exists("seg/c")


def _tags(stream: str) -> ChunkTags:
    return ChunkTags(component="c", stream=stream, segment="s/0", writer_epoch=1)


#: The user metadata of ``_tags("")``: five x-amz-meta-reclaim-* header names (140 bytes) and values (14).
EMPTY_STREAM_METADATA = 154


def _written_as_metadata(s3: S3ChunkStorage) -> int:
    """What the binding adds: the chunk name's digest (31 + 64), its name (26 + n) and bucket (25 + n)."""
    return 31 + 64 + 26 + len(s3.name) + 25 + len(s3.bucket or "")


@pytest.mark.integration
def test_s3_refuses_oversized_tags_and_keys_before_the_put(s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    s3 = S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket, key_prefix=LONG_PREFIX))
    with pytest.raises(InvalidChunkNameError):
        s3.create_with_content(LONG_NAME, b"x", _tags("s"))
    # 800 'ë' are 1600 UTF-8 bytes, 4800 once percent-encoded: 4.8 KB of tags.
    big = 4954 + _written_as_metadata(s3)
    with pytest.raises(ChunkTagsTooLargeError, match=f"{big} bytes of S3 user metadata, over 2048") as info:
        s3.create_with_content("seg/big-tags", b"x", _tags("ë" * 800))
    assert not info.value.retryable
    room = 2048 - EMPTY_STREAM_METADATA - _written_as_metadata(s3)
    with pytest.raises(ChunkTagsTooLargeError):
        s3.create("seg/limit-plus-one", _tags("s" * (room + 1)))
    s3.create_with_content("seg/at-limit", b"x", _tags("s" * room))
    listed = s3_client(s3_endpoint).list_objects_v2(Bucket=s3_bucket).get("Contents", [])
    assert [item["Key"] for item in listed] == [LONG_PREFIX + "seg/at-limit"], "nothing refused reached S3"
    assert s3.get_info("seg/at-limit").tags == _tags("s" * room)
    assert s3.get_info("seg/at-limit").written_as == s3.written_as("seg/at-limit")


@pytest.mark.integration
def test_s3_refuses_a_key_whose_prefix_joins_an_overlong_component_before_the_put(
        s3_endpoint: S3Endpoint, s3_bucket: str) -> None:
    s3 = S3ChunkStorage(s3_endpoint.binding_settings(s3_bucket, key_prefix="tier2-"))
    with pytest.raises(InvalidChunkNameError):
        s3.create_with_content("s" * 250 + "/c", b"x", _tags("s"))
    s3.create_with_content("s" * 249 + "/c", b"x", _tags("s"))
    listed = s3_client(s3_endpoint).list_objects_v2(Bucket=s3_bucket).get("Contents", [])
    assert [item["Key"] for item in listed] == ["tier2-" + "s" * 249 + "/c"]
    assert s3.exists("s" * 249 + "/c") and not s3.exists("s" * 249 + "/d")
